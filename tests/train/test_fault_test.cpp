// ZT_TEST_FAULT and ZT_TEST_WRITE_LIMIT parsing (train/test_fault.h): a fault is due only at its
// point, rank, step and unit; malformed values are input errors naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/status.h"
#include "train/test_fault.h"

namespace zt {
namespace {

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(TestFault, UnsetMeansNone) {
  ::unsetenv("ZT_TEST_FAULT");
  EXPECT_FALSE(TestFault::from_environment().has_value());
  ::unsetenv("ZT_TEST_WRITE_LIMIT");
  EXPECT_EQ(test_write_limit_from_environment(), -1);
}

TEST(TestFault, DueOnlyAtItsPointRankStepAndUnit) {
  ScopedEnv env("ZT_TEST_FAULT", "point=backward,rank=1,step=3,unit=2");
  const auto fault = TestFault::from_environment();
  ASSERT_TRUE(fault.has_value());
  using P = TestFault::Point;
  EXPECT_TRUE(fault->due(P::kBackward, 1, 3, 2));
  EXPECT_FALSE(fault->due(P::kForward, 1, 3, 2));
  EXPECT_FALSE(fault->due(P::kBackward, 0, 3, 2));
  EXPECT_FALSE(fault->due(P::kBackward, 1, 2, 2));
  EXPECT_FALSE(fault->due(P::kBackward, 1, 3, 1));
  try {
    fault->fire("h.1", 3, 1);
    ADD_FAILURE() << "fire() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "injected fault (ZT_TEST_FAULT) at backward of unit h.1, step 3, on rank 1");
  }
}

TEST(TestFault, SaveIgnoresTheStepAndAnyUnitMatchesByDefault) {
  ScopedEnv env("ZT_TEST_FAULT", "point=save,rank=0");
  const auto fault = TestFault::from_environment();
  ASSERT_TRUE(fault.has_value());
  EXPECT_TRUE(fault->due(TestFault::Point::kSave, 0, 40, 0));
  EXPECT_TRUE(fault->due(TestFault::Point::kSave, 0, 7, 3));
}

TEST(TestFault, MalformedValuesNameTheVariable) {
  for (const char* bad : {"point=sideways,rank=1", "rank=1", "point=forward",
                          "point=forward,rank=x", "point=forward,rank=1,colour=red", "point"}) {
    ScopedEnv env("ZT_TEST_FAULT", bad);
    const std::string message = input_error([] { TestFault::from_environment(); });
    EXPECT_NE(message.find("ZT_TEST_FAULT"), std::string::npos) << bad << ": " << message;
  }
  ScopedEnv env("ZT_TEST_WRITE_LIMIT", "-5");
  EXPECT_NE(input_error([] { test_write_limit_from_environment(); }).find("ZT_TEST_WRITE_LIMIT"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
