// FNV-1a 64 over the bytes of a string: one constexpr definition for the name hashes that seed
// counter-based random streams (zero/param_init.cpp: each parameter's initialisation stream;
// model_zoo/lora.cpp: each adapter's dropout salt). The offset basis and prime are parameters
// with the standard values as defaults; those two callers pass kNameHashOffset, whose value
// every initialised parameter and dropout mask depends on; the CPU GEMM path cache hashes its
// keys with the defaults. Pinned by tests/runtime/fnv1a_test.cpp.
#pragma once

#include <cstdint>
#include <string_view>

namespace zt {

// FNV-1a 64's standard offset basis and prime.
inline constexpr uint64_t kFnv1a64Offset = 14695981039346656037ull;
inline constexpr uint64_t kFnv1a64Prime = 1099511628211ull;
// The standard offset basis short of its last digit: the one the parameter-initialisation and
// LoRA dropout name hashes have always used. Keep it: a new value re-rolls every initialised
// parameter and every dropout mask.
inline constexpr uint64_t kNameHashOffset = 1469598103934665603ull;

// h = offset; for each byte b (as unsigned, 0..255): h = (h ^ b) * prime, modulo 2^64.
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t offset = kFnv1a64Offset,
                           uint64_t prime = kFnv1a64Prime) {
  uint64_t h = offset;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * prime;
  return h;
}

}  // namespace zt
