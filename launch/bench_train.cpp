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
#include "runtime/device_factory.h"
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


Precision bench_precision(const std::string& name) {
  Precision p;
  if (name == "fp32") return p;
  p.compute = name.starts_with("bf16") ? DType::kBF16 : DType::kF16;
  p.grad_accum = p.comm = p.compute;
  p.master_weights = !name.ends_with("-pure");
  return p;
}

struct PrecisionRow {
  std::string name;
  double ms = 0, tokens_per_s = 0, gflops = 0, sgemm = 0, fraction = 0;
  double mfu = 0;  // cuda: model FLOP/s over the peak
  int64_t skipped = 0;
  std::vector<double> step_ms, sgemm_rates;
  MemoryTracker memory;
};

// `probe`: the CPU's sgemm reference, alternated with the steps; null on a GPU (MFU instead).
PrecisionRow measure(const BenchTrainOptions& o, const Gpt2Config& config,
                     const std::string& precision, const Batch& batch, SgemmProbe* probe) {
  // One device per precision: its own peak memory.
  std::unique_ptr<Device> device_owner =
      make_device(parse_device_kind(o.device, "--device"), 0);
  Device& device = *device_owner;
  if (o.allow_tf32) set_allow_tf32(device, true);
  Gpt2 model(config);
  EngineOptions eo;
  eo.optimizer.type = OptimizerOptions::Type::kAdamW;
  eo.optimizer.weight_decay = 0.1f;
  eo.gradient_clipping = 1.0f;
  eo.precision = bench_precision(precision);
  if (o.checkpoint) {
    eo.checkpoint.assign(model.layers().size(), false);
    for (size_t l = 0; l < model.layers().size(); ++l)
      eo.checkpoint[l] = model.layers()[l]->checkpointable();
  }
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, eo);
  const double flops_per_token = 3.0 * model.forward_flops_per_token(batch.T);  // fwd + 2x bwd
  const double tokens = static_cast<double>(batch.B * batch.T);
  PrecisionRow row;
  row.name = precision;
  for (int i = 0; i < o.warmup; ++i) {
    row.skipped += engine.train_step({&batch, 1}, 1e-4f).skipped;
    if (probe) probe->run();
  }
  // Steps and sgemm probes alternate, so both see the same machine: the reported fraction is
  // the median of per-pair ratios, robust to a neighbour's load coming and going.
  std::vector<double> ratios;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = Clock::now();
    row.skipped += engine.train_step({&batch, 1}, 1e-4f).skipped;
    row.step_ms.push_back(seconds_since(t0) * 1e3);
    if (!probe) continue;
    row.sgemm_rates.push_back(probe->run());
    ratios.push_back(flops_per_token * tokens / (row.step_ms.back() / 1e3) / 1e9 /
                     row.sgemm_rates.back());
  }
  row.ms = median(row.step_ms);
  row.tokens_per_s = tokens / (row.ms / 1e3);
  row.gflops = flops_per_token * row.tokens_per_s / 1e9;
  if (probe) {
    row.sgemm = median(row.sgemm_rates);
    row.fraction = median(ratios);
  }
  row.mfu = row.gflops / (o.peak_tflops * 1e3);
  row.memory = device.memory();
  return row;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

}  // namespace

