// ScrambledDevice: a test Device whose memory the host must not address directly, as a GPU's,
// built on the CPU so that tests without a GPU can prove that code reaches device memory only
// through the Device interface. Its bytes are stored XOR kMask, so a host read of device memory
// sees garbage and a host write is garbage to the device; copy_to_host / copy_from_host (un)scramble.
// Its kernels are the CPU's behind ScrambledKernels, which unscrambles the allocations a call's
// pointers fall in, runs the CPU kernel, and scrambles them again: the kernels compute on real
// values, so a run on this device gives the CPU device's bits exactly when nothing else touched
// its memory. One ScrambledKernels per activation dtype (kernels_for), each over the CPU table of
// that dtype. Misuse that scrambling alone might not reveal throws zt::Error (kInternal) at once:
// a kernel pointer or a copy's device side outside every live allocation of this device (host
// memory handed to the device; a typed operand must lie inside one whole, its n elements of its
// dtype), or a copy's host side inside one (device memory handed to the host). Used by
// tests/mpi/device_comm_test.cpp and tests/mpi/device_engine_test.cpp.
//
// Thread-safe: kernel calls, copies, zero and allocation take one mutex (a CommQueue's thread
// copies while the user thread runs kernels). Only the CPU kernels run inside it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {

class ScrambledDevice;

// The Kernels of ScrambledDevice: every entry names its pointer arguments (a null one is
// skipped; an operand with its byte size, n elements of its dtype) and runs the CPU kernel on
// them unscrambled.
class ScrambledKernels final : public Kernels {
 public:
  // `base`: the CPU table of the same activation dtype.
  ScrambledKernels(ScrambledDevice& device, Kernels& base) : device_(device), base_(base) {}

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

  int64_t calls() const { return calls_.load(); }

 private:
  class Unscrambled;  // the scope of one call
  // A kernel argument: a pointer into device memory and, when known, the bytes from it the
  // kernel may touch (0: unknown, only the pointer is checked).
  struct Arg {
    const void* data;
    size_t bytes = 0;
    Arg(const void* p) : data(p) {}
    Arg(const void* p, size_t b) : data(p), bytes(b) {}
  };
  // An operand of n elements of its dtype.
  static Arg operand(ConstOperand op, int64_t n) {
    return {op.data, static_cast<size_t>(n) * dtype_size(op.dtype)};
  }
  ScrambledDevice& device_;
  Kernels& base_;
  std::atomic<int64_t> calls_{0};
};

class ScrambledDevice final : public Device {
 public:
  static constexpr unsigned char kMask = 0x5a;

  ScrambledDevice() {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
      kernels_[static_cast<int>(t)] =
          std::make_unique<ScrambledKernels>(*this, cpu_.kernels_for(t));
  }
  ~ScrambledDevice() override = default;

