// zt-bench train: whole training steps against the machine's sgemm rate, measured in the same
// run on the model's own matmul shapes (M = B*T rows).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <tuple>

#include <nlohmann/json.hpp>

#include "launch/bench.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "comm/self_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The forward matmuls of one GPT-2 step (every block's four and the tied head) as plain
// cblas_sgemm calls on their own buffers: the rate a perfectly GEMM-bound step would reach.
class SgemmProbe {
 public:
  SgemmProbe(const Gpt2Config& c, int64_t M) : M_(M) {
    const int64_t C = c.n_embd, Vp = c.padded_vocab_size();
    for (auto [K, N, transposed, count] :
         {std::tuple{C, 3 * C, false, c.n_layer}, {C, C, false, c.n_layer},
          {C, 4 * C, false, c.n_layer}, {4 * C, C, false, c.n_layer}, {C, Vp, true, 1}}) {
      shapes_.push_back(Shape{K, N, transposed, count, std::vector<float>(M * K, 0.01f),
                              std::vector<float>(K * N, 0.02f), std::vector<float>(M * N)});
    }
  }
  // Runs the whole set once; returns GFLOP/s.
  double run() {
    double flops = 0;
    auto t0 = Clock::now();
    for (Shape& s : shapes_) {
      for (int i = 0; i < s.count; ++i) {
        if (s.transposed)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M_, s.N, s.K, 1.0f, s.a.data(),
                      s.K, s.w.data(), s.K, 0.0f, s.out.data(), s.N);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M_, s.N, s.K, 1.0f, s.a.data(),
                      s.K, s.w.data(), s.N, 0.0f, s.out.data(), s.N);
        flops += 2.0 * M_ * s.K * s.N;
      }
    }
    return flops / seconds_since(t0) / 1e9;
  }

 private:
  struct Shape {
    int64_t K, N;
    bool transposed;
    int count;
    std::vector<float> a, w, out;
  };
  int64_t M_;
  std::vector<Shape> shapes_;
};

// GFLOP/s of a square 1024^3 sgemm, best of a few: the machine's peak-ish BLAS rate, a second
// reference beside the model-shape probe (small-M shapes run below it).
double square_sgemm_gflops() {
  const int n = 1024;
  std::vector<float> a(n * n, 0.01f), b(n * n, 0.02f), c(n * n);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
  SelfCommunicator comm;
  Engine engine(device, comm, model, eo);

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
  const double flops_per_token = 3.0 * model.forward_flops_per_token(T);  // fwd + 2x bwd
  SgemmProbe probe(config, B * T);
  for (int i = 0; i < o.warmup; ++i) {
    engine.train_step({&batch, 1}, 1e-4f);
    probe.run();
  }
  // Steps and sgemm probes alternate, so both see the same machine: the reported fraction is
  // the median of per-pair ratios, robust to a neighbour's load coming and going.
  std::vector<double> ms, sgemm_rates, ratios;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = Clock::now();
    engine.train_step({&batch, 1}, 1e-4f);
    ms.push_back(seconds_since(t0) * 1e3);
    sgemm_rates.push_back(probe.run());
    ratios.push_back(flops_per_token * B * T / (ms.back() / 1e3) / 1e9 / sgemm_rates.back());
  }
  const double median_ms = median(ms);
  const double tokens_per_s = B * T / (median_ms / 1e3);
  const double gflops = flops_per_token * tokens_per_s / 1e9;
  const double sgemm = median(sgemm_rates);
  const double fraction = median(ratios);
  const double square = square_sgemm_gflops();
  const auto& mem = device.memory();

  log.rank0("{:>12} {:>12} {:>10} {:>12} {:>10}", "ms/step", "tokens/s", "GFLOP/s",
            "sgemm GF/s", "of sgemm");
  log.rank0("{:>12.1f} {:>12.0f} {:>10.1f} {:>12.1f} {:>9.1f}%", median_ms, tokens_per_s, gflops,
            sgemm, 100.0 * fraction);
  log.rank0("model FLOPs/token {:.3g} (6 x params + attention); steps {} (median of {}); "
            "peak memory {:.1f} MiB",
            flops_per_token, o.steps, ms.size(), mem.peak_total() / 1048576.0);
  log.rank0("square 1024^3 sgemm in the same run: {:.1f} GFLOP/s; the step reaches {:.1f}% of it",
            square, 100.0 * gflops / square);
  log.rank0("'of sgemm' is the median over steps of (step GFLOP/s) / (sgemm GFLOP/s measured "
            "right after that step on the model's forward matmul shapes)");

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
                        {"fraction_of_sgemm", fraction},
                        {"square_sgemm_gflops", square},
                        {"fraction_of_square_sgemm", gflops / square},
                        {"flops_per_token", flops_per_token},
                        {"step_ms", ms},
                        {"sgemm_gflops_per_step", sgemm_rates}};
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
