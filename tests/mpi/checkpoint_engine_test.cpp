// Sharded checkpoints of the engine across ranks (run under mpirun -np 2 and -np 4):
//   - exact resume: k steps, save, a new engine, load, N - k steps gives bitwise the losses,
//     read_unit_params and model_state_bytes of N steps straight, in stages 0-3, fp32, bf16 and
//     fp16 (with its loss scaler skipping and growing across the save), pure bf16, SGD with
//     momentum, and the optimizer offloaded to the host or to NVMe and the parameters offloaded
//     (stage 3);
//   - resharding on one world size: a checkpoint of one stage and tier loads into another and
//     training goes on bitwise as the saving configuration would (stages 0-3 are bitwise equal on
//     one world); fp16 <-> bf16 loads the masters exactly and says so;
//   - across world sizes: a checkpoint of this world loads into a one-rank engine (rank 0 with a
//     SelfCommunicator) and one of a one-rank engine into this world, with the saved masters
//     exactly and the losses of a straight run within 1e-5;
//   - refusals: another model, another optimizer; the engine is left as it was.
// The save protocol is train/checkpointer.h's (zero/checkpoint/ writes the files), over MPI.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "offload/swap_store.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/mpi/zero_test_util.h"
#include "train/checkpointer.h"
#include "zero/checkpoint/reader.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace zero_test;

enum class Tier { kNone, kHost, kNvme, kParams };  // kParams: offload_param cpu + optimizer nvme

struct Spec {
  int stage = 0;
  DType dtype = DType::kF32;
  Tier tier = Tier::kNone;
  OptimizerOptions::Type optimizer = OptimizerOptions::Type::kAdamW;
  bool pure = false;  // 16-bit without a master
};

std::string describe(const Spec& s) {
  static const char* tiers[] = {"", " offload_optimizer cpu", " offload_optimizer nvme",
                                " offload_param cpu + optimizer nvme"};
  return fmt::format("stage {} {}{}{}{}", s.stage, dtype_name(s.dtype), s.pure ? " pure" : "",
                     tiers[static_cast<int>(s.tier)],
                     s.optimizer == OptimizerOptions::Type::kSgd ? " SGD momentum" : "");
}

// An engine of `spec` with whatever its tiers need; `self`: a world of one (this process alone).
struct Rig {
  CpuDevice device, host;
  std::unique_ptr<Communicator> comm;
  std::optional<SwapStore> swap;
  Gpt2 model{kModel};
  std::optional<Engine> engine;

  Rig(const Spec& spec, const std::string& nvme_path, bool self = false) {
    if (self)
      comm = std::make_unique<SelfCommunicator>(device);
    else
      comm = std::make_unique<MpiCommunicator>(device);
    EngineOptions o;
    o.optimizer.type = spec.optimizer;
    o.optimizer.weight_decay = 0.1f;
    o.optimizer.momentum = 0.9f;
    o.gradient_clipping = 0.5f;
    o.policy = ZeroPolicy::for_stage(spec.stage);
    o.reduce_bucket_size = 10'000;
    o.prefetch_bucket_size = 20'000;
    o.persistence_threshold = 0;
    o.precision.compute = o.precision.grad_accum = o.precision.comm = spec.dtype;
    o.precision.master_weights = !spec.pure;
    // fp16: a scale that overflows at first (hysteresis 1: halved at once) and a short window, so
    // the scaler skips, halves and then applies steps within the run (the test checks both).
    o.precision.fp16.initial_scale_power = 18;
    o.precision.fp16.hysteresis = 1;
    o.precision.fp16.loss_scale_window = 2;
    if (spec.tier != Tier::kNone) o.offload.optimizer.emplace(host);
    if (spec.tier == Tier::kNvme || spec.tier == Tier::kParams) {
      SwapStoreOptions so;
      so.nvme_path = nvme_path;
      so.rank = comm->rank();
      o.offload.optimizer->swap = &swap.emplace(so);
    }
    if (spec.tier == Tier::kParams) o.offload.optimizer->params.emplace();
    engine.emplace(device, *comm, model, o);
  }
  ~Rig() { engine.reset(); }
};

