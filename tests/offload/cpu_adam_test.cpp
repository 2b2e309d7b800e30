// CpuAdam (offload/cpu_adam.h) against the CPU back end's two passes, Kernels::adamw then
// Kernels::cast from the updated master, bit for bit: master, m, v and the working copy, for fp32,
// bf16 and fp16 gradients, no / bf16 / fp16 / fp32 working copies, AdamW and classic Adam, with
// and without weight decay, over three steps (bias corrections of steps 1, 2 and 1000), lengths
// that leave vector tails (0, 1, 15, 17, 1000003: several chunks, both threads), on every
// instruction set this CPU has (ZT_CPU_SIMD). The reference table is capped at SSE2, so its
// conversions are dtype.h's portable ones, never the F16C / AVX-512 instructions CpuAdam uses.
// The inputs hold the edges a step meets: NaN (signalling) and infinite gradients, zero
// gradients that leave tiny masters (fp16 subnormals) and masters past fp16's range (inf).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "offload/cpu_adam.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"
#include "tests/runtime/kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// A CpuAdam made under ZT_CPU_SIMD=level (read at construction), the variable then restored.
CpuAdam adam_capped_at(const char* level) {
  const char* old = std::getenv("ZT_CPU_SIMD");
  const std::string saved = old ? old : "";
  setenv("ZT_CPU_SIMD", level, 1);
  CpuAdam adam;
  if (old)
    setenv("ZT_CPU_SIMD", saved.c_str(), 1);
  else
    unsetenv("ZT_CPU_SIMD");
  return adam;
}

// n values of one dtype as bytes.
struct Values {
  DType dtype = DType::kF32;
  std::vector<unsigned char> bytes;

  Values(DType t, int64_t n) : dtype(t), bytes(static_cast<size_t>(n) * dtype_size(t)) {}
  Operand op() { return {bytes.data(), dtype}; }
  ConstOperand cop() const { return {bytes.data(), dtype}; }
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
};

// The index of the first element whose bits differ, or -1.
int64_t first_difference(const void* a, const void* b, int64_t n, size_t size) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  if (n == 0 || std::memcmp(x, y, static_cast<size_t>(n) * size) == 0) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(x + i * size, y + i * size, size) != 0) return i;
  return -1;
}

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected,
                      const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const int64_t i = first_difference(actual.data(), expected.data(),
                                     static_cast<int64_t>(actual.size()), sizeof(float));
  EXPECT_EQ(i, -1) << what << "[" << i << "]: got " << (i >= 0 ? actual[i] : 0.0f) << ", want "
                   << (i >= 0 ? expected[i] : 0.0f);
}

void expect_same_bits(const Values& actual, const Values& expected, const char* what) {
  ASSERT_EQ(actual.bytes.size(), expected.bytes.size()) << what;
  const size_t size = dtype_size(actual.dtype);
  const int64_t i =
      first_difference(actual.bytes.data(), expected.bytes.data(), actual.size(), size);
  if (i < 0) return;
  uint32_t got = 0, want = 0;
  std::memcpy(&got, actual.bytes.data() + i * size, size);
  std::memcpy(&want, expected.bytes.data() + i * size, size);
  ADD_FAILURE() << what << "[" << i << "]: got bits 0x" << std::hex << got << ", want 0x" << want;
}

// The optimizer's inputs for n elements: master of magnitudes 1e-8 to 1e4 (and 7e4, past fp16's
// largest finite value, at every 50th element), moments of a few earlier steps, gradients in
// [-3, 3] with zeros (moments zero there too, so tiny masters stay tiny), a signalling NaN and
// an infinity where the length allows.
struct Shard {
  std::vector<float> master, m, v, grad;
};

Shard make_shard(int64_t n) {
  Shard s{random_floats(n, 11), random_floats(n, 12, -0.1f, 0.1f),
          random_floats(n, 13, 0.0f, 0.01f), random_floats(n, 14, -3.0f, 3.0f)};
  for (int64_t i = 0; i < n; ++i) {
    s.master[i] *= std::pow(10.0f, static_cast<float>(i % 13 - 8));
    if (i % 50 == 49) s.master[i] = i % 100 == 49 ? 7e4f : -7e4f;
    if (i % 7 == 3) s.grad[i] = s.m[i] = s.v[i] = 0.0f;
  }
  if (n > 5) s.grad[5] = std::bit_cast<float>(0x7fa00000u);  // signalling NaN
  if (n > 8) s.grad[8] = -std::numeric_limits<float>::infinity();
  return s;
}

// The gradient stored in `t`: rounded by dtype.h, the NaN kept signalling in every dtype.
Values stored_grad(const std::vector<float>& grad, DType t) {
  const int64_t n = static_cast<int64_t>(grad.size());
  Values g(t, n);
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::kF32) {
      std::memcpy(g.bytes.data() + i * 4, &grad[i], 4);
      continue;
    }
    uint16_t h = t == DType::kF16 ? fp32_to_fp16(grad[i]) : fp32_to_bf16(grad[i]);
    if (std::isnan(grad[i])) h = t == DType::kF16 ? 0x7d01 : 0x7f81;  // signalling
    std::memcpy(g.bytes.data() + i * 2, &h, 2);
  }
  return g;
}

const char* name(DType t) { return dtype_name(t).data(); }

