// ScrambledDevice: a test Device whose memory the host must not address directly, as a GPU's,
// built on the CPU so that tests without a GPU can prove that code reaches device memory only
// through the Device interface. Its bytes are stored XOR kMask, so a host read of device memory
// sees garbage and a host write is garbage to the device; copy_to_host / copy_from_host
// (un)scramble. Its kernels are the CPU's behind ScrambledKernels, which unscrambles the
// allocations a call's pointers fall in, runs the CPU kernel, and scrambles them again: the kernels
// compute on real values, so a run on this device gives the CPU device's bits exactly when nothing
// else touched its memory. One ScrambledKernels per activation dtype (kernels_for), each over the
// CPU table of that dtype. Misuse that scrambling alone might not reveal throws zt::Error
// (kInternal) at once: a kernel pointer or a copy's device side outside every live allocation of
// this device (host memory handed to the device; a typed operand must lie inside one whole, its n
// elements of its dtype), or a copy's host side inside one (device memory handed to the host). Used
// by tests/mpi/device_comm_test.cpp and tests/mpi/device_engine_test.cpp.
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
#include <type_traits>
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

  // Every entry of runtime/kernel_entries.h: the base's entry with the same arguments, run
  // with the allocations its memory column names unscrambled.
#define ZT_BRACED(...) \
  { __VA_ARGS__ }
#define ZT_KERNEL(ret, name, params, args, memory)                                \
  ret name params override {                                                      \
    return unscrambled(#name, ZT_BRACED memory, [&] { return base_.name args; }); \
  }
#include "runtime/kernel_entries.h"
#undef ZT_BRACED

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
    Arg(ConstOperand op) : data(op.data) {}
    Arg(Operand op) : data(op.data) {}
  };
  // An operand of n elements of its dtype.
  static Arg operand(ConstOperand op, int64_t n) {
    return {op.data, static_cast<size_t>(n) * dtype_size(op.dtype)};
  }
  // run() (the base's entry) inside an Unscrambled scope over `memory`; what run() returned.
  template <typename Run>
  std::invoke_result_t<Run> unscrambled(const char* kernel, std::initializer_list<Arg> memory,
                                        Run&& run);
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
      throw_internal(
          fmt::format("{}: {} bytes at {} are not memory of device '{}' (host memory "
                      "handed to the device?)",
                      what, bytes, fmt::ptr(p), name()));
  }
  void check_host(const void* p, size_t bytes, const char* what) const {
    const char* c = static_cast<const char*>(p);
    auto it = allocations_.lower_bound(c + bytes);  // the first allocation at or after the end
    if (it != allocations_.begin()) {
      --it;
      if (it->first + it->second > c)
        throw_internal(
            fmt::format("{}: {} bytes at {} overlap memory of device '{}' (device "
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
        throw_internal(
            fmt::format("kernel {}: argument {} ({} bytes) is not memory of device "
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

template <typename Run>
std::invoke_result_t<Run> ScrambledKernels::unscrambled(const char* kernel,
                                                        std::initializer_list<Arg> memory,
                                                        Run&& run) {
  Unscrambled scope(*this, kernel, memory);
  return run();
}

}  // namespace zt
