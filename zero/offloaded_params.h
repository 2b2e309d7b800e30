// OffloadedParams: stage-3 parameter shards off the device (zero_optimization.offload_param,
// ZeRO-Infinity's parameter tier). Each sharded unit's working-parameter shard (this rank's
// shard of its padded flat buffer, in the compute dtype) lives
//   cpu   in the host tier's memory, one buffer per unit (kParams on the host tier), or
//   nvme  in a swap file "<unit>.params" of a SwapStore, with a pool of `buffers` host buffers
//         (offload_param.buffer_count), each the largest shard rounded up to 4 KiB plus 4 KiB to
//         align it for O_DIRECT (kParams on the host tier), holding the shards in use, the ones
//         fetched ahead, and the ones kept while there is room: a pooled shard is clean (its file
//         has the same bytes) once its write finished, so it can be dropped at any time without
//         writing.
// The engine copies a fetched shard to the device for its gather (fetch, release) and writes
// the updated shard after the optimizer step (begin_write, finish_write). Knows keys and bytes,
// not gathers or devices beyond the host tier. Not thread-safe: the engine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "offload/swap_store.h"
#include "runtime/device.h"

namespace zt {

class OffloadedParams {
 public:
  // `host`: the host tier whose memory holds the shards (swap null) or the pool (swap set);
  // `buffers` (>= 1) the pool's size, for nvme only, each buffer `largest` bytes (no shard
  // added is larger). Both must outlive this object.
  OffloadedParams(Device& host, SwapStore* swap, int buffers, size_t largest);
  ~OffloadedParams();
  OffloadedParams(const OffloadedParams&) = delete;
  OffloadedParams& operator=(const OffloadedParams&) = delete;

  // A unit's shard of `bytes` bytes (before the first fetch or write): returns its slot. Its
  // values are undefined until its first write.
  int add(std::string unit, size_t bytes);
  bool on_nvme() const { return swap_ != nullptr; }
  size_t bytes(int slot) const { return slots_[slot].bytes; }

  // nvme: the shards of `slots` (in order of use) are about to be gathered: reads start for
  // those not in host memory while a pool buffer is free or holds a shard not in the list. cpu:
  // nothing to do.
  void prefetch(std::span<const int> slots);
  // The shard's bytes in host memory, until release(slot): waits for its read, or reads it now
  // (dropping the least recently used shard that is not in use).
  const void* fetch(int slot);
  void release(int slot);
  // Host memory for the shard's new bytes (all of them; nothing is read), until finish_write,
  // which (nvme) starts writing them to the file.
  void* begin_write(int slot);
  void finish_write(int slot);
  // The whole shard into dst (inspection and tests).
  void read(int slot, void* dst);

  // Bytes in swap files (0 for cpu).
  int64_t nvme_bytes() const;
  // Swap-file reads started so far (tests: a prefetched or kept shard is not read again).
  int64_t reads() const { return reads_; }

 private:
  struct Slot {
    std::string key;
    size_t bytes = 0;
    Buffer own;       // cpu: the shard itself
    int buffer = -1;  // nvme: the pool buffer holding the shard, or -1
    bool written = false;
  };
  struct PoolBuffer {
    Buffer memory;
    int slot = -1;       // the shard it holds, or -1
    int pins = 0;        // fetch/begin_write not yet released
    SwapHandle pending;  // the read or write in flight
    uint64_t used = 0;   // last use, for dropping the least recently used
  };
  void make_pool();
  // A pool buffer for `slot`, dropping the least recently used unpinned shard that `keep` does
  // not name; -1 when there is none.
  int take_buffer(int slot, std::span<const int> keep);
  void settle(PoolBuffer& b);  // its request finished
  PoolBuffer& holder(int slot) { return pool_[static_cast<size_t>(slots_[slot].buffer)]; }

  Device& host_;
  SwapStore* swap_;
  int buffers_;
  std::vector<Slot> slots_;
  std::vector<PoolBuffer> pool_;
  size_t largest_ = 0;
  uint64_t clock_ = 0;
  int64_t reads_ = 0;
};

}  // namespace zt
