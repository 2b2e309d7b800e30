// ProfilingKernels: a Kernels decorator that times every entry of a base table and forwards
// the call unchanged (the base's results, bit for bit). OpProfile is the table it fills:
// per entry name, total seconds and calls. zt-bench train --profile hands it to the engine
// through EngineOptions::kernels and prints time per entry per step.
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

  void matmul_forward(float* out, const float* inp, ConstOperand weight, ConstOperand bias,
                      int64_t M, int64_t K, int64_t N, WeightLayout layout) override;
  void matmul_backward(float* dinp, Operand dweight, Operand dbias, const float* dout,
                       const float* inp, ConstOperand weight, int64_t M, int64_t K, int64_t N,
                       WeightLayout layout, GradOutput dinp_output = GradOutput::kAdd) override;
  void embedding_forward(float* out, const int32_t* tokens, ConstOperand wte, ConstOperand wpe,
                         int64_t B, int64_t T, int64_t C, const int32_t* positions) override;
  void embedding_backward(Operand dwte, Operand dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C, const int32_t* positions) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         ConstOperand weight, ConstOperand bias, int64_t N, int64_t C) override;
  void layernorm_backward(float* dinp, Operand dweight, Operand dbias, const float* dout,
                          const float* inp, ConstOperand weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override;
  void gelu_forward(float* out, const float* inp, int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH, const int32_t* positions) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t B, int64_t T, int64_t C, int64_t NH,
                          const int32_t* positions) override;
  void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                             int64_t NH, int64_t NKV, int64_t hd,
                             const int32_t* positions) override;
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                              int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                              const int32_t* positions) override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, ConstOperand weight, int64_t N,
                       int64_t C, float eps) override;
  void rmsnorm_backward(float* dinp, Operand dweight, const float* dout, const float* inp,
                        ConstOperand weight, const float* rstd, int64_t N, int64_t C) override;
  void rope_forward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                    const RopeFrequencies& rope, const int32_t* positions) override;
  void rope_backward(float* dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                     const RopeFrequencies& rope, const int32_t* positions) override;
  void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) override;
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N,
                       int64_t F) override;
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override;
  void accumulate(float* y, const float* x, int64_t n) override;
  void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t Vp, float dloss) override;
  void adamw(float* param, ConstOperand grad, float* m, float* v, int64_t n,
             const AdamWArgs& args, Operand working = nullptr) override;
  void sgd(float* param, ConstOperand grad, float* momentum_buf, int64_t n,
           const SgdArgs& args) override;
  void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) override;
  void round_to(float* x, DType dtype, int64_t n) override;
  void round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                  DType dtype) override;
  void add(void* dst, DType dst_type, const void* a, DType a_type, const void* b, DType b_type,
           int64_t n) override;
  void fill(float* x, float value, int64_t n) override;
  double sum_squares(ConstOperand x, int64_t n) override;

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
