// LogitsChunking: how many rows of logits an LM head (lm_head.h's LmHeadLayer)
// computes at once. The logits of a chunk are a transient (rows, width) buffer in the
// activation dtype (sized here as fp32: a 16-bit run's take half), so the chunk bounds the
// head's activation memory; fewer, larger chunks make fewer, larger GEMMs.
// The budget is the device's (Device::chunk_budget_bytes, handed to the model by train/ through
// Model::set_chunk_budget_bytes): the CPU's 64 MiB by default, a fraction of a GPU's memory.
// Pure arithmetic; pinned by tests/model_zoo/logits_chunking_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/device.h"

namespace zt {

struct LogitsChunking {
  int64_t rows = 0;  // rows per chunk when > 0 (set_logits_chunk_rows); 0: from the budget
  int64_t budget_bytes = Device::kCpuChunkBudgetBytes;

  // Rows per chunk for N rows of `width` fp32 logits: `rows` (at most N) when set, else N split
  // into the fewest equal chunks whose logits fit in the budget (at least one row).
  int64_t rows_for(int64_t N, int64_t width) const {
    if (rows > 0) return std::min(rows, N);
    const int64_t budget_rows = std::max<int64_t>(1, budget_bytes / (width * 4));
    const int64_t chunks = (N + budget_rows - 1) / budget_rows;
    return (N + chunks - 1) / chunks;
  }
};

}  // namespace zt