  std::string name() const override { return "scrambled (test)"; }
  Kernels& kernels_for(DType activations) override { return scrambled_kernels(activations); }
  ScrambledKernels& scrambled_kernels(DType activations) {
    return *kernels_[static_cast<int>(activations)];
  }
  // Kernel calls made on this device, every activation dtype's table together.
  int64_t kernel_calls() const {
    int64_t n = 0;
    for (const auto& k : kernels_) n += k->calls();
    return n;
  }
  bool host_accessible() const override { return false; }

  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes == 0) return;
    check_device(src, bytes, "copy_to_host source");
    check_host(host_dst, bytes, "copy_to_host destination");
    xor_copy(host_dst, src, bytes);
    ++copies_to_host_;
  }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes == 0) return;
    check_device(dst, bytes, "copy_from_host destination");
    check_host(host_src, bytes, "copy_from_host source");
    xor_copy(dst, host_src, bytes);
    ++copies_from_host_;
  }
  // Both sides scrambled alike: the stored bytes move as they are.
  void copy(void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes == 0) return;
    check_device(dst, bytes, "copy destination");
    check_device(src, bytes, "copy source");
    if (dst != src) std::memcpy(dst, src, bytes);
    ++device_copies_;
  }
  void zero(void* dst, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes == 0) return;
    check_device(dst, bytes, "zero");
    std::memset(dst, kMask, bytes);  // zeros, as stored
  }

  int64_t copies_to_host() const { return copies_to_host_.load(); }
  int64_t copies_from_host() const { return copies_from_host_.load(); }
  int64_t device_copies() const { return device_copies_.load(); }

 protected:
  void* raw_alloc(size_t bytes, std::string& why) override {
    void* data = ::operator new(bytes, std::align_val_t(64), std::nothrow);
    if (!data) {
      why = "the host refused it (operator new failed)";
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_[static_cast<const char*>(data)] = bytes;
    return data;
  }
  void raw_free(void* data, size_t) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      allocations_.erase(static_cast<const char*>(data));
    }
    ::operator delete(data, std::align_val_t(64));
  }

 private:
  friend class ScrambledKernels;

  // The live allocation holding p (p may be its end: a pointer one past a range). Null when
  // none does. mutex_ held.
  const std::pair<const char* const, size_t>* allocation_of(const void* p) const {
    const char* c = static_cast<const char*>(p);
    auto it = allocations_.upper_bound(c);
    if (it == allocations_.begin()) return nullptr;
    --it;
    return c <= it->first + it->second ? &*it : nullptr;
  }
  void check_device(const void* p, size_t bytes, const char* what) const {
    const auto* a = allocation_of(p);
    const char* c = static_cast<const char*>(p);
    if (a == nullptr || c + bytes > a->first + a->second)
      throw_internal(fmt::format("{}: {} bytes at {} are not memory of device '{}' (host memory "
                                 "handed to the device?)",
                                 what, bytes, fmt::ptr(p), name()));
  }
  void check_host(const void* p, size_t bytes, const char* what) const {
    const char* c = static_cast<const char*>(p);
    auto it = allocations_.lower_bound(c + bytes);  // the first allocation at or after the end
    if (it != allocations_.begin()) {
      --it;
      if (it->first + it->second > c)
        throw_internal(fmt::format("{}: {} bytes at {} overlap memory of device '{}' (device "
                                   "memory handed to the host?)",
                                   what, bytes, fmt::ptr(p), name()));
    }
  }
  static void xor_copy(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (size_t i = 0; i < bytes; ++i) d[i] = s[i] ^ kMask;
  }
  // Scrambles or unscrambles a whole allocation in place, a word at a time.
  static void xor_in_place(const char* data, size_t bytes) {
    auto* d = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(data));
    constexpr uint64_t kWord = 0x0101010101010101ull * kMask;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, d + i, 8);
      w ^= kWord;
      std::memcpy(d + i, &w, 8);
    }
    for (; i < bytes; ++i) d[i] ^= kMask;
  }

  CpuDevice cpu_;  // the kernels' back end only; its memory is never used
  std::unique_ptr<ScrambledKernels> kernels_[3];  // by DType: fp32, fp16, bf16, as CpuDevice's
  mutable std::mutex mutex_;
  std::map<const char*, size_t> allocations_;  // live allocations: start -> bytes
  std::atomic<int64_t> copies_to_host_{0}, copies_from_host_{0}, device_copies_{0};
};

// One kernel call: the device locked, each allocation the arguments fall in unscrambled once,
// scrambled again (and the lock released) when the call returns or throws.
class ScrambledKernels::Unscrambled {
 public:
  Unscrambled(ScrambledKernels& k, const char* kernel, std::initializer_list<Arg> args)
      : device_(k.device_), lock_(k.device_.mutex_) {
    ++k.calls_;
    std::vector<const std::pair<const char* const, size_t>*> found;
    for (const Arg& arg : args) {
      const void* p = arg.data;
      if (p == nullptr) continue;
      const auto* a = device_.allocation_of(p);
      if (a == nullptr ||  // thrown before anything was unscrambled
          static_cast<const char*>(p) + arg.bytes > a->first + a->second)
        throw_internal(fmt::format("kernel {}: argument {} ({} bytes) is not memory of device "
                                   "'{}' (host memory handed to a kernel?)",
                                   kernel, fmt::ptr(p), arg.bytes, device_.name()));
      bool seen = false;
      for (const auto* b : found) seen = seen || b == a;
      if (!seen) found.push_back(a);
    }
    for (const auto* a : found) ScrambledDevice::xor_in_place(a->first, a->second);
    open_ = std::move(found);
  }
  ~Unscrambled() {
    for (const auto* a : open_) ScrambledDevice::xor_in_place(a->first, a->second);
  }
  Unscrambled(const Unscrambled&) = delete;
  Unscrambled& operator=(const Unscrambled&) = delete;

 private:
  ScrambledDevice& device_;
  std::lock_guard<std::mutex> lock_;
  std::vector<const std::pair<const char* const, size_t>*> open_;
};

#define ZT_SCRAMBLED(kernel, ...) Unscrambled scope_(*this, #kernel, {__VA_ARGS__})

