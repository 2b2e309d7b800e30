// Progress (train/progress.h): the time left follows the last 20 steps' rate, nothing before two
// steps, zero at the last step; durations print as the step line shows them.
#include <gtest/gtest.h>

#include "train/progress.h"

namespace zt {
namespace {

TEST(ProgressTest, TimeLeftFollowsTheRecentRate) {
  Progress p(100);
  EXPECT_EQ(p.left(), "");
  p.step_done(1, 10.0);
  EXPECT_FALSE(p.seconds_left());
  for (int64_t s = 2; s <= 30; ++s) p.step_done(s, 10.0 + 2.0 * static_cast<double>(s - 1));
  ASSERT_TRUE(p.seconds_left());
  EXPECT_DOUBLE_EQ(*p.seconds_left(), 2.0 * 70);  // 70 steps left at 2 s
  EXPECT_EQ(p.left(), "2m20s");
  // Then the steps get faster: within 20 steps only the new rate counts.
  double t = 10.0 + 2.0 * 29;
  for (int64_t s = 31; s <= 50; ++s) p.step_done(s, t += 0.5);
  EXPECT_DOUBLE_EQ(*p.seconds_left(), 0.5 * 50);
  for (int64_t s = 51; s <= 100; ++s) p.step_done(s, t += 0.5);
  EXPECT_DOUBLE_EQ(*p.seconds_left(), 0.0);
}

TEST(ProgressTest, Durations) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(3600 + 125), "1h02m");
  EXPECT_EQ(format_duration(-3), "0s");
}

}  // namespace
}  // namespace zt
