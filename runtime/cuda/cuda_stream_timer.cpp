// CudaStreamTimer (cuda_stream_timer.h).
#include "runtime/cuda/cuda_stream_timer.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/status.h"

namespace zt {

CudaStreamTimer::~CudaStreamTimer() {
  cudaSetDevice(ordinal_);
  if (recorded_ > 0) cudaEventSynchronize(events_[recorded_ - 1]);  // none still pending
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t CudaStreamTimer::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    ZT_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled (the default flags)
    events_.push_back(e);
  }
  return events_[i];
}

void CudaStreamTimer::start() {
  ZT_ASSERT(!open_, "StreamTimer::start: the previous span was not stopped");
  ZT_CUDA_CHECK(cudaEventRecord(event(recorded_), stream_));
  ++recorded_;
  open_ = true;
}

void CudaStreamTimer::stop() {
  ZT_ASSERT(open_, "StreamTimer::stop without start");
  ZT_CUDA_CHECK(cudaEventRecord(event(recorded_), stream_));
  ++recorded_;
  open_ = false;
}

std::vector<double> CudaStreamTimer::collect() {
  ZT_ASSERT(!open_, "StreamTimer::collect inside a span");
  std::vector<double> seconds;
  if (recorded_ == 0) return seconds;
  // The stream runs in order: once the last stop event completed, every event has.
  ZT_CUDA_CHECK(cudaEventSynchronize(events_[recorded_ - 1]));
  seconds.reserve(recorded_ / 2);
  for (size_t s = 0; s + 1 < recorded_; s += 2) {
    float ms = 0.0f;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[s], events_[s + 1]));
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  recorded_ = 0;
  return seconds;
}

}  // namespace zt
