// reduce_in_rank_order on its own (no communication; each rank runs it alone): the fastest
// kernel (AVX2 + F16C here) and the portable one give the same bits as a scalar loop over
// runtime/dtype.h, on arbitrary bit patterns (NaN, inf, subnormals, sums that overflow), for
// 1 to 5 contributions, lengths with and without a tail, and out aliasing a contribution.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "comm/rank_order_reduction.h"
#include "tests/mpi/comm_test_util.h"

namespace zt {
namespace {

using testing_comm::decode;
using testing_comm::Elements;
using testing_comm::encode;
using testing_comm::kAllDTypes;

// Bits of op over the contributions at i, in order, the plain scalar way.
uint32_t scalar_reference(const std::vector<Elements>& c, int64_t i, DType dtype, ReduceOp op) {
  float acc = decode(dtype, c[0].bits(i));
  for (size_t p = 1; p < c.size(); ++p)
    acc = testing_comm::reference_combine(acc, decode(dtype, c[p].bits(i)), op);
  return encode(dtype, acc);
}

// Random bits, one value in 8 drawn from the edge cases of the format.
uint32_t random_bits(std::mt19937_64& rng, DType dtype) {
  static constexpr uint32_t kF32Edges[] = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
                                           0x00000001, 0x80000000, 0x7f7fffff, 0x477fe000,
                                           0x477ff000, 0x33000000, 0x38800000, 0x00000000};
  static constexpr uint32_t kF16Edges[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x8000,
                                           0x7bff, 0xfbff, 0x0400, 0x03ff, 0x0000, 0x3c00};
  static constexpr uint32_t kBF16Edges[] = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0001, 0x8000,
                                            0x7f7f, 0xff7f, 0x0080, 0x007f, 0x0000, 0x3f80};
  const uint64_t r = rng();
  const uint32_t* edges = dtype == DType::kF32   ? kF32Edges
                          : dtype == DType::kF16 ? kF16Edges
                                                 : kBF16Edges;
  if ((r & 7) == 0) return edges[(r >> 3) % 12];
  const uint32_t bits = static_cast<uint32_t>(r >> 32);
  return dtype == DType::kF32 ? bits : (bits & 0xffff);
}

TEST(ReductionKernels, MatchTheScalarReferenceOnEveryBitPattern) {
  std::mt19937_64 rng(2024);
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (size_t m = 1; m <= 5; ++m) {
        for (int64_t count : {int64_t(1), int64_t(13), int64_t(4096 + 5)}) {
          SCOPED_TRACE(fmt::format("{} {} contributions={} count={}", dtype_name(dtype),
                                   reduce_op_name(op), m, count));
          std::vector<Elements> c(m, Elements(dtype, count));
          for (Elements& e : c)
            for (int64_t i = 0; i < count; ++i) e.set_bits(i, random_bits(rng, dtype));
          std::vector<const void*> pointers;
          for (const Elements& e : c) pointers.push_back(e.data());

          for (ReduceKernel kernel : {ReduceKernel::kFastest, ReduceKernel::kPortable}) {
            Elements out(dtype, count);
            reduce_in_rank_order(pointers, out.data(), count, dtype, op, kernel);
            // In place over the last contribution (a copy of it, to keep c for the reference).
            Elements aliased = c.back();
            std::vector<const void*> with_alias = pointers;
            with_alias.back() = aliased.data();
            reduce_in_rank_order(with_alias, aliased.data(), count, dtype, op, kernel);

            int64_t wrong = 0, wrong_in_place = 0;
            for (int64_t i = 0; i < count; ++i) {
              const uint32_t expected = scalar_reference(c, i, dtype, op);
              // Which NaN comes out when NaNs meet is unspecified (communicator.h).
              auto same = [&](uint32_t got) {
                return std::isnan(decode(dtype, expected)) ? std::isnan(decode(dtype, got))
                                                           : got == expected;
              };
              wrong += !same(out.bits(i));
              wrong_in_place += !same(aliased.bits(i));
            }
            EXPECT_EQ(wrong, 0) << (kernel == ReduceKernel::kFastest ? "fastest" : "portable");
            EXPECT_EQ(wrong_in_place, 0)
                << (kernel == ReduceKernel::kFastest ? "fastest" : "portable");
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace zt
