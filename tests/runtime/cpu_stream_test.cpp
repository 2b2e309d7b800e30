// STREAM's triad (runtime/cpu/cpu_stream.h): the loop computes a = b + s·c on every element,
// reports a positive rate, and sizes its arrays by STREAM's rule when not told.
#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/cpu/cpu_stream.h"

namespace zt {
namespace {

TEST(CpuStream, TriadComputesEveryElementAndReportsARate) {
  StreamTriad triad(1000003);  // a tail after the vector body of every instruction set
  EXPECT_EQ(triad.elements(), 1000003);
  EXPECT_FALSE(triad.check()) << "a[] starts at zero, so the check must fail before a run";
  const double gbps = triad.best_gbps(2);
  EXPECT_TRUE(triad.check());
  EXPECT_GT(gbps, 0.0);
  EXPECT_LT(gbps, 1e4);  // 10 TB/s: no host memory (or cache) of today is near it
}

TEST(CpuStream, DefaultArraysAreFourTimesTheLastLevelCache) {
  const int64_t cache = last_level_cache_bytes();
  EXPECT_GE(StreamTriad::default_elements() * 4, 4 * cache);
  EXPECT_GE(StreamTriad::default_elements(), int64_t(1) << 24);
}

}  // namespace
}  // namespace zt
