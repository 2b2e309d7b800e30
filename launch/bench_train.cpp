// zt-bench train: whole training steps against the machine's sgemm rate, measured in the same
// run on the model's own matmul shapes (M = B*T rows).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "launch/bench.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// GFLOP/s of cblas_sgemm over the forward matmul shapes of one GPT-2 block and the head,
// weighted by their FLOPs: the rate a perfectly GEMM-bound step would reach.
double measure_sgemm_gflops(const Gpt2Config& c, int64_t M) {
  const int64_t C = c.n_embd, Vp = c.padded_vocab_size();
  struct Shape { int64_t K, N; bool transposed_weight; };
  const Shape shapes[] = {{C, 3 * C, false}, {C, C, false}, {C, 4 * C, false},
                          {4 * C, C, false}, {C, Vp, true}};
  double flops = 0, secs = 0;
  for (const Shape& s : shapes) {
    std::vector<float> a(M * s.K, 0.01f), w(s.K * s.N, 0.02f), out(M * s.N);
    auto run = [&] {
      if (s.transposed_weight)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, s.N, s.K, 1.0f, a.data(), s.K,
                    w.data(), s.K, 0.0f, out.data(), s.N);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, s.N, s.K, 1.0f, a.data(),
                    s.K, w.data(), s.N, 0.0f, out.data(), s.N);
    };
    run();  // warm-up
    // Repeat each shape for at least 0.2 s; keep the best of 3 rounds (least disturbed).
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
      int reps = 0;
      auto t0 = Clock::now();
      do { run(); ++reps; } while (seconds_since(t0) < 0.2);
      best = std::min(best, seconds_since(t0) / reps);
    }
    // Each shape counts as often as it appears in the model (blocks x n_layer, head once).
    const double count = s.transposed_weight ? 1.0 : c.n_layer;
    flops += count * 2.0 * M * s.K * s.N;
    secs += count * best;
  }
  return flops / secs / 1e9;
}

}  // namespace

int bench_train(const BenchTrainOptions& o) {
  Logger log;
  Gpt2Config config = gpt2_zoo_config(o.model);
  CpuDevice device;
  Gpt2 model(config);
  EngineOptions eo;
  eo.optimizer.type = OptimizerOptions::Type::kAdamW;
  eo.optimizer.weight_decay = 0.1f;
  eo.gradient_clipping = 1.0f;
  if (o.checkpoint) {
    eo.checkpoint.assign(model.layers().size(), false);
    for (size_t l = 0; l < model.layers().size(); ++l)
      eo.checkpoint[l] = model.layers()[l]->checkpointable();
  }
  Engine engine(device, model, eo);

  const int64_t B = o.batch, T = o.seq_len;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (auto& t : inputs) t = token(rng);
  for (auto& t : targets) t = token(rng);
  Batch batch{inputs.data(), targets.data(), B, T};

  log.rank0("zt-bench train: {} ({:.1f}M parameters), B={} T={} fp32 AdamW, {} threads",
            o.model, model.forward_flops_per_token(0) / 2e6, B, T,
            openblas_get_num_threads());
  for (int i = 0; i < o.warmup; ++i) engine.train_step({&batch, 1}, 1e-4f);
  std::vector<double> ms;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = Clock::now();
    engine.train_step({&batch, 1}, 1e-4f);
    ms.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  const double median_ms = ms[ms.size() / 2];
  const double flops_per_token = 3.0 * model.forward_flops_per_token(T);  // fwd + 2x bwd
  const double tokens_per_s = B * T / (median_ms / 1e3);
  const double gflops = flops_per_token * tokens_per_s / 1e9;
  const double sgemm = measure_sgemm_gflops(config, B * T);
  const auto& mem = device.memory();

  log.rank0("{:>12} {:>12} {:>10} {:>12} {:>10}", "ms/step", "tokens/s", "GFLOP/s",
            "sgemm GF/s", "of sgemm");
  log.rank0("{:>12.1f} {:>12.0f} {:>10.1f} {:>12.1f} {:>9.1f}%", median_ms, tokens_per_s, gflops,
            sgemm, 100.0 * gflops / sgemm);
  log.rank0("model FLOPs/token {:.3g} (6 x params + attention); steps {} (median of {}); "
            "peak memory {:.1f} MiB",
            flops_per_token, o.steps, ms.size(), mem.peak_total() / 1048576.0);

  if (!o.json_path.empty()) {
    nlohmann::json j = {{"bench", "train"},
                        {"model", o.model},
                        {"batch", B},
                        {"seq_len", T},
                        {"dtype", "fp32"},
                        {"activation_checkpointing", o.checkpoint},
                        {"ms_per_step", median_ms},
                        {"tokens_per_s", tokens_per_s},
                        {"gflops", gflops},
                        {"sgemm_gflops", sgemm},
                        {"fraction_of_sgemm", gflops / sgemm},
                        {"flops_per_token", flops_per_token},
                        {"step_ms", ms}};
    nlohmann::json peak;
    for (int c = 0; c < kNumMemCategories; ++c) {
      auto cat = static_cast<MemCategory>(c);
      peak[std::string(mem_category_name(cat))] = mem.peak(cat);
    }
    j["peak_bytes"] = peak;
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace zt
