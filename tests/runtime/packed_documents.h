// Batch::positions (runtime/model.h) for test rows that pack several documents, shared by the
// kernel suites (CPU and CUDA) and the model tests. Helpers only; no tests here.
#pragma once

#include <cstdint>
#include <vector>

namespace zt::test {

// rows[b]: row b's document lengths in order, summing to the row length T. A row's first
// document may be the rest of one cut at the previous row's end: it starts at position 0 all
// the same (model.h), so every row starts with position 0.
inline std::vector<int32_t> document_positions(const std::vector<std::vector<int32_t>>& rows) {
  std::vector<int32_t> positions;
  for (const std::vector<int32_t>& lengths : rows)
    for (int32_t n : lengths)
      for (int32_t p = 0; p < n; ++p) positions.push_back(p);
  return positions;
}

// The first key query bt = b·T + t attends to, t - positions[bt] (0 when positions is null):
// the references' window is [first_key, t].
inline int64_t first_key(const int32_t* positions, int64_t bt, int64_t T) {
  return positions ? bt % T - positions[bt] : 0;
}

// Two rows of 13: documents of 5, 1 and 7 tokens (boundaries inside a block of 4 queries, one
// document of a single token), then 4 and 9 (a boundary at a block's edge).
inline std::vector<int32_t> two_rows_of_13() { return document_positions({{5, 1, 7}, {4, 9}}); }

}  // namespace zt::test
