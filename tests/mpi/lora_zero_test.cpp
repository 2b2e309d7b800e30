// LoRA under ZeRO across ranks (run under mpirun -np 2 and -np 4): a tiny Llama's base frozen and
// adapters on q/k/v/o and the MLP; stages 0-3 give bitwise-equal adapters and losses after five
// AdamW steps with clipping, in fp32 and bf16, with and without activation checkpointing and
// dropout; the frozen base is the same bits after training as before; the gradient memory the
// tracker holds is the adapters' alone (a frozen weight's gradient computed would need a buffer);
// the embedding layer, below every trainable unit, never runs a backward (stage 3 gathers the root
// for the forward and the head only). PEFT's adapter files (pretrained/adapter_io.h) and the
// merged export, collective under stage 3: the same bytes from every stage, and an adapter
// saved at stage 0 loaded at stage 3 gives the trained model's eval losses bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>

#include "comm/mpi_communicator.h"
#include "model_zoo/llama.h"
#include "model_zoo/model_spec.h"
#include "pretrained/adapter_io.h"
#include "pretrained/save_pretrained.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/model_zoo/tiny_llama.h"
#include "zero/engine.h"
#include "zero_test_util.h"

namespace zt {
namespace {

using namespace zero_test;

Tuning lora_tuning(float dropout, const std::string& bias = "none") {
  Tuning t;
  t.lora.enabled = true;
  t.lora.r = 4;
  t.lora.alpha = 8.0f;
  t.lora.dropout = dropout;
  t.lora.target_modules = {"all-linear"};
  t.lora.bias = bias;
  return t;
}

Precision bf16() {
  Precision p;
  p.compute = p.grad_accum = p.comm = DType::kBF16;
  p.master_weights = true;
  return p;
}

struct Spec {
  LlamaConfig config;
  Tuning tuning;
  int stage = 0;
  bool checkpoint = false;
  Precision precision = {};
};

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // every unit, full
  std::vector<std::vector<float>> initial;
  int64_t grad_bytes = 0;          // the tracker's after the last step
  int64_t trainable_elements = 0;  // the trainable units' padded elements
  int64_t root_gathers = 0;
};

RunResult run(const Spec& spec) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = world_size(), rank = my_rank();
  Llama model(spec.config, spec.tuning);
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.optimizer.weight_decay = 0.1f;
  o.gradient_clipping = 0.5f;
  o.policy = ZeroPolicy::for_stage(spec.stage);
  o.precision = spec.precision;
  o.persistence_threshold = 0;  // stage 3 gathers every unit
  o.prefetch_bucket_size = 20'000;
  o.reduce_bucket_size = 10'000;
  if (spec.checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  Engine engine(device, comm, model, o);
  RunResult r;
  auto read_all = [&](std::vector<std::vector<float>>& out) {
    for (int u = 0; u < engine.num_units(); ++u) {
      out.emplace_back(model.units()[u]->layout().numel());
      engine.read_unit_params(u, out.back().data());
    }
  };
  read_all(r.initial);
  const int64_t gathers_before = engine.gather_count(0);
  for (int step = 0; step < kSteps; ++step) {
    const GlobalBatch global(step, 0, world);
    const Batch batch = global.rows(rank * kB, kB);
    r.losses.push_back(engine.train_step(std::span<const Batch>(&batch, 1), 1e-2f).loss);
  }
  r.grad_bytes = device.memory().current(MemCategory::kGrads);
  for (int u = 0; u < engine.num_units(); ++u)
    if (!model.units()[u]->frozen())
      r.trainable_elements += ShardLayout(model.units()[u]->layout().numel(), world, rank).padded;
  r.root_gathers = engine.gather_count(0) - gathers_before;
  read_all(r.params);
  return r;
}

bool bitwise_equal(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() || std::memcmp(a[u].data(), b[u].data(), a[u].size() * 4) != 0)
      return false;
  return true;
}

LlamaConfig tiny(bool tied, bool qkv_bias) {
  return tiny_llama_config(kModel.vocab_size, static_cast<int>(kT), tied, qkv_bias, false);
}

