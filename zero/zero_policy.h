// ZeroPolicy: a ZeRO stage as data. The engine asks the policy what is sharded; it never
// branches on the stage number. ShardLayout: where this rank's shard of a unit's flat buffer
// lies. Pure arithmetic: no allocation, no communication.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

// Each level needs the one before: shard_params => shard_grads => shard_optimizer (a rank that
// keeps only a shard of the parameters can only update that shard, and can only be handed that
// shard's gradient). validate() throws kInternal naming the policy otherwise; the engine
// validates the policy it is given.
struct ZeroPolicy {
  bool shard_optimizer = false;  // stage >= 1: optimizer state (and the master) per shard
  bool shard_grads = false;      // stage >= 2: gradients kept per shard, reduced as produced
  bool shard_params = false;     // stage 3: parameters kept per shard, gathered per unit

  static ZeroPolicy for_stage(int stage);  // 0..3; anything else is an internal error
  void validate() const;
  int stage() const { return shard_params ? 3 : shard_grads ? 2 : shard_optimizer ? 1 : 0; }
  std::string describe() const;  // "{shard_optimizer, shard_grads}" or "{}" (stage 0)
};

// A unit's flat buffer of `numel` elements, padded to a multiple of world * align so every rank
// owns one contiguous, aligned range: rank r owns [r * shard, (r + 1) * shard).
struct ShardLayout {
  int64_t numel = 0;   // the unit's FlatLayout::numel()
  int64_t padded = 0;  // a multiple of world * align, >= numel
  int64_t shard = 0;   // padded / world
  int rank = 0;
  int world = 1;

  ShardLayout() = default;
  ShardLayout(int64_t numel, int world, int rank, int64_t align = 16);
  int64_t begin() const { return shard * rank; }  // this rank's range in the padded buffer
  int64_t end() const { return begin() + shard; }
};

}  // namespace zt