TEST(CpuAdam, PathsAreCappedByZtCpuSimd) {
  for (const char* level : simd_levels()) EXPECT_STREQ(adam_capped_at(level).isa_name(), level);
  // Uncapped: the widest this CPU has.
  if (!std::getenv("ZT_CPU_SIMD")) {
    EXPECT_STREQ(CpuAdam().isa_name(), simd_levels().back());
  }
}

TEST(CpuAdam, MatchesAdamwThenCastBitForBit) {
  const auto reference = kernels_capped_at("sse2");
  std::vector<CpuAdam> paths;
  for (const char* level : simd_levels()) paths.push_back(adam_capped_at(level));
  const std::vector<DType> dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  for (const int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(17), int64_t(1000003)}) {
    const Shard start = make_shard(n);
    for (const DType grad_type : dtypes) {
      const Values grad = stored_grad(start.grad, grad_type);
      // AdamW and Adam with decay; without decay the two are one formula, run as AdamW.
      for (const auto& [decoupled, decay] : {std::pair{true, 0.1f}, {false, 0.1f}, {true, 0.0f}}) {
        for (const int working_index : {-1, 0, 1, 2}) {  // none, then `dtypes`
          const DType working_type = working_index < 0 ? DType::kF32 : dtypes[working_index];
          Shard want = start;
          Values want_working(working_type, n);
          std::vector<Shard> got(paths.size(), start);
          std::vector<Values> got_working(paths.size(), Values(working_type, n));
          AdamWArgs args;
          args.lr = 1e-2f;
          args.weight_decay = decay;
          args.grad_scale = 0.5f;
          args.decoupled = decoupled;
          for (const int64_t step : {1, 2, 1000}) {
            args.step = step;
            reference->adamw(want.master.data(), grad.cop(), want.m.data(), want.v.data(), n, args);
            if (working_index >= 0)
              reference->cast(want_working.bytes.data(), working_type, want.master.data(),
                              DType::kF32, n);
            for (size_t p = 0; p < paths.size(); ++p) {
              SCOPED_TRACE(fmt::format("n={} path={} grad={} {} decay={} working={} step={}", n,
                                       paths[p].isa_name(), name(grad_type),
                                       decoupled ? "AdamW" : "Adam", decay,
                                       working_index < 0 ? "none" : name(working_type), step));
              Shard& s = got[p];
              paths[p].step(s.master.data(), grad.cop(), s.m.data(), s.v.data(),
                            working_index < 0 ? Operand() : got_working[p].op(), n, args);
              expect_same_bits(s.master, want.master, "master");
              expect_same_bits(s.m, want.m, "m");
              expect_same_bits(s.v, want.v, "v");
              expect_same_bits(got_working[p], want_working, "working");
            }
          }
          if (n > 0) {
            EXPECT_NE(first_difference(want.master.data(), start.master.data(), n, 4), -1)
                << "the steps left every master value as it was";
          }
        }
      }
    }
  }
}

// A shard updated in pieces (as the engine's decay runs call it, cuts anywhere) equals the shard
// updated whole, on every path.
TEST(CpuAdam, ShardInPiecesEqualsWhole) {
  const int64_t n = 100003;
  const Shard start = make_shard(n);
  const Values grad = stored_grad(start.grad, DType::kBF16);
  AdamWArgs args;
  args.weight_decay = 0.1f;
  args.step = 3;
  for (const char* level : simd_levels()) {
    SCOPED_TRACE(level);
    const CpuAdam adam = adam_capped_at(level);
    Shard whole = start, pieces = start;
    Values whole_working(DType::kF16, n), pieces_working(DType::kF16, n);
    adam.step(whole.master.data(), grad.cop(), whole.m.data(), whole.v.data(), whole_working.op(),
              n, args);
    int64_t begin = 0;
    for (const int64_t end : {int64_t(333), int64_t(40000), int64_t(40001), n}) {
      adam.step(pieces.master.data() + begin, grad.cop().at(begin), pieces.m.data() + begin,
                pieces.v.data() + begin, pieces_working.op().at(begin), end - begin, args);
      begin = end;
    }
    expect_same_bits(pieces.master, whole.master, "master");
    expect_same_bits(pieces.m, whole.m, "m");
    expect_same_bits(pieces.v, whole.v, "v");
    expect_same_bits(pieces_working, whole_working, "working");
  }
}

// An fp32 working copy may be the master itself (fp32 training: one buffer).
TEST(CpuAdam, Fp32WorkingMayBeTheMasterItself) {
  const int64_t n = 1003;
  const Shard start = make_shard(n);
  AdamWArgs args;
  args.step = 2;
  Shard separate = start, aliased = start;
  const CpuAdam adam;
  adam.step(separate.master.data(), start.grad.data(), separate.m.data(), separate.v.data(),
            nullptr, n, args);
  adam.step(aliased.master.data(), start.grad.data(), aliased.m.data(), aliased.v.data(),
            aliased.master.data(), n, args);
  expect_same_bits(aliased.master, separate.master, "master");
  expect_same_bits(aliased.v, separate.v, "v");
}

TEST(CpuAdam, RejectsStepZero) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4), v(4);
  AdamWArgs args;
  args.step = 0;
  EXPECT_THROW(CpuAdam().step(p.data(), g.data(), m.data(), v.data(), nullptr, 4, args), Error);
}

}  // namespace
}  // namespace zt
