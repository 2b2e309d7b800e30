// CpuDevice's host pinning (offload's pin_memory): new allocations are pinned through the given
// functions until the lock limit or a failing pin stops it, with a reason naming `ulimit -l`;
// pinned blocks are unpinned when freed for good.
#include <gtest/gtest.h>

#include <unistd.h>

#include <set>

#include "runtime/cpu/cpu_device.h"

namespace zt {
namespace {

struct FakePinner {
  std::set<void*> pinned;
  int unpins = 0;
  std::string fail;  // non-empty: pin fails with it
  HostPinning pinning(int64_t limit) {
    HostPinning p;
    p.what = "fakeHostRegister";
    p.pin = [this](void* data, size_t) {
      if (!fail.empty()) return fail;
      pinned.insert(data);
      return std::string();
    };
    p.unpin = [this](void* data) {
      pinned.erase(data);
      ++unpins;
    };
    p.lock_limit = limit;
    return p;
  }
};

TEST(CpuPinning, PinsUntilTheLockLimitThenSaysUlimit) {
  FakePinner fake;
  {
    CpuDevice host;
    Buffer before = host.alloc(4096, MemCategory::kOptimizer);  // before set_pinning: not pinned
    host.set_pinning(fake.pinning(10'000));
    Buffer a = host.alloc(4096, MemCategory::kOptimizer);
    Buffer b = host.alloc(4096, MemCategory::kGrads);
    EXPECT_EQ(fake.pinned.size(), 2u);
    EXPECT_EQ(host.pinned_bytes(), 8192u);
    EXPECT_TRUE(host.pinning_failure().empty());
    Buffer c = host.alloc(4096, MemCategory::kGrads);  // 12,288 > 10,000: left unpinned
    EXPECT_EQ(fake.pinned.size(), 2u);
    EXPECT_NE(host.pinning_failure().find("lock limit"), std::string::npos)
        << host.pinning_failure();
    EXPECT_NE(host.pinning_failure().find("ulimit -l"), std::string::npos)
        << host.pinning_failure();
    Buffer d = host.alloc(64, MemCategory::kGrads);  // after a failure nothing more is pinned
    EXPECT_EQ(fake.pinned.size(), 2u);
    a.reset();  // cached, still pinned: reused as it is
    Buffer again = host.alloc(4096, MemCategory::kOptimizer);
    EXPECT_EQ(fake.unpins, 0);
  }
  EXPECT_EQ(fake.unpins, 2) << "pinned blocks are unpinned when the device frees them";
  EXPECT_TRUE(fake.pinned.empty());
}

TEST(CpuPinning, AFailingPinIsReportedAndTheMemoryStaysUsable) {
  FakePinner fake;
  fake.fail = "out of memory";
  CpuDevice host;
  host.set_pinning(fake.pinning(-1));
  Buffer a = host.alloc(1 << 20, MemCategory::kOptimizer);
  ASSERT_NE(a.data(), nullptr);
  a.as<char>()[0] = 1;
  EXPECT_EQ(host.pinned_bytes(), 0u);
  EXPECT_NE(host.pinning_failure().find("fakeHostRegister of 1.00 MiB"), std::string::npos)
      << host.pinning_failure();
  EXPECT_NE(host.pinning_failure().find("out of memory"), std::string::npos);
}

TEST(CpuPinning, RootHasNoLockLimit) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root";
  EXPECT_EQ(memory_lock_limit(), -1);
}

}  // namespace
}  // namespace zt
