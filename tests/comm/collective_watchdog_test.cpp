// CollectiveWatchdog on its own, in one process: it reports a collective that runs past the
// timeout once, never one that ended in time, and does not hold the time its process was stopped
// against the collective (a rank that mpirun resumes only to end it must not report a timeout of
// its own). The stopped process is a forked child, stopped and resumed by this test.
#include "comm/collective_watchdog.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace zt {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CollectiveCall all_reduce_call(int64_t count) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.count = count;
  return call;
}

// Waits (a generous bound, not a timed assertion) for `ready`.
template <typename Ready>
bool eventually(Ready ready, double limit_s = 30) {
  const double deadline = now_s() + limit_s;
  while (!ready()) {
    if (now_s() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(CollectiveWatchdog, ReportsACollectivePastItsTimeoutOnceAndNotOneThatEnded) {
  std::atomic<int> fired{0};
  CollectiveTimeout seen;
  CollectiveWatchdog watchdog(
      0.1,
      [&](const CollectiveTimeout& t) {
        seen = t;
        fired.fetch_add(1);
      },
      3);
  watchdog.begin(all_reduce_call(8), 2, "h.1", "step 5");
  watchdog.end(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(fired.load(), 0) << "a collective that ended was reported";

  watchdog.begin(all_reduce_call(8), 2, "h.2", "step 6");
  ASSERT_TRUE(eventually([&] { return fired.load() > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  watchdog.end(false);
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(seen.unit, "h.2");
  EXPECT_EQ(seen.context, "step 6");
  EXPECT_EQ(seen.rank, 3);
  EXPECT_GE(seen.waited_s, 0.1);
}

// A child process begins a collective that never ends, with a 2 s timeout, and is stopped at
// once for 4 s. Counting the stop, its collective is overdue the moment it resumes; not counting
// it, about 2 s later. The child writes the time of its report to a pipe.
TEST(CollectiveWatchdog, TimeTheProcessWasStoppedDoesNotCount) {
  constexpr double kTimeoutS = 2, kStoppedS = 4;
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_parent[0]);
    CollectiveWatchdog watchdog(
        kTimeoutS,
        [&](const CollectiveTimeout& t) {
          const double report[2] = {now_s(), t.waited_s};
          const bool ok = write(to_parent[1], report, sizeof report) == sizeof report;
          _exit(ok ? 0 : 2);
        },
        1);
    watchdog.begin(all_reduce_call(1024), 2, "root", "step 4");
    const char began = 'b';
    if (write(to_parent[1], &began, 1) != 1) _exit(3);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the collective never completes
    _exit(4);
  }
  close(to_parent[1]);
  // However the test ends, the child does not outlive it (stopped or sleeping).
  int status = -1;
  struct Reap {
    pid_t pid;
    int fd;
    int* status;
    ~Reap() {
      if (*status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
      }
      close(fd);
    }
  } reap{child, to_parent[0], &status};
  char began = 0;
  ASSERT_EQ(read(to_parent[0], &began, 1), 1);
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::duration<double>(kStoppedS));
  const double resumed_s = now_s();
  ASSERT_EQ(kill(child, SIGCONT), 0);
  double report[2] = {0, 0};
  const ssize_t got = read(to_parent[0], report, sizeof report);
  ASSERT_EQ(got, ssize_t(sizeof report)) << "the child's watchdog never reported";
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  // steady_clock is system-wide, so the child's clock reading compares with ours.
  const double after_resume_s = report[0] - resumed_s;
  EXPECT_GE(after_resume_s, kTimeoutS / 2)
      << "reported " << after_resume_s << " s after the resume: the stop was counted";
  EXPECT_LT(report[1], kTimeoutS + kStoppedS / 2) << "waited_s includes the stop";
  EXPECT_GE(report[1], kTimeoutS);
}

}  // namespace
}  // namespace zt
