// The parameter-group state machine: every transition checks the state it starts from and
// names the unit, rank and state when called in the wrong one.
#include "zero/param_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "model_zoo/table_unit.h"
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

// A step's start zeroes the stored gradient except the tensors written whole by their first
// kernel (ParamSpec::grad_written_whole: a GPT-2 block's four matrices), which are handed out
// fresh once each; the unit's completion zeroes those its backward never took. With sharded
// gradients the kernels write a separate buffer: everything is zeroed, nothing is fresh.
TEST(ParamGroup, GradientsWrittenWholeAreHandedOutFreshInsteadOfZeroed) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{1, 2, 16, 61, 8});
  auto& unit = dynamic_cast<zoo::TableUnit&>(*model.units()[1]);
  const auto entries = unit.layout().entries();
  const ShardLayout shard(unit.layout().numel(), 1, 0);
  ParamGroup g(device, unit, shard, ZeroPolicy::for_stage(1), Precision{}, false, 7);
  auto* store = static_cast<uint8_t*>(g.full_grads().data);
  const size_t bytes = static_cast<size_t>(shard.padded) * sizeof(float);
  std::memset(store, 0xff, bytes);  // the last step's gradient
  g.zero_grads();
  auto is = [&](size_t i, uint8_t byte) {
    const uint8_t* p = store + entries[i].offset * sizeof(float);
    return std::all_of(p, p + entries[i].numel * sizeof(float),
                       [&](uint8_t b) { return b == byte; });
  };
  std::vector<size_t> whole;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].spec.grad_written_whole) whole.push_back(i);
    EXPECT_TRUE(is(i, entries[i].spec.grad_written_whole ? 0xff : 0x00)) << entries[i].spec.name;
    EXPECT_EQ(unit.grad_fresh(i), entries[i].spec.grad_written_whole) << entries[i].spec.name;
  }
  ASSERT_EQ(whole.size(), 4u);  // c_attn, attn.c_proj, c_fc, mlp.c_proj
  const int64_t end = entries.back().offset + entries.back().numel;
  EXPECT_TRUE(std::all_of(store + end * sizeof(float), store + bytes, [](uint8_t b) { return !b; }))
      << "padding";
  EXPECT_FALSE(unit.grad(0).fresh);  // ln_1.weight: zeroed, added into
  const Operand first = unit.grad(static_cast<int>(whole[0]));
  EXPECT_TRUE(first.fresh);
  EXPECT_FALSE(unit.grad(static_cast<int>(whole[0])).fresh);  // the next hand-out adds
  EXPECT_FALSE(unit.grad_fresh(whole[0]));
  g.settle_fresh_grads();  // the other three were never written: zeroed now
  EXPECT_TRUE(is(whole[0], 0xff));
  for (size_t j = 1; j < whole.size(); ++j) {
    EXPECT_TRUE(is(whole[j], 0x00));
    EXPECT_FALSE(unit.grad(static_cast<int>(whole[j])).fresh);
  }

  ParamGroup sharded(device, unit, shard, ZeroPolicy::for_stage(2), Precision{}, false, 7);
  sharded.zero_grads();
  sharded.ensure_grads();
  for (size_t i : whole) EXPECT_FALSE(unit.grad(static_cast<int>(i)).fresh);
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
