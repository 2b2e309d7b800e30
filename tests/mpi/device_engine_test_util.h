// What the device-engine suites (device_engine_test.cpp, device_engine_offload_test.cpp) share:
// a Case of the engine (stage, dtype, accumulation, overlap, checkpointing, optimizer, clipping)
// and its EngineOptions; run, which trains it on a device and communicator (three steps, the
// eval loss, weights read, written, saved and loaded; the optimizer and parameters optionally
// offloaded) and returns its Outcome; and the bitwise comparisons of two outcomes. In
// zero_test, beside the model and batches of zero_test_util.h. Helpers only; no tests here.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model_zoo/gpt2.h"
#include "offload/swap_store.h"
#include "pretrained/weights_io.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "tests/mpi/zero_test_util.h"
#include "zero/engine.h"

namespace zt::zero_test {

struct Case {
  int stage;
  DType dtype;  // compute, gradient storage and reduction dtype; fp32 master when 16-bit
  int accumulation;
  bool overlap;
  bool checkpoint;
  OptimizerOptions::Type optimizer = OptimizerOptions::Type::kAdamW;
  bool clip = true;  // gradient_clipping 0.5 (small enough to clip), else off
};

inline std::string describe(const Case& c) {
  const char* optimizer = c.optimizer == OptimizerOptions::Type::kAdam  ? " Adam"
                          : c.optimizer == OptimizerOptions::Type::kSgd ? " SGD"
                                                                        : "";
  return fmt::format("stage {} {} accumulation {}{}{}{}{}", c.stage, dtype_name(c.dtype),
                     c.accumulation, c.overlap ? " overlap_comm" : "",
                     c.checkpoint ? " checkpointed" : "", optimizer, c.clip ? "" : " no clipping");
}

inline EngineOptions options(const Case& c, Model& model) {
  EngineOptions o;
  o.optimizer.type = c.optimizer;
  o.optimizer.weight_decay = 0.1f;
  o.optimizer.momentum = 0.9f;  // SGD
  o.gradient_clipping = c.clip ? 0.5f : 0.0f;
  o.policy = ZeroPolicy::for_stage(c.stage);
  o.overlap_comm = c.overlap;
  o.reduce_bucket_size = 10'000;
  o.prefetch_bucket_size = 20'000;
  o.persistence_threshold = 0;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = c.dtype;
  o.precision.fp16.initial_scale_power = 10;
  if (c.checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  return o;
}

// What a run leaves on the host, everything the engine exposes.
struct Outcome {
  std::vector<double> losses, grad_norms, loss_scales, skipped;  // per train_step
  double eval = 0;
  std::vector<std::vector<float>> params;       // read_unit_params after training
  std::vector<std::vector<std::byte>> state;    // model_state_bytes, this rank's
  std::vector<std::vector<float>> after_write;  // write_unit_params, one step, read back
  std::vector<std::vector<float>> after_load;   // save_weights, a step, load_weights, read
  std::string file;                             // rank 0: the saved safetensors bytes
  size_t device_optimizer_bytes = 0;            // the device's kOptimizer bytes after training
  size_t device_param_bytes = 0;                // ... and its kParams bytes
  size_t host_param_bytes = 0;                  // the host tier's kParams bytes (offload_param)
  int64_t nvme_param_bytes = 0;                 // Engine::nvme_bytes(kParams)
  std::vector<int> early_updates;               // per train_step (offload_optimizer)
  size_t master_elements = 0;                   // this rank's master() elements, all units
};

inline std::vector<Batch> micro_batches(std::vector<GlobalBatch>& globals, int step,
                                        int accumulation) {
  globals.clear();
  for (int m = 0; m < accumulation; ++m) globals.emplace_back(step, m, world_size());
  std::vector<Batch> micro;
  for (auto& g : globals) micro.push_back(g.rows(my_rank() * kB, kB));
  return micro;
}

// A file name every rank agrees on and no concurrent job shares: rank 0's pid.
inline std::string shared_temp_path(const std::string& tag) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() /
          fmt::format("zt_device_engine_{}_{}.safetensors", pid, tag))
      .string();
}

