// CudaStreamTimer: StreamTimer (runtime/device.h) on a CUDA stream. start() and stop() record a
// pair of CUDA events on the stream (no host wait); collect() synchronizes on the last stop
// event once and reads each pair's elapsed time. Events are created on first need and reused
// from one collect to the next, so steady-state profiling creates none. A span's time is the
// stream's, from when it reached the start event to when it reached the stop event: the
// kernels' time plus any gap in which the stream waited for the host to enqueue.
// Host code; private to runtime/cuda (reached through Device::make_stream_timer).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "runtime/device.h"

namespace zt {

class CudaStreamTimer final : public StreamTimer {
 public:
  CudaStreamTimer(int ordinal, cudaStream_t stream) : ordinal_(ordinal), stream_(stream) {}
  ~CudaStreamTimer() override;
  void start() override;
  void stop() override;
  std::vector<double> collect() override;

 private:
  cudaEvent_t event(size_t i);  // the pool's i-th event, created when first needed

  int ordinal_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // span s: events 2s (start) and 2s+1 (stop)
  size_t recorded_ = 0;              // events recorded since the last collect
  bool open_ = false;                // a span was started and not stopped
};

}  // namespace zt
