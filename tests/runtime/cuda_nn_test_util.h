// What the CUDA neural-network kernel suites (cuda_nn_kernels_test.cpp,
// cuda_nn_kernels_llama_test.cpp, cuda_nn_kernels_tensor_core_test.cpp) share: random tokens, the
// comparisons, Mirror (the same host data on both devices) and the CudaNnKernelsTest fixture (a
// GPU, skipped without one, and the CPU reference), one class for every file, as GoogleTest
// requires of a suite. Written against Device / Kernels only (no CUDA headers). Helpers only; no
// tests here.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/cuda/attention_path.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/model.h"

#include "random_data.h"

namespace zt::cuda_nn_test {

inline std::vector<int32_t> random_tokens(size_t n, int32_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |gpu - cpu| <= rtol·(|cpu| + max|cpu|) element by element: relative to the element, with a
// floor relative to the array's largest magnitude (sums that cancel to near zero carry the
// rounding error of their terms, not of their result). A layout mistake gives O(1) errors.
inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_abs = 0;
  for (float x : cpu) max_abs = std::max(max_abs, std::abs(double(x)));
  int failures = 0;
  for (size_t i = 0; i < gpu.size() && failures < 5; ++i) {
    const double err = std::abs(double(gpu[i]) - double(cpu[i]));
    if (!(err <= rtol * (std::abs(double(cpu[i])) + max_abs))) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i] << " (error "
                    << err << ", max |cpu| " << max_abs << ")";
      ++failures;
    }
  }
}

// The same host data on both devices; read back with cpu() / gpu().
class Mirror {
 public:
  template <class T>
  Mirror(Device& cpu_dev, Device& gpu_dev, const std::vector<T>& host)
      : cpu_dev_(cpu_dev), gpu_dev_(gpu_dev), bytes_(host.size() * sizeof(T)) {
    cpu_ = cpu_dev.alloc(bytes_, MemCategory::kOther);
    gpu_ = gpu_dev.alloc(bytes_, MemCategory::kOther);
    if (bytes_ == 0) return;
    cpu_dev.copy_from_host(cpu_.data(), host.data(), bytes_);
    gpu_dev.copy_from_host(gpu_.data(), host.data(), bytes_);
  }
  float* c() const { return cpu_.as<float>(); }
  float* g() const { return gpu_.as<float>(); }
  const int32_t* ci() const { return cpu_.as<int32_t>(); }
  const int32_t* gi() const { return gpu_.as<int32_t>(); }
  std::vector<float> cpu() const { return read(cpu_dev_, cpu_); }
  std::vector<float> gpu() const { return read(gpu_dev_, gpu_); }
  // The buffer as an operand of dtype t (its bytes hold elements of t: see mirror_as).
  Operand co(DType t) const { return {cpu_.data(), t}; }
  Operand go(DType t) const { return {gpu_.data(), t}; }
  // Elements of dtype t, widened exactly.
  std::vector<float> cpu_as(DType t) const { return widen(read_bytes(cpu_dev_, cpu_), t); }
  std::vector<float> gpu_as(DType t) const { return widen(read_bytes(gpu_dev_, gpu_), t); }
  void reset_gpu(const std::vector<float>& host) {
    gpu_dev_.copy_from_host(gpu_.data(), host.data(), bytes_);
  }

 private:
  std::vector<float> read(Device& dev, const Buffer& buf) const {
    std::vector<float> host(bytes_ / sizeof(float));
    if (bytes_ > 0) dev.copy_to_host(host.data(), buf.data(), bytes_);
    return host;
  }
  std::vector<uint8_t> read_bytes(Device& dev, const Buffer& buf) const {
    std::vector<uint8_t> host(bytes_);
    if (bytes_ > 0) dev.copy_to_host(host.data(), buf.data(), bytes_);
    return host;
  }
  static std::vector<float> widen(const std::vector<uint8_t>& bytes, DType t) {
    std::vector<float> x(bytes.size() / dtype_size(t));
    for (size_t i = 0; i < x.size(); ++i) {
      if (t == DType::kF32) {
        std::memcpy(&x[i], bytes.data() + 4 * i, 4);
        continue;
      }
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      x[i] = t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    return x;
  }
  Device& cpu_dev_;
  Device& gpu_dev_;
  size_t bytes_;
  Buffer cpu_, gpu_;
};

class CudaNnKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_dev_ = make_device(DeviceKind::kCuda, 0);
    // These suites hold the materialised attention kernels to the CPU's bits; cuDNN's fused
    // attention has its own (cuda_cudnn_attention_test.cpp).
    set_attention_path(AttentionPath::kReference);
  }
  void set_attention_path(AttentionPath path) {
#if ZT_HAVE_CUDA
    set_cuda_attention_path(*gpu_dev_, path);
#else
    (void)path;
#endif
  }
  // Buffers must die before the devices: tests declare Mirrors as locals, destroyed first.
  Mirror mirror(const std::vector<float>& host) { return Mirror(cpu_dev_, *gpu_dev_, host); }
  Mirror mirror(const std::vector<int32_t>& host) { return Mirror(cpu_dev_, *gpu_dev_, host); }
  // host rounded to dtype t and stored as t on both devices (read back with cpu_as / gpu_as).
  Mirror mirror_as(const std::vector<float>& host, DType t) {
    if (t == DType::kF32) return mirror(host);
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i)
      bits[i] = t == DType::kF16 ? fp32_to_fp16(host[i]) : fp32_to_bf16(host[i]);
    return Mirror(cpu_dev_, *gpu_dev_, bits);
  }
  Kernels& cpu() { return cpu_dev_.kernels(); }
  Kernels& gpu() { return gpu_dev_->kernels(); }

  CpuDevice cpu_dev_;
  std::unique_ptr<Device> gpu_dev_;
};

inline constexpr double kRtol = 1e-5;

// x rounded to t (t's values, as activations of a t table hold).
inline std::vector<float> rounded_to(std::vector<float> x, DType t) {
  for (float& v : x) {
    if (t == DType::kF16) v = fp16_to_fp32(fp32_to_fp16(v));
    if (t == DType::kBF16) v = bf16_to_fp32(fp32_to_bf16(v));
  }
  return x;
}

// Every element of x is a value of dtype t.
inline void expect_representable(const std::vector<float>& x, DType t, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const float r =
        t == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(x[i])) : bf16_to_fp32(fp32_to_bf16(x[i]));
    if (!same_bits({r}, {x[i]})) {
      ADD_FAILURE() << what << "[" << i << "] = " << x[i] << " is not a " << dtype_name(t)
                    << " value";
      ++failures;
    }
  }
}

}  // namespace zt::cuda_nn_test
