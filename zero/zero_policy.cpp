// ZeroPolicy per stage; ShardLayout padding.
#include "zero/zero_policy.h"

#include "runtime/status.h"

namespace zt {

ZeroPolicy ZeroPolicy::for_stage(int stage) {
  ZT_ASSERT(stage >= 0 && stage <= 3, "ZeRO stage {}", stage);
  return ZeroPolicy{stage >= 1, stage >= 2, stage >= 3};
}

ShardLayout::ShardLayout(int64_t numel_, int world_, int rank_, int64_t align)
    : numel(numel_), rank(rank_), world(world_) {
  ZT_ASSERT(world > 0 && rank >= 0 && rank < world && align > 0, "world {} rank {}", world, rank);
  const int64_t unit = static_cast<int64_t>(world) * align;
  padded = (numel + unit - 1) / unit * unit;
  shard = padded / world;
}

}  // namespace zt