inline void ScrambledKernels::matmul_forward(float* out, const float* inp, ConstOperand weight,
                                             ConstOperand bias, int64_t M, int64_t K, int64_t N,
                                             WeightLayout layout) {
  ZT_SCRAMBLED(matmul_forward, out, inp, operand(weight, K * N), operand(bias, N));
  base_.matmul_forward(out, inp, weight, bias, M, K, N, layout);
}
inline void ScrambledKernels::matmul_backward(float* dinp, Operand dweight, Operand dbias,
                                              const float* dout, const float* inp,
                                              ConstOperand weight, int64_t M, int64_t K,
                                              int64_t N, WeightLayout layout,
                                              GradOutput dinp_output) {
  ZT_SCRAMBLED(matmul_backward, dinp, operand(dweight, K * N), operand(dbias, N), dout, inp,
               operand(weight, K * N));
  base_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, M, K, N, layout, dinp_output);
}
// wte and dwte are (V, C) with V not an argument: only their pointers are checked.
inline void ScrambledKernels::embedding_forward(float* out, const int32_t* tokens,
                                                ConstOperand wte, ConstOperand wpe, int64_t B,
                                                int64_t T, int64_t C, const int32_t* positions) {
  ZT_SCRAMBLED(embedding_forward, out, tokens, wte.data, operand(wpe, T * C), positions);
  base_.embedding_forward(out, tokens, wte, wpe, B, T, C, positions);
}
inline void ScrambledKernels::embedding_backward(Operand dwte, Operand dwpe, const float* dout,
                                                 const int32_t* tokens, int64_t B, int64_t T,
                                                 int64_t C, const int32_t* positions) {
  ZT_SCRAMBLED(embedding_backward, dwte.data, operand(dwpe, T * C), dout, tokens, positions);
  base_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C, positions);
}
inline void ScrambledKernels::layernorm_forward(float* out, float* mean, float* rstd,
                                                const float* inp, ConstOperand weight,
                                                ConstOperand bias, int64_t N, int64_t C) {
  ZT_SCRAMBLED(layernorm_forward, out, mean, rstd, inp, operand(weight, C), operand(bias, C));
  base_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
inline void ScrambledKernels::layernorm_backward(float* dinp, Operand dweight, Operand dbias,
                                                 const float* dout, const float* inp,
                                                 ConstOperand weight, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  ZT_SCRAMBLED(layernorm_backward, dinp, operand(dweight, C), operand(dbias, C), dout, inp,
               operand(weight, C), mean, rstd);
  base_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
inline void ScrambledKernels::gelu_forward(float* out, const float* inp, int64_t n) {
  ZT_SCRAMBLED(gelu_forward, out, inp);
  base_.gelu_forward(out, inp, n);
}
inline void ScrambledKernels::gelu_backward(float* dinp, const float* inp, const float* dout,
                                            int64_t n) {
  ZT_SCRAMBLED(gelu_backward, dinp, inp, dout);
  base_.gelu_backward(dinp, inp, dout, n);
}
inline void ScrambledKernels::attention_forward(float* out, float* att, const float* qkv,
                                                int64_t B, int64_t T, int64_t C, int64_t NH,
                                                const int32_t* positions) {
  ZT_SCRAMBLED(attention_forward, out, att, qkv, positions);
  base_.attention_forward(out, att, qkv, B, T, C, NH, positions);
}
inline void ScrambledKernels::attention_backward(float* dqkv, const float* dout,
                                                 const float* qkv, const float* att, int64_t B,
                                                 int64_t T, int64_t C, int64_t NH,
                                                 const int32_t* positions) {
  ZT_SCRAMBLED(attention_backward, dqkv, dout, qkv, att, positions);
  base_.attention_backward(dqkv, dout, qkv, att, B, T, C, NH, positions);
}
inline void ScrambledKernels::gqa_attention_forward(float* out, float* att, const float* qkv,
                                                    int64_t B, int64_t T, int64_t NH,
                                                    int64_t NKV, int64_t hd,
                                                    const int32_t* positions) {
  ZT_SCRAMBLED(gqa_attention_forward, out, att, qkv, positions);
  base_.gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hd, positions);
}
inline void ScrambledKernels::gqa_attention_backward(float* dqkv, const float* dout,
                                                     const float* qkv, const float* att,
                                                     int64_t B, int64_t T, int64_t NH,
                                                     int64_t NKV, int64_t hd,
                                                     const int32_t* positions) {
  ZT_SCRAMBLED(gqa_attention_backward, dqkv, dout, qkv, att, positions);
  base_.gqa_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions);
}
inline void ScrambledKernels::rmsnorm_forward(float* out, float* rstd, const float* inp,
                                              ConstOperand weight, int64_t N, int64_t C,
                                              float eps) {
  ZT_SCRAMBLED(rmsnorm_forward, out, rstd, inp, operand(weight, C));
  base_.rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}