// offload_param in a run: the parameters on the host tier, or with `swap` in its swap files
// through `buffers` host buffers.
// `offload`: the host tier of an offloaded optimizer, or null; `swap`: its NVMe store, or null;
// `params`: offload_param too (with `offload`).
inline Outcome run(const Case& c, Device& device, Communicator& comm, const std::string& tag,
                   Device* offload = nullptr, SwapStore* swap = nullptr,
                   const ParamOffload* params = nullptr) {
  Gpt2 model(kModel);
  EngineOptions eo = options(c, model);
  if (offload) eo.offload.optimizer.emplace(*offload, swap);
  if (params) eo.offload.optimizer->params = *params;
  Engine engine(device, comm, model, eo);
  Outcome out;
  std::vector<GlobalBatch> globals;
  auto step = [&](int s) {
    const StepResult r = engine.train_step(micro_batches(globals, s, c.accumulation), 1e-3f);
    out.losses.push_back(r.loss);
    out.grad_norms.push_back(r.grad_norm);
    out.loss_scales.push_back(r.loss_scale);
    out.skipped.push_back(r.skipped ? 1.0 : 0.0);
    out.early_updates.push_back(r.early_updates);
  };
  auto read_all = [&] {
    std::vector<std::vector<float>> units;
    for (int u = 0; u < engine.num_units(); ++u) {
      units.emplace_back(model.units()[u]->layout().numel());
      engine.read_unit_params(u, units.back().data());  // collective under stage 3
    }
    return units;
  };
  for (int s = 0; s < 3; ++s) step(s);
  out.device_optimizer_bytes = device.memory().current(MemCategory::kOptimizer);
  out.device_param_bytes = device.memory().current(MemCategory::kParams);
  if (offload) out.host_param_bytes = offload->memory().current(MemCategory::kParams);
  out.nvme_param_bytes = engine.nvme_bytes(MemCategory::kParams);
  for (Unit* unit : model.units()) {
    const ShardLayout shard(unit->layout().numel(), world_size(), my_rank());
    out.master_elements += static_cast<size_t>(c.stage >= 1 ? shard.shard : shard.padded);
  }
  const GlobalBatch eval_batch(77, 0, world_size());
  out.eval = engine.eval_loss(eval_batch.rows(my_rank() * kB, kB));
  out.params = read_all();
  for (int u = 0; u < engine.num_units(); ++u) out.state.push_back(engine.model_state_bytes(u));

  // Weights in: values derived from the trained ones (the same on every rank), then a step.
  for (int u = 0; u < engine.num_units(); ++u) {
    std::vector<float> v = out.params[u];
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * v[i] + 1e-3f * float(i % 7);
    engine.write_unit_params(u, v.data());
  }
  step(3);
  out.after_write = read_all();

  // Weights out to a file and back in, after a step that moved them.
  const std::string path = shared_temp_path(tag);
  save_weights(engine, path);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 wrote it; every rank reads it
  step(4);
  load_weights(engine, path);
  out.after_load = read_all();
  MPI_Barrier(MPI_COMM_WORLD);
  if (my_rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    out.file.assign(std::istreambuf_iterator<char>(in), {});
    std::remove(path.c_str());
  }
  return out;
}

template <class T>
inline bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
inline void expect_units_equal(const std::vector<std::vector<T>>& got,
                               const std::vector<std::vector<T>>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t u = 0; u < got.size(); ++u)
    EXPECT_TRUE(same_bits(got[u], expected[u])) << what << ", unit " << u;
}

// What every run records: the steps' losses, norms and scales, the eval loss, the parameters.
inline void expect_same_training(const Outcome& got, const Outcome& expected) {
  EXPECT_TRUE(same_bits(got.losses, expected.losses)) << "losses";
  EXPECT_TRUE(same_bits(got.grad_norms, expected.grad_norms)) << "grad norms";
  EXPECT_TRUE(same_bits(got.loss_scales, expected.loss_scales)) << "loss scales";
  EXPECT_EQ(std::memcmp(&got.eval, &expected.eval, sizeof(double)), 0)
      << "eval loss " << got.eval << " vs " << expected.eval;
  expect_units_equal(got.params, expected.params, "read_unit_params");
}

inline void expect_same_outcome(const Outcome& got, const Outcome& expected) {
  expect_same_training(got, expected);
  EXPECT_TRUE(same_bits(got.skipped, expected.skipped)) << "skipped steps";
  expect_units_equal(got.state, expected.state, "model_state_bytes");
  expect_units_equal(got.after_write, expected.after_write, "after write_unit_params");
  expect_units_equal(got.after_load, expected.after_load, "after load_weights");
  EXPECT_TRUE(got.file == expected.file) << "saved weights files differ";
}
}  // namespace zt::zero_test
