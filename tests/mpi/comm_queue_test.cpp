// CommQueue: a submitted collective runs on the queue's thread while the caller computes
// (shown without timing: rank 0 joins the collective only after every other rank told it, from
// the main thread, that its compute finished while the collective was still pending);
// submission order is execution order, the synchronous calls included; a worker's error comes
// back from wait() and fails what follows; a watchdog reports a collective whose peer does not
// come, naming collective, unit and step; abandoned work is not run (abandon(), and a handle
// dropped while an exception unwinds).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

#include "comm/collective_watchdog.h"
#include "comm/comm_queue.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/mpi/comm_test_util.h"

namespace zt {
namespace {

using testing_comm::Elements;
using testing_comm::encode;
using testing_comm::input_value;
using testing_comm::reference_bits;

// Some arithmetic for the main thread to do meanwhile.
double compute_on_main_thread(int64_t n) {
  double acc = 0;
  for (int64_t i = 1; i <= n; ++i) acc += std::sqrt(static_cast<double>(i));
  return acc;
}

TEST(CommQueue, ReduceScatterOverlapsComputeOnTheMainThread) {
  int thread_level = 0;
  MPI_Query_thread(&thread_level);
  if (thread_level < MPI_THREAD_MULTIPLE)
    GTEST_SKIP() << "the test's own handshake calls MPI beside the queue's thread";
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world(), rank = comm.rank();
  const int64_t recv_count = 300007;
  const uint64_t seed = 4242;
  Elements send(DType::kF32, world * recv_count), recv(DType::kF32, recv_count);
  send.fill_input(seed, rank, 0, 0, world * recv_count);
  CommQueue queue(comm);

  if (rank == 0) {
    // Join only when every other rank has finished its compute with the collective pending.
    for (int q = 1; q < world; ++q) {
      int pending_after_compute = 0;
      ZT_MPI_CHECK(
          MPI_Recv(&pending_after_compute, 1, MPI_INT, q, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      EXPECT_EQ(pending_after_compute, 1) << "rank " << q;
    }
    CommHandle handle =
        queue.reduce_scatter(send.data(), recv.data(), recv_count, DType::kF32, ReduceOp::kSum);
    handle.wait();
  } else {
    CommHandle handle =
        queue.reduce_scatter(send.data(), recv.data(), recv_count, DType::kF32, ReduceOp::kSum);
    const double computed = compute_on_main_thread(2'000'000);
    // Rank 0 has not submitted yet, so the collective cannot have finished: the compute above
    // ran while it was in flight on the queue's thread.
    int pending_after_compute = handle.done() ? 0 : 1;
    EXPECT_GT(computed, 0.0);
    ZT_MPI_CHECK(MPI_Send(&pending_after_compute, 1, MPI_INT, 0, 99, MPI_COMM_WORLD));
    handle.wait();
    EXPECT_TRUE(handle.done());
  }
  int64_t wrong = 0;
  for (int64_t j = 0; j < recv_count; ++j)
    wrong += recv.bits(j) !=
             reference_bits(seed, world, rank * recv_count + j, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(wrong, 0);
}

TEST(CommQueue, CollectivesRunInSubmissionOrderWithSynchronousCallsRouted) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world(), rank = comm.rank();
  CommQueue queue(comm);
  EXPECT_EQ(comm.queue(), &queue);
  // A chain where each step reads the previous one's result: only in-order execution gives
  // the expected values. x = rank+1; all_reduce -> S; broadcast from the last rank of x*S;
  // all_gather of that; reduce_scatter of the gathered values.
  const int64_t n = 1000;
  std::vector<float> x(n, float(rank + 1)), sum(n), gathered(world * n), shard(n);
  CommHandle h1 = queue.all_reduce(x.data(), sum.data(), n, DType::kF32, ReduceOp::kSum);
  h1.wait();  // the next call reads `sum` on this thread
  std::vector<float> scaled(n);
  for (int64_t i = 0; i < n; ++i) scaled[i] = sum[i] * float(rank + 1);
  CommHandle h2 = queue.broadcast(scaled.data(), n, DType::kF32, world - 1);
  CommHandle h3 = queue.all_gather(scaled.data(), gathered.data(), n, DType::kF32);
  // Synchronous call while h2/h3 are queued: it goes through the queue, after them.
  comm.reduce_scatter(gathered.data(), shard.data(), n, DType::kF32, ReduceOp::kSum);
  EXPECT_TRUE(h2.done());
  EXPECT_TRUE(h3.done());
  h2.wait();
  h3.wait();
  const float total = float(world * (world + 1) / 2);
  const float broadcast_value = total * float(world);
  EXPECT_EQ(scaled[n - 1], broadcast_value);
  EXPECT_EQ(gathered[(world - 1) * n], broadcast_value);
  EXPECT_EQ(shard[0], broadcast_value * float(world));
  queue.drain();
  EXPECT_EQ(comm.stats()[CollectiveKind::kReduceScatter].calls, 1);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllGather].calls, 1);
}

TEST(CommQueue, OneQueuePerCommunicatorAndDetachOnDestruction) {
  CpuDevice device;
  SelfCommunicator comm(device);
  {
    CommQueue queue(comm);
    EXPECT_THROW(CommQueue second(comm), Error);
    EXPECT_FALSE(queue.on_worker_thread());
  }
  EXPECT_EQ(comm.queue(), nullptr);
  CommQueue again(comm);
  EXPECT_EQ(comm.queue(), &again);
}

TEST(CommQueue, InputErrorsThrowAtSubmission) {
  CpuDevice device;
  SelfCommunicator comm(device);
  CommQueue queue(comm);
  float x = 1;
  EXPECT_THROW(queue.broadcast(&x, 1, DType::kF32, 1), Error);
  EXPECT_THROW(queue.all_reduce(&x, &x, -2, DType::kF32, ReduceOp::kSum), Error);
  queue.drain();  // nothing was queued, nothing failed
}

// A back end whose all_reduce fails, to see an error travel from the worker to the caller.
class FailingCommunicator final : public Communicator {
 public:
  std::string name() const override { return "failing"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  std::unique_ptr<Communicator> backend_duplicate() override {
    return std::make_unique<FailingCommunicator>();
  }

 protected:
  void backend_all_reduce(const void*, void*, int64_t, DType, ReduceOp) override {
    throw_system("injected transport failure");
  }
  void backend_reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {}
  void backend_all_gather(const void*, void*, int64_t, DType) override {}
  void backend_broadcast(void*, int64_t, DType, int) override {}
  void backend_all_gather_host(const void*, void*, int64_t, DType) override {}
};

TEST(CommQueue, WorkerErrorsComeBackFromWaitAndFailLaterCollectives) {
  FailingCommunicator comm;
  CommQueue queue(comm);
  float x[4] = {1, 2, 3, 4};
  CommHandle failing = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
  CommHandle later = queue.broadcast(x, 4, DType::kF32, 0);
  try {
    failing.wait();
    ADD_FAILURE() << "wait() returned without the injected error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_EQ(e.message(), "injected transport failure");
  }
  EXPECT_THROW(failing.wait(), Error);  // the same outcome again
  EXPECT_THROW(later.wait(), Error);    // not run: the ranks would be out of step
  EXPECT_EQ(comm.stats()[CollectiveKind::kBroadcast].calls, 0);
  EXPECT_THROW(comm.all_gather(x, x, 1, DType::kF32), Error);  // routed, fails the same way
  EXPECT_THROW(queue.drain(), Error);
}

TEST(CommQueue, HandlesWaitWhenDroppedAndEmptyHandlesAreDone) {
  CpuDevice device;
  SelfCommunicator comm(device);
  CommQueue queue(comm);
  std::vector<float> a(1 << 16, 2.0f), b(1 << 16, 0.0f);
  {
    CommHandle dropped = queue.all_reduce(a.data(), b.data(), 1 << 16, DType::kF32, ReduceOp::kSum);
  }  // the destructor waited: b is written
  EXPECT_EQ(b.back(), 2.0f);
  CommHandle empty;
  EXPECT_TRUE(empty.done());
  empty.wait();
}

// A one-rank back end whose all_reduce blocks until the test opens a gate: a peer that has not
// arrived yet, without timing.
class GatedCommunicator final : public Communicator {
 public:
  std::string name() const override { return "gated"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  std::unique_ptr<Communicator> backend_duplicate() override {
    return std::make_unique<SelfCommunicator>(host_);
  }

  void wait_until_entered() {
    std::unique_lock<std::mutex> lock(mutex_);
    entered_cv_.wait(lock, [this] { return entered_ > 0; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    open_cv_.notify_all();
  }

 protected:
  void backend_all_reduce(const void*, void*, int64_t, DType, ReduceOp) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++entered_;
    entered_cv_.notify_all();
    open_cv_.wait(lock, [this] { return open_; });
  }
  void backend_reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {}
  void backend_all_gather(const void*, void*, int64_t, DType) override {}
  void backend_all_gather_host(const void*, void*, int64_t, DType) override {}
  void backend_broadcast(void*, int64_t, DType, int) override {}

 private:
  CpuDevice host_;  // for duplicate()
  std::mutex mutex_;
  std::condition_variable entered_cv_, open_cv_;
  int entered_ = 0;
  bool open_ = false;
};

// Waits (a generous bound, not a timed assertion) for `ready`.
bool eventually(const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(CommQueue, WatchdogReportsACollectiveThatDoesNotCompleteOnceNamingUnitAndStep) {
  GatedCommunicator comm;
  std::mutex reports_mutex;
  std::vector<CollectiveTimeout> reports;
  comm.set_watchdog(0.2, [&](const CollectiveTimeout& t) {
    std::lock_guard<std::mutex> lock(reports_mutex);
    reports.push_back(t);
  });
  CommQueue queue(comm);
  queue.set_context("step 12");
  float x[4] = {1, 2, 3, 4};
  CommHandle stuck = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum, "h.7");
  // The peer "arrives" only once the watchdog spoke; the handler returned, so it goes on.
  EXPECT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(reports_mutex);
    return !reports.empty();
  }));
  comm.open();
  stuck.wait();
  queue.drain();
  ASSERT_EQ(reports.size(), 1u);  // once, although it ran on long after the timeout
  const CollectiveTimeout& t = reports[0];
  EXPECT_EQ(t.unit, "h.7");
  EXPECT_EQ(t.context, "step 12");
  EXPECT_EQ(t.rank, 0);
  EXPECT_GE(t.waited_s, 0.2);
  const std::string line = t.message();
  for (const char* word :
       {"all_reduce of 16 bytes", "unit h.7", "at step 12", "zt.comm_timeout_s = 0.2 s", "rank 0"})
    EXPECT_NE(line.find(word), std::string::npos) << word << " missing from: " << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line: " << line;
}

TEST(CommQueue, WatchdogFiresWhenAPeerNeverArrivesOverMpi) {
  int thread_level = 0;
  MPI_Query_thread(&thread_level);
  if (thread_level < MPI_THREAD_MULTIPLE)
    GTEST_SKIP() << "the test's own handshake calls MPI beside the queue's thread";
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world(), rank = comm.rank();
  if (world < 2) GTEST_SKIP() << "needs a peer";
  std::atomic<int> fired{0};
  std::string line;
  comm.set_watchdog(0.5, [&](const CollectiveTimeout& t) {
    line = t.message();
    fired.fetch_add(1);
  });
  CommQueue queue(comm);
  queue.set_context("evaluation after step 3");
  std::vector<float> x(1024, float(rank + 1)), y(1024);
  if (rank == 0) {
    CommHandle h = queue.all_reduce(x.data(), y.data(), 1024, DType::kF32, ReduceOp::kSum, "root");
    // The other ranks join only after rank 0's watchdog has reported the collective.
    EXPECT_TRUE(eventually([&] { return fired.load() > 0; }));
    for (int q = 1; q < world; ++q) {
      int go = 1;
      ZT_MPI_CHECK(MPI_Send(&go, 1, MPI_INT, q, 98, MPI_COMM_WORLD));
    }
    h.wait();
    EXPECT_EQ(fired.load(), 1);
    for (const char* word : {"all_reduce of 4096 bytes", "unit root", "evaluation after step 3"})
      EXPECT_NE(line.find(word), std::string::npos) << word << " missing from: " << line;
  } else {
    int go = 0;
    ZT_MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 0, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    queue.all_reduce(x.data(), y.data(), 1024, DType::kF32, ReduceOp::kSum, "root").wait();
    EXPECT_EQ(fired.load(), 0);  // its collective did not wait
  }
  EXPECT_EQ(y[0], float(world * (world + 1) / 2));
}

TEST(CommQueue, AbandonFailsPendingCollectivesWithoutRunningThem) {
  GatedCommunicator comm;
  CommQueue queue(comm);
  float x[4] = {1, 2, 3, 4};
  CommHandle running = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
  comm.wait_until_entered();
  CommHandle pending = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
  CommHandle broadcast = queue.broadcast(x, 4, DType::kF32, 0);
  queue.abandon();
  EXPECT_TRUE(queue.abandoned());
  // The pending ones fail at once, while the running one still waits for its "peer".
  EXPECT_TRUE(pending.done());
  EXPECT_TRUE(broadcast.done());
  EXPECT_FALSE(running.done());
  try {
    pending.wait();
    ADD_FAILURE() << "an abandoned collective completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_NE(e.message().find("abandoned"), std::string::npos) << e.message();
  }
  EXPECT_THROW(queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum).wait(), Error);
  comm.open();
  running.wait();  // the one running finishes normally: nothing can interrupt it
  EXPECT_THROW(queue.drain(), Error);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].calls, 1);
  EXPECT_EQ(comm.stats()[CollectiveKind::kBroadcast].calls, 0);
}

TEST(CommQueue, HandlesDroppedWhileUnwindingAbandonQueuedWork) {
  GatedCommunicator comm;
  CommQueue queue(comm);
  float x[4] = {1, 2, 3, 4};
  // Opens the gate once the queue was abandoned, so the running collective can finish.
  std::thread peer([&] {
    eventually([&] { return queue.abandoned(); });
    comm.open();
  });
  try {
    CommHandle running = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
    comm.wait_until_entered();
    CommHandle queued = queue.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
    throw std::runtime_error("an error on this rank");
  } catch (const std::runtime_error&) {
  }
  peer.join();
  EXPECT_TRUE(queue.abandoned());
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].calls, 1);  // `queued` never ran
}

}  // namespace
}  // namespace zt
