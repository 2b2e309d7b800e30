// ProfilingKernels: a Kernels decorator that times every entry of a base table and forwards
// the call unchanged (the base's results, bit for bit); its entries are generated from
// runtime/kernel_entries.h. OpProfile is the table it fills: per entry name, total seconds and
// calls. zt-bench train --profile hands it to the engine through EngineOptions::kernels and
// prints time per entry per step.
//
// Two clocks. The host clock (std::chrono::steady_clock) around each call: the CPU back end
// computes before returning, so that is the kernel's time; an optional `synchronize` is called
// before each clock read (a back end that enqueues could pass a stream synchronize, at the cost
// of serializing the host with the device). Or a StreamTimer (runtime/device.h; a GPU's CUDA
// events on the compute stream, Device::make_stream_timer): each call's queued work is marked
// as a span without waiting, and flush() (once per step, after the step) reads the spans back
// into the profile. Not thread-safe: one caller thread, as the engine's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>

#include <memory>
#include <vector>

#include "runtime/device.h"
#include "runtime/kernels.h"

namespace zt {

struct OpTime {
  double seconds = 0.0;
  int64_t calls = 0;
};

class OpProfile {
 public:
  void add(const std::string& name, double seconds);
  void reset() { ops_.clear(); }
  const std::map<std::string, OpTime>& ops() const { return ops_; }
  double total_seconds() const;

 private:
  std::map<std::string, OpTime> ops_;  // by entry name
};

class ProfilingKernels final : public Kernels {
 public:
  // `base` and `profile` must outlive this table; several tables may fill one profile (the
  // engine's fp32 table and its table for the compute dtype).
  ProfilingKernels(Kernels& base, OpProfile& profile, std::function<void()> synchronize = {})
      : base_(base), profile_(profile), synchronize_(std::move(synchronize)) {}
  // Timed by `timer` (not null): the profile receives the times at flush().
  ProfilingKernels(Kernels& base, OpProfile& profile, std::unique_ptr<StreamTimer> timer)
      : base_(base), profile_(profile), timer_(std::move(timer)) {}

  // With a StreamTimer: waits for the spans of the calls so far and adds them to the profile
  // (a call that threw is left out). Without one: nothing (the profile is already current).
  void flush();

  OpProfile& profile() { return profile_; }
  const OpProfile& profile() const { return profile_; }

  // Every entry of runtime/kernel_entries.h: the base's entry with the same arguments, timed
  // under the entry's name.
#define ZT_KERNEL(ret, name, params, args, memory)        \
  ret name params override {                              \
    return timed(#name, [&] { return base_.name args; }); \
  }
#include "runtime/kernel_entries.h"

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point now() {
    if (synchronize_) synchronize_();
    return Clock::now();
  }
  void record(const char* name, Clock::time_point t0) {
    profile_.add(name, std::chrono::duration<double>(now() - t0).count());
  }
  // Runs call() (the base's entry) between two clock reads, adds the time under `name` and
  // returns what call() returned. A call that throws is not recorded.
  template <typename Call>
  std::invoke_result_t<Call> timed(const char* name, Call&& call) {
    if (timer_) return stream_timed(name, call);
    const Clock::time_point t0 = now();
    if constexpr (std::is_void_v<std::invoke_result_t<Call>>) {
      call();
      record(name, t0);
    } else {
      auto result = call();
      record(name, t0);
      return result;
    }
  }

  // call() inside a StreamTimer span, its name kept for flush() (null: the call threw).
  template <typename Call>
  std::invoke_result_t<Call> stream_timed(const char* name, Call& call) {
    timer_->start();
    try {
      if constexpr (std::is_void_v<std::invoke_result_t<Call>>) {
        call();
        timer_->stop();
        span_names_.push_back(name);
      } else {
        auto result = call();
        timer_->stop();
        span_names_.push_back(name);
        return result;
      }
    } catch (...) {
      timer_->stop();
      span_names_.push_back(nullptr);
      throw;
    }
  }

  Kernels& base_;
  OpProfile& profile_;
  std::function<void()> synchronize_;
  std::unique_ptr<StreamTimer> timer_;
  std::vector<const char*> span_names_;  // the timer's spans since the last flush, in order
};

}  // namespace zt
