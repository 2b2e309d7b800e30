// glob_match: one pass over the name, remembering the last '*' to back up to. Each '*' only
// moves the resume point forward, so the work is O(pattern x name) at worst, never exponential
// ("*a*a*a*b" against "aaaa...": tests/runtime/glob_test.cpp, GlobMatch.NoExponentialBacktracking).
#include "runtime/glob.h"

#include <cstddef>

namespace zt {

bool glob_match(std::string_view pattern, std::string_view name) {
  size_t p = 0;  // next pattern character
  size_t n = 0;  // next name character
  // The last '*' seen: the pattern index after it and the name index it has absorbed up to.
  size_t star = std::string_view::npos;
  size_t star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = ++p;
      star_n = n;
    } else if (star != std::string_view::npos) {
      // A mismatch after a '*': let the '*' absorb one more character and retry from there.
      p = star;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;  // trailing '*' match the empty run
  return p == pattern.size();
}

}  // namespace zt
