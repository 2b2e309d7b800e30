// The memory's own speed limit: STREAM's triad (McCalpin), a[i] = b[i] + s·c[i] over three fp32
// arrays much larger than the last-level cache, on every OpenMP thread, measured in the same run
// as a bandwidth-bound kernel it is compared with (zt-bench adam). Ordinary stores, as STREAM
// compiled by GCC uses: the write of a[] first reads its lines (write-allocate), a transfer STREAM
// does not count, so the figure is 12 bytes per element over the time. A kernel that updates its
// arrays in place has no such hidden reads, so it can exceed this figure. Measurement only: the
// arrays are allocated once and first touched by the threads that stream them; no logging.
#pragma once

#include <cstdint>
#include <memory>

namespace zt {

class StreamTriad {
 public:
  // `elements` per array; 0: four times the last-level cache (STREAM's rule), at least 2^24.
  explicit StreamTriad(int64_t elements = 0);
  static int64_t default_elements();

  // One triad over the arrays, all threads; returns GB/s as STREAM counts it (12 bytes per
  // element, 1e9 bytes per GB).
  double run_gbps();
  // Best of `runs` runs (STREAM reports the best).
  double best_gbps(int runs);

  int64_t elements() const { return n_; }
  // True when a[i] = b[i] + s·c[i] holds for every element (after a run).
  bool check() const;

 private:
  int64_t n_;
  std::unique_ptr<float[]> a_, b_, c_;
};

// Bytes of the last-level cache this process sees (sysconf), or 0 when unknown.
int64_t last_level_cache_bytes();

}  // namespace zt