// Step s of a run: every rank's rows of the global batch (world of one: all of them). Returns
// the loss; `scales` (when given) gets the step's loss scale.
double train_step(Engine& e, int s, std::vector<double>* scales = nullptr) {
  const int world = world_size();
  const GlobalBatch batch(s, 0, world);
  const bool self = e.comm().world() == 1 && world > 1;
  const Batch b = self ? batch.rows(0, world * kB) : batch.rows(my_rank() * kB, kB);
  const Batch micro[1] = {b};
  const StepResult r = e.train_step(micro, 1e-3f);
  if (scales) scales->push_back(r.skipped ? -r.loss_scale : r.loss_scale);
  return r.loss;
}

std::vector<std::vector<float>> read_params(Engine& e) {
  std::vector<std::vector<float>> units;
  for (int u = 0; u < e.num_units(); ++u) {
    units.emplace_back(e.model().units()[u]->layout().numel());
    e.read_unit_params(u, units.back().data());
  }
  return units;
}

std::vector<std::vector<std::byte>> state_bytes(Engine& e) {
  std::vector<std::vector<std::byte>> units;
  for (int u = 0; u < e.num_units(); ++u) units.push_back(e.model_state_bytes(u));
  return units;
}

// A save by zt-train's Checkpointer over the rig's communicator: rank 0 prepares, every rank
// writes its file, rank 0 commits with every file's size and checksum (a world of one: rank 0
// alone, over its SelfCommunicator).
void save(Rig& rig, const std::string& root, int64_t step) {
  CheckpointerOptions o;
  o.root = root;
  Checkpointer(*rig.engine, *rig.comm, std::move(o)).save_sync(step, nlohmann::json::object());
}

std::vector<std::string> load(Engine& e, const std::string& root) {
  const CheckpointReader reader(root);
  return e.load_state(reader, reader.manifest().trainer_state.at("engine"));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
template <class T>
void expect_units_equal(const std::vector<std::vector<T>>& got,
                        const std::vector<std::vector<T>>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t u = 0; u < got.size(); ++u)
    EXPECT_TRUE(same_bits(got[u], expected[u])) << what << ", unit " << u;
}

constexpr int kTotal = 5, kSaveAt = 2;

struct Straight {
  std::vector<double> losses;
  std::vector<double> scales;  // fp16: each step's loss scale, negative when it was skipped
  std::vector<std::vector<float>> params;
  std::vector<std::vector<std::byte>> state;
};

Straight straight_run(const Spec& spec, const std::string& nvme) {
  Rig rig(spec, nvme);
  Straight out;
  for (int s = 0; s < kTotal; ++s) out.losses.push_back(train_step(*rig.engine, s, &out.scales));
  out.params = read_params(*rig.engine);
  out.state = state_bytes(*rig.engine);
  return out;
}

void expect_same(const Straight& got, const Straight& expected) {
  EXPECT_TRUE(same_bits(got.losses, expected.losses)) << "losses";
  EXPECT_TRUE(same_bits(got.scales, expected.scales)) << "loss scales and skipped steps";
  expect_units_equal(got.params, expected.params, "read_unit_params");
  expect_units_equal(got.state, expected.state, "model_state_bytes");
}

TEST(CheckpointEngine, ResumeIsBitwiseTheStraightRunInEveryStagePrecisionAndTier) {
  const SharedTempDir dir("resume");
  std::vector<Spec> specs;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
    for (int stage = 0; stage <= 3; ++stage) specs.push_back({stage, dtype});
  specs.push_back({2, DType::kBF16, Tier::kNone, OptimizerOptions::Type::kAdamW, true});
  specs.push_back({1, DType::kF32, Tier::kNone, OptimizerOptions::Type::kSgd});
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    specs.push_back({1, dtype, Tier::kHost});
    specs.push_back({2, dtype, Tier::kNvme});
    specs.push_back({3, dtype, Tier::kParams});
  }
  specs.push_back({3, DType::kF16, Tier::kHost});
  for (const Spec& spec : specs) {
    SCOPED_TRACE(describe(spec));
    const std::string root = dir.path() + "/" + std::to_string(&spec - specs.data());
    const Straight expected = straight_run(spec, dir.path());
    Spec same = spec;
    const Straight got = [&] {
      Straight out;
      {
        Rig rig(spec, dir.path());
        for (int s = 0; s < kSaveAt; ++s)
          out.losses.push_back(train_step(*rig.engine, s, &out.scales));
        save(rig, root, kSaveAt);
      }
      Rig rig(same, dir.path());
      train_step(*rig.engine, 98);  // state of its own, replaced by the load
      const std::vector<std::string> notes = load(*rig.engine, root);
      EXPECT_TRUE(notes.empty()) << notes.front();
      for (int s = kSaveAt; s < kTotal; ++s)
        out.losses.push_back(train_step(*rig.engine, s, &out.scales));
      out.params = read_params(*rig.engine);
      out.state = state_bytes(*rig.engine);
      return out;
    }();
    expect_same(got, expected);
    if (spec.dtype == DType::kF16) {  // the scaler must have had something to carry over
      int skipped = 0;
      for (double x : expected.scales) skipped += x < 0;
      EXPECT_GT(skipped, 0) << "no fp16 step overflowed";
      EXPECT_LT(skipped, kTotal) << "every fp16 step overflowed";
    }
  }
}