TEST(LoraZeroStages, BitwiseIdenticalAdaptersAcrossStages) {
  struct Case {
    const char* name;
    Spec spec;
  };
  const Case cases[] = {
      {"gqa tied qkv-bias fp32", {tiny(true, true), lora_tuning(0.0f)}},
      {"gqa untied fp32 dropout", {tiny(false, false), lora_tuning(0.1f)}},
      {"gqa tied qkv-bias bf16 bias=all",
       {tiny(true, true), lora_tuning(0.0f, "all"), 0, false, bf16()}},
      {"phi3 bf16 dropout",
       {tiny_family_config(LlamaFamily::kPhi3, kModel.vocab_size, int(kT)), lora_tuning(0.1f), 0,
        false, bf16()}},
  };
  for (const Case& c : cases)
    for (bool checkpoint : {false, true}) {
      Spec spec = c.spec;
      spec.checkpoint = checkpoint;
      const RunResult reference = run(spec);
      // Training moved the adapters.
      EXPECT_FALSE(bitwise_equal(reference.initial, reference.params)) << c.name;
      for (int stage = 1; stage <= 3; ++stage) {
        spec.stage = stage;
        const RunResult r = run(spec);
        EXPECT_TRUE(bitwise_equal(reference.params, r.params))
            << c.name << ": stage " << stage << " differs from stage 0, checkpointing "
            << checkpoint;
        EXPECT_EQ(reference.losses, r.losses) << c.name << ": stage " << stage;
      }
    }
}

TEST(LoraZeroStages, FrozenBaseUnchangedAndNoGradientMemory) {
  for (int stage : {0, 3}) {
    Spec spec{tiny(true, false), lora_tuning(0.0f)};
    spec.stage = stage;
    spec.precision = bf16();
    Llama shapes(spec.config, spec.tuning);
    const RunResult r = run(spec);
    for (size_t u = 0; u < r.params.size(); ++u) {
      if (!shapes.units()[u]->frozen()) continue;
      EXPECT_EQ(std::memcmp(r.initial[u].data(), r.params[u].data(), r.params[u].size() * 4), 0)
          << "frozen unit " << shapes.units()[u]->name() << " changed, stage " << stage;
    }
    // bf16 gradients (2 bytes) of the trainable units, sharded from stage 2 on: nothing else.
    const int64_t elements =
        stage >= 2 ? r.trainable_elements / world_size() : r.trainable_elements;
    EXPECT_EQ(r.grad_bytes, 2 * elements) << "stage " << stage;
    // Stage 3: the root (frozen, unit 0) is gathered for the embedding's forward and the head's
    // forward and backward, never for an embedding backward: 2 gathers a step at most.
    if (stage == 3) {
      EXPECT_EQ(r.root_gathers, 2 * kSteps);
    }
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(LoraZeroStages, AdapterFilesAndMergedExportAreTheSameFromEveryStage) {
  const SharedTempDir dir("lora_files");
  ModelSpec spec{tiny(true, true), {}};
  spec.tuning = lora_tuning(0.0f, "all");
  const int world = world_size(), rank = my_rank();
  const GlobalBatch eval_global(99, 0, world);
  const Batch eval_batch = eval_global.rows(rank * kB, kB);
  auto engine_options = [](int stage) {
    EngineOptions o;
    o.optimizer.type = OptimizerOptions::Type::kAdamW;
    o.policy = ZeroPolicy::for_stage(stage);
    o.precision = bf16();
    o.persistence_threshold = 0;  // stage 3 gathers every unit
    return o;
  };
  std::vector<double> trained_losses;
  for (int stage = 0; stage <= 3; ++stage) {
    CpuDevice device;
    MpiCommunicator comm(device);
    Llama model(spec.llama(), spec.tuning);
    Engine engine(device, comm, model, engine_options(stage));
    for (int step = 0; step < kSteps; ++step) {
      const GlobalBatch global(step, 0, world);
      const Batch batch = global.rows(rank * kB, kB);
      engine.train_step(std::span<const Batch>(&batch, 1), 1e-2f);
    }
    const std::string at = dir.path() + "/stage" + std::to_string(stage);
    save_adapter(engine, spec, "", at + "/adapter");  // collective
    SavePretrainedOptions o;
    o.dir = at + "/merged";
    o.dtype = DType::kBF16;
    o.merge_adapters = true;
    save_pretrained(engine, spec, o);  // collective
    if (stage == 0) trained_losses.push_back(engine.eval_loss(eval_batch));
  }
  if (rank == 0)
    for (int stage = 1; stage <= 3; ++stage)
      for (const char* file : {"adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                               "merged/model.safetensors"}) {
        const std::string path = dir.path() + "/stage" + std::to_string(stage) + "/" + file;
        EXPECT_EQ(file_bytes(path), file_bytes(dir.path() + "/stage0/" + file))
            << path << " differs from stage 0's";
      }
  // The stage-0 adapter into a stage-3 engine over the same base (the same seed: the same frozen
  // base and initial adapters).
  CpuDevice device;
  MpiCommunicator comm(device);
  Llama model(spec.llama(), spec.tuning);
  Engine engine(device, comm, model, engine_options(3));
  EXPECT_NE(engine.eval_loss(eval_batch), trained_losses.at(0));
  load_adapter(engine, spec, dir.path() + "/stage0/adapter");  // collective
  EXPECT_EQ(engine.eval_loss(eval_batch), trained_losses.at(0));
}

}  // namespace
}  // namespace zt
