// SwappedState: an offloaded optimizer's fp32 state on NVMe (ZeRO-Infinity's optimizer tier):
// for every unit, this rank's master range and the optimizer's state tensors (Adam: m, v; SGD
// with momentum: the momentum) live in swap files of a SwapStore, a chunk of kChunk elements per
// file, keyed "<unit>.<kind>.<chunk>" (e.g. "h3.exp_avg.2"), so names are the same in every run.
// Host memory holds only two chunk-sized sets of staging buffers (on the host tier's Device):
// update() streams a unit, reading chunk c+1 while chunk c is updated and chunk c-1 is written
// back. Every read is checked against the checksums the store wrote (a corrupted or truncated
// swap file is an error naming the file, never used). Not thread-safe: the engine's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "offload/swap_store.h"
#include "runtime/device.h"

namespace zt {

class SwappedState {
 public:
  static constexpr int64_t kChunk = int64_t{1} << 20;  // elements per swap file

  // `units`: each unit's name and its master range's element count; `kinds`: the names of the
  // optimizer's state tensors after the master ("exp_avg", "exp_avg_sq"), which start at zero.
  // Writes those zeros; the masters are written by write_master.
  SwappedState(SwapStore& store, Device& host, std::vector<std::string> units,
               std::vector<int64_t> sizes, std::vector<std::string> kinds);
  ~SwappedState();

  int num_kinds() const { return static_cast<int>(kinds_.size()) + 1; }  // the master first
  // Elements [begin, begin + count) of unit u's master range set to `values` (host memory);
  // chunks only partly covered are read and rewritten.
  void write_master(int u, int64_t begin, const float* values, int64_t count) {
    write_part(u, 0, begin, values, count);
  }
  // The same for kind k (0: the master) of unit u (a checkpoint loaded into the swap files).
  void write_part(int u, int kind, int64_t begin, const float* values, int64_t count);
  // Elements [begin, begin + count) of kind k of unit u into host memory at dst (a checkpoint
  // streamed out a chunk at a time); chunks only partly covered are read through the staging.
  void read_part(int u, int kind, int64_t begin, int64_t count, float* dst);
  // Streams unit u through the staging: f(begin, count, state) for each chunk in order, state[0]
  // the master and state[1..] the kinds, `count` floats each, updated in place by f and written
  // back. The next chunk's reads are in flight while f runs, the previous chunk's writes too.
  using ChunkUpdate = std::function<void(int64_t begin, int64_t count, float* const* state)>;
  void update(int u, const ChunkUpdate& f);
  // Kind k (0: the master) of unit u, whole, into host memory at dst.
  void read(int u, int kind, float* dst);
  // Bytes the swap files hold (each file's bytes as written; the store pads them to 4096).
  int64_t bytes() const;

 private:
  struct Set {
    std::vector<Buffer> state;  // num_kinds() buffers of kChunk floats
    std::vector<SwapHandle> pending;
  };
  std::string key(int u, int kind, int64_t chunk) const;
  int64_t chunks(int u) const { return (sizes_[u] + kChunk - 1) / kChunk; }
  int64_t chunk_size(int u, int64_t c) const { return std::min(kChunk, sizes_[u] - c * kChunk); }
  void start_reads(Set& set, int u, int64_t c);
  void finish(Set& set);

  SwapStore& store_;
  std::vector<std::string> units_;
  std::vector<int64_t> sizes_;
  std::vector<std::string> kinds_;
  Set sets_[2];
};

}  // namespace zt