// Stages 0-3 and the tiers are bitwise equal on one world size, so a checkpoint taken in one
// configuration and continued in another gives the straight run of the first, bit for bit.
TEST(CheckpointEngine, ReshardingBetweenStagesAndTiersContinuesBitwise) {
  const SharedTempDir dir("reshard");
  struct Pair {
    Spec from, to;
  };
  const std::vector<Pair> pairs = {
      {{3, DType::kF32}, {1, DType::kF32}},
      {{1, DType::kF32}, {0, DType::kF32}},
      {{0, DType::kBF16}, {2, DType::kBF16}},
      {{2, DType::kBF16}, {3, DType::kBF16, Tier::kParams}},
      {{3, DType::kBF16, Tier::kParams}, {1, DType::kBF16, Tier::kHost}},
      {{1, DType::kBF16, Tier::kHost}, {2, DType::kBF16, Tier::kNvme}},
      {{2, DType::kF32, Tier::kNvme}, {0, DType::kF32}},
      {{3, DType::kF16}, {0, DType::kF16, Tier::kNone}},
  };
  for (const Pair& p : pairs) {
    SCOPED_TRACE(describe(p.from) + " -> " + describe(p.to));
    const std::string root = dir.path() + "/" + std::to_string(&p - pairs.data());
    const Straight expected = straight_run(p.from, dir.path());
    std::vector<std::string> notes;
    Straight got;
    {
      Straight out;
      {
        Rig rig(p.from, dir.path());
        for (int s = 0; s < kSaveAt; ++s) out.losses.push_back(train_step(*rig.engine, s));
        save(rig, root, kSaveAt);
      }
      Rig rig(p.to, dir.path());
      notes = load(*rig.engine, root);
      for (int s = kSaveAt; s < kTotal; ++s) out.losses.push_back(train_step(*rig.engine, s));
      out.params = read_params(*rig.engine);
      got = std::move(out);
    }
    EXPECT_TRUE(notes.empty()) << notes.front();
    EXPECT_TRUE(same_bits(got.losses, expected.losses)) << "losses";
    expect_units_equal(got.params, expected.params, "read_unit_params");
  }
}

// fp16 <-> bf16 (and to fp32): the masters load exactly, the working parameters are them
// rounded, and the switch is reported; a pure 16-bit checkpoint gives its working values.
TEST(CheckpointEngine, PrecisionSwitchesLoadTheMastersAndSaySo) {
  const SharedTempDir dir("precision");
  struct Pair {
    Spec from, to;
    const char* note;
  };
  const std::vector<Pair> pairs = {
      {{2, DType::kF16}, {2, DType::kBF16}, "trained in fp16 and this run computes in bf16"},
      {{3, DType::kBF16}, {1, DType::kF16}, "trained in bf16 and this run computes in fp16"},
      {{1, DType::kBF16}, {0, DType::kF32}, "trained in bf16 and this run computes in fp32"},
      {{2, DType::kBF16, Tier::kNone, OptimizerOptions::Type::kAdamW, true},
       {2, DType::kBF16},
       "no fp32 master (pure 16-bit)"},
  };
  for (const Pair& p : pairs) {
    SCOPED_TRACE(describe(p.from) + " -> " + describe(p.to));
    const std::string root = dir.path() + "/" + std::to_string(&p - pairs.data());
    std::vector<std::vector<float>> saved, loaded;
    {
      Rig rig(p.from, dir.path());
      for (int s = 0; s < kSaveAt; ++s) train_step(*rig.engine, s);
      save(rig, root, kSaveAt);
      saved = read_params(*rig.engine);
    }
    Rig rig(p.to, dir.path());
    const std::vector<std::string> notes = load(*rig.engine, root);
    loaded = read_params(*rig.engine);
    expect_units_equal(loaded, saved, "masters after the load");
    bool said = false;
    for (const std::string& n : notes) said = said || n.find(p.note) != std::string::npos;
    EXPECT_TRUE(said) << "no note containing '" << p.note << "'";
    const double loss = train_step(*rig.engine, kSaveAt);
    EXPECT_TRUE(std::isfinite(loss));
  }
}

