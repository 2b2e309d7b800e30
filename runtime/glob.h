// Glob patterns over Hugging Face tensor names (zt.freeze): '*' matches any run of characters,
// dots included, and '?' exactly one; every other character matches itself (no classes, no
// escapes, case-sensitive), and a pattern matches the whole name. "model.layers.1.*" matches
// every tensor of block 1 and none of block 10; "model.layers.1*" matches both; "*.bias" every
// bias. Pure string arithmetic: no allocation, no config knowledge (runtime/config reads the
// patterns, model_zoo/ matches them). Pinned by tests/runtime/glob_test.cpp.
#pragma once

#include <string_view>

namespace zt {

// True when `pattern` matches the whole of `name`.
bool glob_match(std::string_view pattern, std::string_view name);

}  // namespace zt