inline void ScrambledKernels::rmsnorm_backward(float* dinp, Operand dweight, const float* dout,
                                               const float* inp, ConstOperand weight,
                                               const float* rstd, int64_t N, int64_t C) {
  ZT_SCRAMBLED(rmsnorm_backward, dinp, operand(dweight, C), dout, inp, operand(weight, C), rstd);
  base_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}
inline void ScrambledKernels::rope_forward(float* qkv, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hd, const RopeFrequencies& rope,
                                           const int32_t* positions) {
  ZT_SCRAMBLED(rope_forward, qkv, positions);
  base_.rope_forward(qkv, B, T, NH, NKV, hd, rope, positions);
}
inline void ScrambledKernels::rope_backward(float* dqkv, int64_t B, int64_t T, int64_t NH,
                                            int64_t NKV, int64_t hd, const RopeFrequencies& rope,
                                            const int32_t* positions) {
  ZT_SCRAMBLED(rope_backward, dqkv, positions);
  base_.rope_backward(dqkv, B, T, NH, NKV, hd, rope, positions);
}
inline void ScrambledKernels::swiglu_forward(float* out, const float* gate_up, int64_t N,
                                             int64_t F) {
  ZT_SCRAMBLED(swiglu_forward, out, gate_up);
  base_.swiglu_forward(out, gate_up, N, F);
}
inline void ScrambledKernels::swiglu_backward(float* dgate_up, const float* gate_up,
                                              const float* dout, int64_t N, int64_t F) {
  ZT_SCRAMBLED(swiglu_backward, dgate_up, gate_up, dout);
  base_.swiglu_backward(dgate_up, gate_up, dout, N, F);
}
inline void ScrambledKernels::residual_forward(float* out, const float* a, const float* b,
                                               int64_t n) {
  ZT_SCRAMBLED(residual_forward, out, a, b);
  base_.residual_forward(out, a, b, n);
}
inline void ScrambledKernels::accumulate(float* y, const float* x, int64_t n) {
  ZT_SCRAMBLED(accumulate, y, x);
  base_.accumulate(y, x, n);
}
inline void ScrambledKernels::softmax_cross_entropy(float* losses, float* logits,
                                                    const int32_t* targets, int64_t N,
                                                    int64_t V, int64_t Vp, float dloss) {
  ZT_SCRAMBLED(softmax_cross_entropy, losses, logits, targets);
  base_.softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss);
}
inline void ScrambledKernels::adamw(float* param, ConstOperand grad, float* m, float* v,
                                    int64_t n, const AdamWArgs& args, Operand working) {
  ZT_SCRAMBLED(adamw, param, operand(grad, n), m, v, operand(working, n));
  base_.adamw(param, grad, m, v, n, args, working);
}
inline void ScrambledKernels::sgd(float* param, ConstOperand grad, float* momentum_buf,
                                  int64_t n, const SgdArgs& args) {
  ZT_SCRAMBLED(sgd, param, operand(grad, n), momentum_buf);
  base_.sgd(param, grad, momentum_buf, n, args);
}
inline void ScrambledKernels::cast(void* dst, DType dst_type, const void* src, DType src_type,
                                   int64_t n) {
  ZT_SCRAMBLED(cast, dst, src);
  base_.cast(dst, dst_type, src, src_type, n);
}
inline void ScrambledKernels::round_to(float* x, DType dtype, int64_t n) {
  ZT_SCRAMBLED(round_to, x);
  base_.round_to(x, dtype, n);
}
inline void ScrambledKernels::round_rows(float* x, const int32_t* rows, int64_t n_rows,
                                         int64_t row_len, DType dtype) {
  ZT_SCRAMBLED(round_rows, x, rows);
  base_.round_rows(x, rows, n_rows, row_len, dtype);
}
inline void ScrambledKernels::add(void* dst, DType dst_type, const void* a, DType a_type,
                                  const void* b, DType b_type, int64_t n) {
  ZT_SCRAMBLED(add, dst, a, b);
  base_.add(dst, dst_type, a, a_type, b, b_type, n);
}
inline void ScrambledKernels::fill(float* x, float value, int64_t n) {
  ZT_SCRAMBLED(fill, x);
  base_.fill(x, value, n);
}
inline double ScrambledKernels::sum_squares(ConstOperand x, int64_t n) {
  ZT_SCRAMBLED(sum_squares, operand(x, n));
  return base_.sum_squares(x, n);
}

#undef ZT_SCRAMBLED

}  // namespace zt
