// Deterministic parameter initialisation from a ParamSpec table. Each element's value depends
// only on (seed, tensor name, element index) — counter-based, like Philox — so a shard
// initialised alone equals the same range of the whole tensor, on any world size or thread
// count. No allocation, no communication.
#pragma once

#include <cstdint>

#include "runtime/flat_layout.h"

namespace zt {

// Fills elements [begin, end) of one tensor (indices within the tensor) at `dst`.
void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t end, float* dst);
// Fills a whole flat buffer of `layout`; padding between tensors and padded rows become 0.
void init_flat_buffer(const FlatLayout& layout, uint64_t seed, float* flat);

}  // namespace zt
