// The parameter-group state machine: every transition checks the state it starts from and
// names the unit, rank and state when called in the wrong one.
#include "zero/param_group.h"

#include <gtest/gtest.h>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(ParamGroup, Stage3TransitionsCheckTheirState) {
  CpuDevice device;
  SelfCommunicator comm(device);
  CommQueue queue(comm);
  Gpt2 model(Gpt2Config{1, 2, 16, 61, 8});
  Unit& unit = *model.units()[1];
  ParamGroup g(device, unit, ShardLayout(unit.layout().numel(), 1, 0), ZeroPolicy::for_stage(3),
               Precision{}, /*persistent=*/false, 7);
  EXPECT_EQ(g.state(), ParamState::kSharded);
  EXPECT_EQ(error_of([&] { g.release(); }), "unit h.0 on rank 0: release called in state sharded");
  EXPECT_NE(error_of([&] { g.full_params(); }).find("full_params called in state sharded"),
            std::string::npos);
  g.begin_gather(queue);
  EXPECT_EQ(g.state(), ParamState::kGathering);
  EXPECT_NE(error_of([&] { g.begin_gather(queue); }).find("begin_gather called in state gathering"),
            std::string::npos);
  g.finish_gather();
  EXPECT_EQ(g.state(), ParamState::kFull);
  EXPECT_GT(g.gathered_bytes(), 0);
  EXPECT_NE(error_of([&] { g.finish_gather(); }).find("finish_gather called in state full"),
            std::string::npos);
  g.release();
  EXPECT_EQ(g.state(), ParamState::kSharded);
  EXPECT_EQ(g.gathered_bytes(), 0);
}

TEST(ParamGroup, PersistentAndUnshardedGroupsAreAlwaysFull) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{1, 2, 16, 61, 8});
  Unit& unit = *model.units()[1];
  const ShardLayout shard(unit.layout().numel(), 1, 0);
  ParamGroup persistent(device, unit, shard, ZeroPolicy::for_stage(3), Precision{}, true, 7);
  EXPECT_EQ(persistent.state(), ParamState::kFull);
  EXPECT_FALSE(persistent.params_sharded());
  EXPECT_NE(error_of([&] { persistent.release(); }).find("release called in state full"),
            std::string::npos);
}

TEST(ZeroPolicy, StagesAreData) {
  EXPECT_FALSE(ZeroPolicy::for_stage(0).shard_optimizer);
  EXPECT_TRUE(ZeroPolicy::for_stage(1).shard_optimizer);
  EXPECT_FALSE(ZeroPolicy::for_stage(1).shard_grads);
  EXPECT_TRUE(ZeroPolicy::for_stage(2).shard_grads);
  EXPECT_TRUE(ZeroPolicy::for_stage(3).shard_params);
  const ShardLayout s(1000, 4, 3);
  EXPECT_EQ(s.padded, 1024);  // a multiple of world * 16
  EXPECT_EQ(s.shard, 256);
  EXPECT_EQ(s.begin(), 768);
}

}  // namespace
}  // namespace zt
