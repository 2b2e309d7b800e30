// ZeroPolicy per stage; ShardLayout padding.
#include "zero/zero_policy.h"

#include <fmt/ranges.h>

#include <vector>

#include "runtime/status.h"

namespace zt {

ZeroPolicy ZeroPolicy::for_stage(int stage) {
  ZT_ASSERT(stage >= 0 && stage <= 3, "ZeRO stage {}", stage);
  return ZeroPolicy{stage >= 1, stage >= 2, stage >= 3};
}

void ZeroPolicy::validate() const {
  if ((shard_params && !shard_grads) || (shard_grads && !shard_optimizer))
    throw_internal(
        fmt::format("ZeRO policy {} is not a stage: sharded parameters need sharded "
                    "gradients, and sharded gradients a sharded optimizer",
                    describe()));
}

std::string ZeroPolicy::describe() const {
  std::vector<std::string> on;
  if (shard_optimizer) on.push_back("shard_optimizer");
  if (shard_grads) on.push_back("shard_grads");
  if (shard_params) on.push_back("shard_params");
  return fmt::format("{{{}}}", fmt::join(on, ", "));
}

ShardLayout::ShardLayout(int64_t numel_, int world_, int rank_, int64_t align)
    : numel(numel_), rank(rank_), world(world_) {
  ZT_ASSERT(world > 0 && rank >= 0 && rank < world && align > 0, "world {} rank {}", world, rank);
  const int64_t unit = static_cast<int64_t>(world) * align;
  padded = (numel + unit - 1) / unit * unit;
  shard = padded / world;
}

}  // namespace zt
