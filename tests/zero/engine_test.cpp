// The engine's step on one process: the UnitSchedule's answers, ZeroPolicy validation, and
// overlap_comm seen happening (a gradient reduction still in flight while the next unit's
// backward computes), through a communicator whose reductions wait at a gate.
#include "zero/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {
namespace {

const Gpt2Config kTiny{3, 2, 32, 97, 16};  // units: root, 3 blocks; layers: embed, 3 blocks, head

TEST(UnitSchedule, TrainingRunsForwardThenBackwardInReverse) {
  Gpt2 model(kTiny);
  UnitSchedule s(model.layers(), PassMode::kTraining, {0, 0, 0, 0}, {});
  ASSERT_EQ(s.size(), 10u);
  const int units[] = {0, 1, 2, 3, 0, 0, 3, 2, 1, 0};
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].unit, units[i]) << i;
    EXPECT_EQ(s[i].backward, i >= 5) << i;
  }
  EXPECT_EQ(s.backward_steps(4).begin, 5u);
  EXPECT_EQ(s.backward_steps(0).begin, 9u);
  EXPECT_EQ(s.next_use(0), 4u);  // root: embedding, then the head
  EXPECT_EQ(s.next_use(4), 5u);  // the head's forward and backward are adjacent
  EXPECT_EQ(s.next_use(9), UnitSchedule::kNever);
  UnitSchedule eval(model.layers(), PassMode::kEvaluation, {0, 0, 0, 0}, {});
  EXPECT_EQ(eval.size(), 5u);
  EXPECT_EQ(eval.next_use(4), UnitSchedule::kNever);
}

TEST(UnitSchedule, PrefetchStaysInsideBudgetAndLiveBound) {
  Gpt2 model(kTiny);
  const std::vector<int64_t> sizes{0, 100, 100, 100};  // root persistent, blocks gathered
  auto none_held = [](int) { return false; };
  UnitSchedule wide(model.layers(), PassMode::kTraining, sizes, {250, 1000, 0});
  EXPECT_EQ(wide.prefetch(1, 100, none_held), (std::vector<int>{2, 3}));
  // A unit already held counts against the budget but is not started again.
  EXPECT_EQ(wide.prefetch(1, 200, [](int u) { return u == 2; }), (std::vector<int>{3}));
  UnitSchedule narrow(model.layers(), PassMode::kTraining, sizes, {250, 1000, 0});
  EXPECT_EQ(narrow.prefetch(1, 100, none_held).size(), 2u);
  UnitSchedule small_budget(model.layers(), PassMode::kTraining, sizes, {150, 1000, 0});
  EXPECT_EQ(small_budget.prefetch(1, 100, none_held), (std::vector<int>{2}));
  UnitSchedule live_bound(model.layers(), PassMode::kTraining, sizes, {1000, 250, 0});
  EXPECT_EQ(live_bound.prefetch(1, 100, none_held), (std::vector<int>{2}));  // 100 + 100 <= 250
  EXPECT_EQ(live_bound.live_bound(100), 350);
  EXPECT_EQ(small_budget.live_bound(100), 250);
}

TEST(UnitSchedule, KeepsAUnitReusedWithinTheReuseDistance) {
  Gpt2 model(kTiny);
  const std::vector<int64_t> sizes{40, 100, 100, 100};
  // Block 3 (forward step 3) is used again at step 6; in between only the root (40) is gathered.
  UnitSchedule none(model.layers(), PassMode::kTraining, sizes, {0, 1000, 0});
  EXPECT_FALSE(none.keep_after(3, 100));
  UnitSchedule reuse(model.layers(), PassMode::kTraining, sizes, {0, 1000, 40});
  EXPECT_TRUE(reuse.keep_after(3, 100));
  EXPECT_FALSE(reuse.keep_after(2, 100));   // block 2: block 3 and the root before its reuse
  EXPECT_FALSE(reuse.keep_after(3, 2000));  // above max_live: released
  EXPECT_TRUE(none.keep_after(4, 0));       // the next step uses the same unit
}