int bench_train(const BenchTrainOptions& o) {
  Logger log;
  const Gpt2Config config = gpt2_zoo_config(o.model);
  const int64_t B = o.batch, T = o.seq_len;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (auto& t : inputs) t = token(rng);
  for (auto& t : targets) t = token(rng);
  const Batch batch{inputs.data(), targets.data(), B, T};
  const double flops_per_token = 3.0 * Gpt2(config).forward_flops_per_token(T);

  log.rank0("zt-bench train: {} ({:.1f}M parameters), B={} T={} AdamW{}, {} threads",
            o.model, Gpt2(config).forward_flops_per_token(0) / 2e6, B, T,
            o.checkpoint ? ", activation checkpointing" : "", openblas_get_num_threads());
  const bool gpu = parse_device_kind(o.device, "--device") == DeviceKind::kCuda;
  std::unique_ptr<SgemmProbe> probe;
  if (!gpu) probe = std::make_unique<SgemmProbe>(config, B * T);
  std::vector<PrecisionRow> rows;
  for (const std::string& precision : o.precisions)
    rows.push_back(measure(o, config, precision, batch, probe.get()));
  if (gpu) {
    log.rank0("{:>10} {:>10} {:>10} {:>10} {:>7} | peak MiB: {:>8} {:>8} {:>8} {:>8} {:>8} "
              "{:>8}",
              "precision", "ms/step", "tokens/s", "TFLOP/s", "MFU", "params", "grads", "optim",
              "activ", "work", "total");
    for (const PrecisionRow& r : rows) {
      const MemoryTracker& m = r.memory;
      log.rank0("{:>10} {:>10.2f} {:>10.0f} {:>10.1f} {:>6.1f}% | {:>18.1f} {:>8.1f} {:>8.1f} "
                "{:>8.1f} {:>8.1f} {:>8.1f}",
                r.name, r.ms, r.tokens_per_s, r.gflops / 1e3, 100.0 * r.mfu,
                mib(m.peak(MemCategory::kParams)), mib(m.peak(MemCategory::kGrads)),
                mib(m.peak(MemCategory::kOptimizer)), mib(m.peak(MemCategory::kActivations)),
                mib(m.peak(MemCategory::kWorkspace)), mib(m.peak_total()));
    }
    log.rank0("MFU: model FLOPs (6 x params + attention, {:.3g}/token) per second over {} "
              "TFLOP/s", flops_per_token, o.peak_tflops);
    if (!o.json_path.empty()) {
      nlohmann::json j = {{"bench", "train"}, {"device", o.device}, {"model", o.model},
                          {"batch", B}, {"seq_len", T}, {"peak_tflops", o.peak_tflops},
                          {"activation_checkpointing", o.checkpoint},
                          {"rows", nlohmann::json::array()}};
      for (const PrecisionRow& r : rows)
        j["rows"].push_back({{"precision", r.name}, {"ms_per_step", r.ms},
                             {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
                             {"step_ms", r.step_ms},
                             {"peak_bytes_total", r.memory.peak_total()},
                             {"peak_activation_bytes", r.memory.peak(MemCategory::kActivations)}});
      std::ofstream out(o.json_path);
      if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
      out << j.dump(2) << "\n";
    }
    return 0;
  }
  const double square = square_sgemm_gflops();

  log.rank0("{:>10} {:>10} {:>10} {:>9} {:>10} {:>9} | peak MiB: {:>8} {:>8} {:>8} {:>8} "
            "{:>8} {:>8}",
            "precision", "ms/step", "tokens/s", "GFLOP/s", "sgemm GF/s", "of sgemm", "params",
            "grads", "optim", "activ", "work", "total");
  for (const PrecisionRow& r : rows) {
    const MemoryTracker& m = r.memory;
    log.rank0("{:>10} {:>10.1f} {:>10.0f} {:>9.1f} {:>10.1f} {:>8.1f}% | {:>18.1f} {:>8.1f} "
              "{:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f}",
              r.name, r.ms, r.tokens_per_s, r.gflops, r.sgemm, 100.0 * r.fraction,
              mib(m.peak(MemCategory::kParams)), mib(m.peak(MemCategory::kGrads)),
              mib(m.peak(MemCategory::kOptimizer)), mib(m.peak(MemCategory::kActivations)),
              mib(m.peak(MemCategory::kWorkspace)), mib(m.peak_total()));
    if (r.skipped > 0)
      log.rank0("{:>10} {} of {} steps skipped on fp16 overflow", "", r.skipped,
                o.warmup + o.steps);
  }
  log.rank0("model FLOPs/token {:.3g} (6 x params + attention); each row the median of {} steps",
            flops_per_token, o.steps);
  log.rank0("square 1024^3 sgemm in the same run: {:.1f} GFLOP/s; the rows reach {} of it",
            square, [&] {
              std::string s;
              for (const PrecisionRow& r : rows)
                s += fmt::format("{}{}: {:.1f}%", s.empty() ? "" : ", ", r.name,
                                 100.0 * r.gflops / square);
              return s;
            }());
  log.rank0("'of sgemm' is the median over steps of (step GFLOP/s) / (fp32 sgemm GFLOP/s "
            "measured right after that step on the model's forward matmul shapes). 16-bit rows "
            "compute in fp32 on this back end (values rounded to 16 bits where stored); 'work' "
            "is the fp32 copies that takes");

  if (!o.json_path.empty()) {
    nlohmann::json j = {{"bench", "train"},
                        {"model", o.model},
                        {"batch", B},
                        {"seq_len", T},
                        {"activation_checkpointing", o.checkpoint},
                        {"flops_per_token", flops_per_token},
                        {"square_sgemm_gflops", square},
                        {"rows", nlohmann::json::array()}};
    for (const PrecisionRow& r : rows) {
      nlohmann::json peak;
      for (int c = 0; c < kNumMemCategories; ++c) {
        auto cat = static_cast<MemCategory>(c);
        peak[std::string(mem_category_name(cat))] = r.memory.peak(cat);
      }
      peak["total"] = r.memory.peak_total();
      j["rows"].push_back({{"precision", r.name},
                           {"ms_per_step", r.ms},
                           {"tokens_per_s", r.tokens_per_s},
                           {"gflops", r.gflops},
                           {"sgemm_gflops", r.sgemm},
                           {"fraction_of_sgemm", r.fraction},
                           {"fraction_of_square_sgemm", r.gflops / square},
                           {"skipped_steps", r.skipped},
                           {"step_ms", r.step_ms},
                           {"sgemm_gflops_per_step", r.sgemm_rates},
                           {"peak_bytes", peak}});
    }
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace zt