// Across world sizes: this world's checkpoint into a world of one (rank 0 alone) and back. The
// masters load exactly; a world of one on the whole global batch gives the losses of the
// straight multi-rank run within 1e-5 (the reductions add in another order).
TEST(CheckpointEngine, ReshardingAcrossWorldSizesLoadsTheMastersExactly) {
  const SharedTempDir dir("worlds");
  const Spec many{3, DType::kF32, Tier::kHost}, one{0, DType::kF32};
  const Straight straight = straight_run(many, dir.path());
  std::vector<std::vector<float>> saved;
  {
    Rig rig(many, dir.path());
    for (int s = 0; s < kSaveAt; ++s) train_step(*rig.engine, s);
    save(rig, dir.path() + "/many", kSaveAt);
    saved = read_params(*rig.engine);
  }
  // Rank 0 alone continues the checkpoint and saves again at step kTotal - 1.
  if (my_rank() == 0) {
    Rig rig(one, dir.path() + "/self_nvme", true);
    load(*rig.engine, dir.path() + "/many");
    expect_units_equal(read_params(*rig.engine), saved, "masters in a world of one");
    for (int s = kSaveAt; s < kTotal - 1; ++s) {
      const double loss = train_step(*rig.engine, s);
      EXPECT_NEAR(loss, straight.losses[s], 1e-5 * std::abs(straight.losses[s])) << "step " << s;
    }
    save(rig, dir.path() + "/one", kTotal - 1);
    saved = read_params(*rig.engine);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Every rank loads the world-of-one checkpoint into stage 2 with the optimizer on NVMe.
  Rig rig({2, DType::kF32, Tier::kNvme}, dir.path());
  load(*rig.engine, dir.path() + "/one");
  const auto loaded = read_params(*rig.engine);
  if (my_rank() == 0) expect_units_equal(loaded, saved, "masters back in this world");
  const double loss = train_step(*rig.engine, kTotal - 1);
  EXPECT_NEAR(loss, straight.losses[kTotal - 1], 1e-5 * std::abs(straight.losses[kTotal - 1]));
}

// A checkpoint of another model, or of another optimizer, is refused naming the manifest, and
// the engine's state is what it was.
TEST(CheckpointEngine, AnotherModelOrOptimizerIsRefusedAndNothingIsLoaded) {
  const SharedTempDir dir("refused");
  {
    Rig rig({1, DType::kF32}, dir.path());
    train_step(*rig.engine, 0);
    save(rig, dir.path() + "/adamw", 1);
  }
  {
    Rig rig({1, DType::kF32, Tier::kNone, OptimizerOptions::Type::kSgd}, dir.path());
    train_step(*rig.engine, 0);
    const auto before = state_bytes(*rig.engine);
    try {
      load(*rig.engine, dir.path() + "/adamw");
      ADD_FAILURE() << "an SGD engine loaded an AdamW checkpoint";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_NE(e.message().find("manifest.json: the checkpoint's optimizer keeps [exp_avg, "
                                 "exp_avg_sq], this run's keeps [momentum]"),
                std::string::npos)
          << e.message();
    }
    expect_units_equal(state_bytes(*rig.engine), before, "state after a refused load");
  }
  CpuDevice device;
  MpiCommunicator comm(device);
  Gpt2Config other = kModel;
  other.n_embd = 48;
  Gpt2 model(other);
  EngineOptions o;
  o.policy = ZeroPolicy::for_stage(1);
  Engine engine(device, comm, model, o);
  try {
    load(engine, dir.path() + "/adamw");
    ADD_FAILURE() << "another model loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("manifest.json"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace zt