TEST(ZeroPolicy, EachLevelNeedsTheOneBefore) {
  for (int stage = 0; stage <= 3; ++stage) EXPECT_NO_THROW(ZeroPolicy::for_stage(stage).validate());
  EXPECT_THROW((ZeroPolicy{false, true, false}.validate()), Error);
  EXPECT_THROW((ZeroPolicy{true, false, true}.validate()), Error);
  EXPECT_EQ(ZeroPolicy::for_stage(2).stage(), 2);
  CpuDevice device;
  SelfCommunicator comm(device);
  Gpt2 model(kTiny);
  EngineOptions o;
  o.policy = ZeroPolicy{false, false, true};
  EXPECT_THROW(Engine(device, comm, model, o), Error);
}

// One rank. Gradient reductions (all_reduce, reduce_scatter) wait at a gate until it opens or
// `gate_seconds` pass. Parameter gathers run on the duplicate (the engine's gather
// communicator), which counts the all-gathers it finished and, only when `gate_gathers` (the
// negative control) and once armed, waits at the same gate.
class GatedCommunicator final : public Communicator {
 public:
  explicit GatedCommunicator(double gate_seconds = 1.0, bool gate_gathers = false)
      : gate_seconds_(gate_seconds), gate_gathers_(gate_gathers) {}
  std::string name() const override { return "gated"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    opened_.notify_all();
  }
  void arm() { armed_ = true; }
  int returned() const { return returned_; }              // reductions that have finished
  int64_t gathers_done() const { return gathers_done_; }  // all-gathers of the duplicate

 protected:
  std::unique_ptr<Communicator> backend_duplicate() override {
    return std::make_unique<GatherSide>(*this);
  }
  void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) override {
    wait_at_gate();
    inner_.all_reduce(send, recv, count, dtype, op);
    ++returned_;
  }
  void backend_reduce_scatter(const void* send, void* recv, int64_t count, DType dtype,
                              ReduceOp op) override {
    wait_at_gate();
    inner_.reduce_scatter(send, recv, count, dtype, op);
    ++returned_;
  }
  void backend_all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    inner_.all_gather(send, recv, count, dtype);
  }
  void backend_all_gather_host(const void* send, void* recv, int64_t count, DType dtype) override {
    inner_.all_gather_host(send, recv, count, dtype);
  }
  void backend_broadcast(void* buf, int64_t count, DType dtype, int root) override {}

 private:
  class GatherSide final : public Communicator {
   public:
    explicit GatherSide(GatedCommunicator& parent) : parent_(parent) {}
    std::string name() const override { return "gated-gathers"; }
    int rank() const override { return 0; }
    int world() const override { return 1; }
    int local_rank() const override { return 0; }
    int local_world() const override { return 1; }

   protected:
    std::unique_ptr<Communicator> backend_duplicate() override {
      return std::make_unique<GatherSide>(parent_);
    }
    void backend_all_reduce(const void*, void*, int64_t, DType, ReduceOp) override {}
    void backend_reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {}
    void backend_all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
      if (parent_.gate_gathers_ && parent_.armed_) parent_.wait_at_gate();
      inner_.all_gather(send, recv, count, dtype);
      ++parent_.gathers_done_;
    }
    void backend_all_gather_host(const void* send, void* recv, int64_t count,
                                 DType dtype) override {
      inner_.all_gather_host(send, recv, count, dtype);
    }
    void backend_broadcast(void*, int64_t, DType, int) override {}

   private:
    GatedCommunicator& parent_;
    CpuDevice device_;
    SelfCommunicator inner_{device_};
  };

  void wait_at_gate() {
    std::unique_lock<std::mutex> lock(mutex_);
    opened_.wait_for(lock, std::chrono::duration<double>(gate_seconds_), [&] { return open_; });
  }
  double gate_seconds_;
  bool gate_gathers_;
  std::atomic<bool> armed_{false};
  CpuDevice device_;
  SelfCommunicator inner_{device_};
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
  std::atomic<int> returned_{0};
  std::atomic<int64_t> gathers_done_{0};
};

struct Tokens {
  std::vector<int32_t> inputs, targets;
  Batch batch;
};

Tokens random_tokens(int64_t B, int64_t T, uint32_t seed) {
  Tokens t;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, kTiny.vocab_size - 1);
  t.inputs.resize(B * T);
  t.targets.resize(B * T);
  for (auto& x : t.inputs) x = token(rng);
  for (auto& x : t.targets) x = token(rng);
  t.batch = Batch{t.inputs.data(), t.targets.data(), B, T};
  return t;
}

// Backward completes block 3, then block 2: when block 2's gradient is complete (its backward
// has computed), is block 3's reduction still in flight? Returns the reductions finished by
// then, and every unit's gradient.
std::pair<int, std::vector<std::vector<float>>> reductions_done_at_second_unit(int stage,
                                                                               bool overlap) {
  CpuDevice device;
  GatedCommunicator comm;
  Gpt2 model(kTiny);
  EngineOptions o;
  o.policy = ZeroPolicy::for_stage(stage);
  o.overlap_comm = overlap;
  o.reduce_bucket_size = 1;  // every unit launches its own reduction
  o.persistence_threshold = 0;
  Engine engine(device, comm, model, o);
  int done_then = -1;
  engine.set_gradient_hook([&](int unit, Operand, int64_t) {
    if (unit != 2) return;
    done_then = comm.returned();
    comm.open();
  });
  const Tokens t = random_tokens(2, 8, 5);
  engine.compute_gradients(t.batch);
  std::vector<std::vector<float>> grads;
  for (int u = 0; u < engine.num_units(); ++u) grads.push_back(engine.unit_grads(u));
  return {done_then, grads};
}

TEST(EngineOverlap, AReductionIsInFlightWhileTheNextUnitsBackwardComputes) {
  for (int stage : {0, 2, 3}) {
    const auto [with_overlap, grads_overlap] = reductions_done_at_second_unit(stage, true);
    const auto [without, grads_plain] = reductions_done_at_second_unit(stage, false);
    EXPECT_EQ(with_overlap, 0) << "stage " << stage << ": block 3's reduction had finished";
    EXPECT_EQ(without, 1) << "stage " << stage << ": without overlap_comm it finishes first";
    ASSERT_EQ(grads_overlap.size(), grads_plain.size());
    for (size_t u = 0; u < grads_plain.size(); ++u)
      EXPECT_EQ(std::memcmp(grads_overlap[u].data(), grads_plain[u].data(),
                            grads_plain[u].size() * sizeof(float)),
                0)
          << "stage " << stage << " unit " << u;
  }
}

// Stage 3 with overlap_comm: while block 3's reduction waits at the gate, block 2's backward
// starts the prefetch of block 1. That gather runs on the engine's gather communicator, so it
// completes even though a reduction is stuck ahead of it; with the gathers behind the same gate
// (the negative control) it cannot.
bool prefetch_completes_behind_a_stuck_reduction(bool gate_gathers) {
  CpuDevice device;
  GatedCommunicator comm(/*gate_seconds=*/5.0, gate_gathers);
  Gpt2 model(kTiny);
  Gpt2 shapes(kTiny);
  EngineOptions o;
  o.policy = ZeroPolicy::for_stage(3);
  o.overlap_comm = true;
  o.reduce_bucket_size = 1;
  o.persistence_threshold = 0;
  o.prefetch_bucket_size = ShardLayout(shapes.units()[1]->layout().numel(), 1, 0).padded;
  Engine engine(device, comm, model, o);
  bool completed = false;
  engine.set_gradient_hook([&](int unit, Operand, int64_t) {
    if (unit == 3) comm.arm();  // the control's gathers queue behind what comes next
    if (unit != 2) return;
    // Block 3's reduction is in flight (at the gate); block 1's prefetch was issued after it.
    int64_t issued = 0;
    for (int u = 0; u < engine.num_units(); ++u) issued += engine.gather_count(u);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (comm.gathers_done() < issued && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    completed = comm.returned() == 0 && comm.gathers_done() == issued;
    comm.open();
  });
  const Tokens t = random_tokens(2, 8, 5);
  engine.compute_gradients(t.batch);
  return completed;
}

TEST(EngineOverlap, AStage3PrefetchDoesNotWaitBehindAReduction) {
  EXPECT_TRUE(prefetch_completes_behind_a_stuck_reduction(false));
  EXPECT_FALSE(prefetch_completes_behind_a_stuck_reduction(true)) << "the control should stall";
}

}  // namespace
}  // namespace zt
