// zt-bench train: whole training steps against the cores' peak fp32 FMA rate, measured in the
// same run (runtime/cpu/cpu_peak.h), beside the rate oneDNN's GEMMs reach on the model's own
// matmul shapes (M = B*T rows); with --profile, where each step's time went, per Kernels entry.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "comm/self_communicator.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/device_factory.h"
#include "runtime/dtype.h"
#include "runtime/profiling_kernels.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check_dnnl(dnnl_status_t status, const char* call) {
  if (status != dnnl_success)
    throw_internal(fmt::format("oneDNN {} failed with status {}", call, static_cast<int>(status)));
}

// The matmuls of one GPT-2 step as oneDNN computes them on their own buffers: forward
// out = inp·W, dinput = dout·Wᵀ and dweight = inpᵀ·dout (or its transpose for the tied head)
// of one block's four products and the head, each block product counted n_layer times. fp32
// through dnnl_sgemm; bf16 through a bf16 x bf16 -> fp32 matmul primitive (AMX-BF16 where the
// CPU has it). The rate a perfectly GEMM-bound step would reach with this library, a bit
// above it: products run with beta = 0, and one block's weights stay in cache across the
// probe's calls where the step streams twelve blocks' weights.
class GemmProbe {
 public:
  GemmProbe(const Gpt2Config& c, int64_t M, bool bf16) : bf16_(bf16) {
    const int64_t C = c.n_embd, Vp = c.padded_vocab_size();
    for (auto [K, N, out_in, count] : {std::tuple{C, 3 * C, false, c.n_layer},
                                       {C, C, false, c.n_layer},
                                       {C, 4 * C, false, c.n_layer},
                                       {4 * C, C, false, c.n_layer},
                                       {C, Vp, true, 1}}) {
      // Row-major C(m,n) = op(A)(m,k)·op(B)(k,n); a transposed operand is stored as op's
      // transpose. W is (K,N), or (N,K) for the head (nn.Linear's layout).
      add(M, N, K, false, out_in, count);   // forward: inp (M,K) · W
      add(M, K, N, false, !out_in, count);  // dinput: dout (M,N) · Wᵀ
      if (out_in)
        add(N, K, M, true, false, count);  // dweight (N,K) = doutᵀ · inp
      else
        add(K, N, M, true, false, count);  // dweight (K,N) = inpᵀ · dout
    }
  }
  const char* name() const { return bf16_ ? "oneDNN bf16 matmul" : "oneDNN sgemm"; }
  // The implementations oneDNN chose for the bf16 products ("brg:avx512_core_amx", ...).
  std::string implementations() const {
    std::set<std::string> names;
    for (const Gemm& g : gemms_)
      if (g.primitive) names.insert(g.implementation);
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }
  // Runs every product once; returns GFLOP/s of the step's products (each block product's
  // time counted n_layer times).
  double run() {
    double flops = 0.0, seconds = 0.0;
    for (Gemm& g : gemms_) {
      const auto t0 = Clock::now();
      if (g.primitive) {
        g.primitive->execute(
            stream_,
            {{DNNL_ARG_SRC, g.a_mem}, {DNNL_ARG_WEIGHTS, g.b_mem}, {DNNL_ARG_DST, g.c_mem}});
        stream_.wait();
      } else {
        check_dnnl(
            dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.0f, g.a.data(),
                       g.ta ? g.m : g.k, g.b.data(), g.tb ? g.k : g.n, 0.0f, g.c.data(), g.n),
            "dnnl_sgemm");
      }
      seconds += seconds_since(t0) * g.count;
      flops += 2.0 * g.m * g.n * g.k * g.count;
    }
    return flops / seconds / 1e9;
  }

 private:
  struct Gemm {
    int64_t m, n, k;
    bool ta, tb;
    int count;
    std::vector<float> a, b, c;
    std::vector<uint16_t> a16, b16;
    dnnl::memory a_mem, b_mem, c_mem;
    std::unique_ptr<dnnl::matmul> primitive;  // bf16 only
    std::string implementation;
  };
  void add(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int count) {
    Gemm g{m, n, k, ta, tb, count, {}, {}, std::vector<float>(m * n), {}, {}, {}, {}, {}, {}, {}};
    if (!bf16_) {
      g.a.assign(m * k, 0.01f);
      g.b.assign(k * n, 0.02f);
      gemms_.push_back(std::move(g));
      return;
    }
    g.a16.assign(m * k, fp32_to_bf16(0.01f));
    g.b16.assign(k * n, fp32_to_bf16(0.02f));
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a_md({m, k}, dt::bf16, ta ? tag::ba : tag::ab);
    const dnnl::memory::desc b_md({k, n}, dt::bf16, tb ? tag::ba : tag::ab);
    const dnnl::memory::desc c_md({m, n}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
    g.implementation = pd.impl_info_str();
    g.primitive = std::make_unique<dnnl::matmul>(pd);
    g.a_mem = dnnl::memory(a_md, engine_, g.a16.data());
    g.b_mem = dnnl::memory(b_md, engine_, g.b16.data());
    g.c_mem = dnnl::memory(c_md, engine_, g.c.data());
    gemms_.push_back(std::move(g));
  }

  bool bf16_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<Gemm> gemms_;
};

// GFLOP/s of a square 1024^3 oneDNN sgemm, best of a few: the library's best case, beside the
// model-shape probe (small-M shapes run below it).
double square_sgemm_gflops() {
  const int n = 1024;
  std::vector<float> a(n * n, 0.01f), b(n * n, 0.02f), c(n * n);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    auto t0 = Clock::now();
    check_dnnl(dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n),
               "dnnl_sgemm");
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

// The per-step peak reference: best of 3 runs of 30 ms (the start-up figure: 5 of 50 ms).
PeakFma peak_after_step() { return measure_peak_fma(3, 0.03); }

struct PrecisionRow {
  std::string name;
  double ms = 0, tokens_per_s = 0, gflops = 0, gemm = 0, peak = 0, fraction = 0;
  double mfu = 0;  // cuda: model FLOP/s over the peak
  int64_t skipped = 0;
  std::string gemm_name;
  std::vector<double> step_ms, gemm_rates, peak_rates;
  // Every step's loss, warm-up steps first: the same model, batch and seed give the same list
  // with and without --checkpoint (tests/gpu/device_check.sh compares them bitwise).
  std::vector<double> losses;
  MemoryTracker memory;
  OpProfile profile;  // --profile: the timed steps' kernel time, per Kernels entry
  // The row's step over the first row's step of the same round, median and quartiles over the
  // rounds (paired_ratio); 1 for the first row.
  double ratio = 1, ratio_q1 = 1, ratio_q3 = 1;
};

// The CPU's references, alternated with the steps; absent on a GPU (MFU instead).
struct CpuReferences {
  std::unique_ptr<GemmProbe> sgemm, bf16;  // bf16: made when a bf16 row is asked for
  GemmProbe& for_precision(const std::string& precision) {
    // The library rate of the path the step's GEMMs take: bf16 matmul where bf16 runs natively
    // (native_bf16_gemm: not under ZT_CPU_SIMD=avx2 or below), sgemm otherwise.
    return precision.starts_with("bf16") && native_bf16_gemm() ? *bf16 : *sgemm;
  }
};

// One row's engine and what it computes with. Every row is built before any steps, and the rows
// then step in turn (row 1 step 1, row 2 step 1, ..., row 1 step 2, ...), so a burst of load
// from a neighbour on a shared machine falls on every row alike and their ratios hold.
struct RowRun {
  std::unique_ptr<Device> device;  // one per row: its own peak memory
  std::unique_ptr<Gpt2> model;
  // One profile filled by every table the engine computes with (fp32, and the compute dtype's);
  // declared before the engine, which computes with it.
  std::unique_ptr<OpProfile> profile;
  std::vector<std::unique_ptr<ProfilingKernels>> profiling_tables;
  std::unique_ptr<SelfCommunicator> comm;
  std::unique_ptr<Engine> engine;
  GemmProbe* gemm = nullptr;  // CPU: the library rate of this row's GEMM path
  PrecisionRow row;
};

std::unique_ptr<RowRun> start_row(const BenchTrainOptions& o, const Gpt2Config& config,
                                  const std::string& precision, CpuReferences* cpu) {
  auto run = std::make_unique<RowRun>();
  run->device = make_device(parse_device_kind(o.device, "--device"), 0);
  Device& device = *run->device;
  if (o.allow_tf32) set_allow_tf32(device, true);
  run->model = std::make_unique<Gpt2>(config);
  Gpt2& model = *run->model;
  model.set_chunk_budget_bytes(device.chunk_budget_bytes());  // the LM head's logits chunk
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
  if (o.profile) {
    run->profile = std::make_unique<OpProfile>();
    RowRun* r = run.get();
    eo.kernels = [r](Kernels& device_table) -> Kernels& {
      // A GPU enqueues: its entries are timed by events on its stream (a StreamTimer), read
      // back once per step (flush_profile); the CPU computes before returning: the host clock.
      std::unique_ptr<StreamTimer> timer = r->device->make_stream_timer();
      if (timer)
        r->profiling_tables.push_back(
            std::make_unique<ProfilingKernels>(device_table, *r->profile, std::move(timer)));
      else
        r->profiling_tables.push_back(
            std::make_unique<ProfilingKernels>(device_table, *r->profile));
      return *r->profiling_tables.back();
    };
  }
  run->comm = std::make_unique<SelfCommunicator>(device);
  run->engine = std::make_unique<Engine>(device, *run->comm, model, eo);
  run->row.name = precision;
  run->gemm = cpu ? &cpu->for_precision(precision) : nullptr;
  return run;
}

// The profiled tables' stream times, read once a step, after it (a no-op on the CPU).
void flush_profile(RowRun& run) {
  for (auto& table : run.profiling_tables) table->flush();
}

void warm_up(RowRun& run, const Batch& batch) {
  const StepResult r = run.engine->train_step({&batch, 1}, 1e-4f);
  flush_profile(run);
  run.row.skipped += r.skipped;
  run.row.losses.push_back(r.loss);
  if (run.gemm) run.gemm->run();
}

// One timed step, then on the CPU the references right after it, so both see the same machine:
// the peak FMA rate, then the GEMM probe.
void timed_step(RowRun& run, const Batch& batch) {
  auto t0 = Clock::now();
  const StepResult r = run.engine->train_step({&batch, 1}, 1e-4f);
  run.row.step_ms.push_back(seconds_since(t0) * 1e3);
  flush_profile(run);
  run.row.skipped += r.skipped;
  run.row.losses.push_back(r.loss);
  if (!run.gemm) return;
  run.row.peak_rates.push_back(peak_after_step().gflops);
  run.row.gemm_rates.push_back(run.gemm->run());
}

PrecisionRow finish_row(const BenchTrainOptions& o, RowRun& run, const Batch& batch) {
  const double flops_per_token = 3.0 * run.model->forward_flops_per_token(batch.T);  // fwd + 2x bwd
  const double tokens = static_cast<double>(batch.B * batch.T);
  PrecisionRow row = std::move(run.row);
  row.ms = median(row.step_ms);
  row.tokens_per_s = tokens / (row.ms / 1e3);
  row.gflops = flops_per_token * row.tokens_per_s / 1e9;
  if (run.gemm) {
    row.gemm_name = run.gemm->name();
    row.gemm = median(row.gemm_rates);
    row.peak = median(row.peak_rates);
    row.fraction = row.peak > 0 ? row.gflops / row.peak : 0.0;
  }
  row.mfu = row.gflops / (o.peak_tflops * 1e3);
  row.memory = run.device->memory();
  if (run.profile) row.profile = *run.profile;
  return row;
}

// row's ratio fields: its step over `first`'s step of the same round, one ratio per round. A
// round's steps ran back to back, so a burst of load from a neighbour, which on a shared machine
// moves single steps by tens of percent, moves both sides of most ratios alike: their median is
// the steadier comparison of two rows than the ratio of the rows' medians.
void set_paired_ratio(PrecisionRow& row, const std::vector<double>& first) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(row.step_ms.size(), first.size()); ++i)
    if (first[i] > 0) r.push_back(row.step_ms[i] / first[i]);
  if (r.empty()) return;
  std::sort(r.begin(), r.end());
  const auto quantile = [&](double q) {
    return r[static_cast<size_t>(q * static_cast<double>(r.size() - 1) + 0.5)];
  };
  row.ratio = quantile(0.5);
  row.ratio_q1 = quantile(0.25);
  row.ratio_q3 = quantile(0.75);
}

// The rows' paired ratios to the first, one line (nothing for a single row).
void print_paired_ratios(const Logger& log, const std::vector<PrecisionRow>& rows) {
  if (rows.size() < 2) return;
  std::string line;
  for (size_t i = 1; i < rows.size(); ++i)
    line += fmt::format("{}{} {:.3f}x ({:.3f}-{:.3f})", i > 1 ? ", " : "", rows[i].name,
                        rows[i].ratio, rows[i].ratio_q1, rows[i].ratio_q3);
  log.rank0("step over the {} row's step of the same round, median (quartiles) of {} rounds: {}",
            rows.front().name, rows.front().step_ms.size(), line);
}

nlohmann::json paired_ratio_json(const PrecisionRow& r) {
  return {{"median", r.ratio}, {"q1", r.ratio_q1}, {"q3", r.ratio_q3}};
}

// Every asked precision's row, the rows' steps interleaved (RowRun).
std::vector<PrecisionRow> measure_rows(const BenchTrainOptions& o, const Gpt2Config& config,
                                       const Batch& batch, CpuReferences* cpu) {
  std::vector<std::unique_ptr<RowRun>> runs;
  for (const std::string& precision : o.precisions)
    runs.push_back(start_row(o, config, precision, cpu));
  for (int i = 0; i < o.warmup; ++i)
    for (auto& run : runs) warm_up(*run, batch);
  for (auto& run : runs)
    if (run->profile) run->profile->reset();
  for (int i = 0; i < o.steps; ++i)
    for (auto& run : runs) timed_step(*run, batch);
  std::vector<PrecisionRow> rows;
  for (auto& run : runs) rows.push_back(finish_row(o, *run, batch));
  for (PrecisionRow& row : rows) set_paired_ratio(row, rows.front().step_ms);
  return rows;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }
double mean(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// --profile: one table per row, the entries by time; their sum beside the mean step (the
// table's steps are those of the row, so the mean, not the median, is what they add up to).
void print_profile(const Logger& log, const PrecisionRow& r, int steps) {
  std::vector<std::pair<std::string, OpTime>> ops(r.profile.ops().begin(), r.profile.ops().end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  const double step_ms = mean(r.step_ms);
  log.rank0("");
  log.rank0("profile {}: time per Kernels entry per step (mean of {} steps)", r.name, steps);
  log.rank0("  {:<22} {:>10} {:>11} {:>10}", "entry", "ms/step", "calls/step", "% of step");
  for (const auto& [name, t] : ops)
    log.rank0("  {:<22} {:>10.2f} {:>11.1f} {:>9.1f}%", name, t.seconds * 1e3 / steps,
              static_cast<double>(t.calls) / steps, 100.0 * t.seconds * 1e3 / steps / step_ms);
  const double sum_ms = r.profile.total_seconds() * 1e3 / steps;
  log.rank0("  {:<22} {:>10.2f} {:>11} {:>9.1f}%   (measured step {:.2f} ms)", "sum", sum_ms, "",
            100.0 * sum_ms / step_ms, step_ms);
}

nlohmann::json profile_json(const PrecisionRow& r, int steps) {
  nlohmann::json ops = nlohmann::json::array();
  const double step_ms = mean(r.step_ms);
  for (const auto& [name, t] : r.profile.ops())
    ops.push_back({{"entry", name},
                   {"ms_per_step", t.seconds * 1e3 / steps},
                   {"calls_per_step", static_cast<double>(t.calls) / steps},
                   {"fraction_of_step", t.seconds * 1e3 / steps / step_ms}});
  return {{"ops", ops},
          {"sum_ms_per_step", r.profile.total_seconds() * 1e3 / steps},
          {"mean_step_ms", step_ms}};
}

}  // namespace

Precision bench_precision(const std::string& name) {
  Precision p;
  if (name == "fp32") return p;
  p.compute = name.starts_with("bf16") ? DType::kBF16 : DType::kF16;
  p.grad_accum = p.comm = p.compute;
  p.master_weights = !name.ends_with("-pure");
  return p;
}

RandomBatch::RandomBatch(int vocab, int64_t B_, int64_t T_)
    : inputs(static_cast<size_t>(B_ * T_)), targets(static_cast<size_t>(B_ * T_)), B(B_), T(T_) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (auto& t : inputs) t = token(rng);
  for (auto& t : targets) t = token(rng);
}

int bench_train(const BenchTrainOptions& o) {
  Logger log;
  const Gpt2Config config = gpt2_zoo_config(o.model);
  const int64_t B = o.batch, T = o.seq_len;
  const RandomBatch tokens(config.vocab_size, B, T);
  const Batch batch = tokens.batch();
  const double flops_per_token = 3.0 * Gpt2(config).forward_flops_per_token(T);
  const bool gpu = parse_device_kind(o.device, "--device") == DeviceKind::kCuda;

  const PeakFma start_peak = measure_peak_fma();
  log.rank0(
      "zt-bench train: {} ({:.1f}M parameters), B={} T={} AdamW{}, {} threads "
      "(omp_get_max_threads){}",
      o.model, Gpt2(config).forward_flops_per_token(0) / 2e6, B, T,
      o.checkpoint ? ", activation checkpointing" : "", start_peak.threads,
      o.profile ? ", --profile" : "");
  log.rank0(
      "CPU: {} ({}); peak fp32 FMA {:.1f} GFLOP/s ({} loop on {} threads, best of 5 x "
      "50 ms)",
      cpu_model_name(), cpu_simd_features(), start_peak.gflops, start_peak.isa, start_peak.threads);
  std::unique_ptr<CpuReferences> cpu;
  if (!gpu) {
    cpu = std::make_unique<CpuReferences>();
    cpu->sgemm = std::make_unique<GemmProbe>(config, B * T, false);
    // The bf16 probe only where the step's bf16 GEMMs are native: elsewhere they are sgemms, and
    // oneDNN 2.6 has no bf16 matmul below AVX-512 (creating one fails on an AVX2-only CPU).
    const bool bf16 = native_bf16_gemm() &&
                      std::any_of(o.precisions.begin(), o.precisions.end(),
                                  [](const std::string& p) { return p.starts_with("bf16"); });
    if (bf16) cpu->bf16 = std::make_unique<GemmProbe>(config, B * T, true);
    log.rank0("oneDNN {}.{}: kernels for {} (dnnl_get_effective_cpu_isa){}", dnnl_version()->major,
              dnnl_version()->minor, onednn_isa_name(),
              bf16 ? "; bf16 matmul implementations: " + cpu->bf16->implementations() : "");
  }
  const std::vector<PrecisionRow> rows = measure_rows(o, config, batch, cpu.get());
  if (gpu) {
    log.rank0(
        "{:>10} {:>10} {:>10} {:>10} {:>7} | peak MiB: {:>8} {:>8} {:>8} {:>8} {:>8} "
        "{:>8}",
        "precision", "ms/step", "tokens/s", "TFLOP/s", "MFU", "params", "grads", "optim", "activ",
        "work", "total");
    for (const PrecisionRow& r : rows) {
      const MemoryTracker& m = r.memory;
      log.rank0(
          "{:>10} {:>10.2f} {:>10.0f} {:>10.1f} {:>6.1f}% | {:>18.1f} {:>8.1f} {:>8.1f} "
          "{:>8.1f} {:>8.1f} {:>8.1f}",
          r.name, r.ms, r.tokens_per_s, r.gflops / 1e3, 100.0 * r.mfu,
          mib(m.peak(MemCategory::kParams)), mib(m.peak(MemCategory::kGrads)),
          mib(m.peak(MemCategory::kOptimizer)), mib(m.peak(MemCategory::kActivations)),
          mib(m.peak(MemCategory::kWorkspace)), mib(m.peak_total()));
    }
    log.rank0(
        "MFU: model FLOPs (6 x params + attention, {:.3g}/token) per second over {} "
        "TFLOP/s",
        flops_per_token, o.peak_tflops);
    print_paired_ratios(log, rows);
    if (o.profile)
      for (const PrecisionRow& r : rows) print_profile(log, r, o.steps);
    if (!o.json_path.empty()) {
      nlohmann::json j = {{"bench", "train"},
                          {"device", o.device},
                          {"model", o.model},
                          {"batch", B},
                          {"seq_len", T},
                          {"peak_tflops", o.peak_tflops},
                          {"activation_checkpointing", o.checkpoint},
                          {"rows", nlohmann::json::array()}};
      for (const PrecisionRow& r : rows) {
        j["rows"].push_back({{"precision", r.name},
                             {"ms_per_step", r.ms},
                             {"tokens_per_s", r.tokens_per_s},
                             {"mfu", r.mfu},
                             {"step_ms", r.step_ms},
                             {"losses", r.losses},
                             {"skipped_steps", r.skipped},
                             {"peak_bytes_total", r.memory.peak_total()},
                             {"peak_activation_bytes", r.memory.peak(MemCategory::kActivations)},
                             {"paired_ratio_to_first_row", paired_ratio_json(r)}});
        if (o.profile) j["rows"].back()["profile"] = profile_json(r, o.steps);
      }
      std::ofstream out(o.json_path);
      if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
      out << j.dump(2) << "\n";
    }
    return 0;
  }
  const double square = square_sgemm_gflops();

  log.rank0(
      "{:>10} {:>10} {:>10} {:>9} {:>10} {:>10} {:>8} | peak MiB: {:>8} {:>8} {:>8} "
      "{:>8} {:>8} {:>8}",
      "precision", "ms/step", "tokens/s", "GFLOP/s", "GEMM GF/s", "peak GF/s", "of peak", "params",
      "grads", "optim", "activ", "work", "total");
  for (const PrecisionRow& r : rows) {
    const MemoryTracker& m = r.memory;
    log.rank0(
        "{:>10} {:>10.1f} {:>10.0f} {:>9.1f} {:>10.1f} {:>10.1f} {:>7.1f}% | {:>18.1f} "
        "{:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f}",
        r.name, r.ms, r.tokens_per_s, r.gflops, r.gemm, r.peak, 100.0 * r.fraction,
        mib(m.peak(MemCategory::kParams)), mib(m.peak(MemCategory::kGrads)),
        mib(m.peak(MemCategory::kOptimizer)), mib(m.peak(MemCategory::kActivations)),
        mib(m.peak(MemCategory::kWorkspace)), mib(m.peak_total()));
    if (r.skipped > 0)
      log.rank0("{:>10} {} of {} steps skipped on fp16 overflow", "", r.skipped,
                o.warmup + o.steps);
  }
  log.rank0(
      "model FLOPs/token {:.3g} (6 x params + attention); each row the median of {} steps, "
      "the rows stepping in turn",
      flops_per_token, o.steps);
  print_paired_ratios(log, rows);
  log.rank0(
      "'of peak': the row's GFLOP/s over 'peak GF/s', the median of the cores' fp32 FMA "
      "rate measured right after each step ({}, {} loop, {} threads). 'GEMM GF/s': the "
      "median rate, after each step, of the model's forward, dinput and dweight matmul "
      "shapes in {} (bf16 rows: {})",
      cpu_model_name(), start_peak.isa, start_peak.threads, cpu->sgemm->name(),
      cpu->bf16 ? cpu->bf16->name() : "none asked");
  log.rank0(
      "square 1024^3 oneDNN sgemm in the same run: {:.1f} GFLOP/s ({:.1f}% of the "
      "start-up peak). The step's GEMMs: {}. Kernels read 16-bit parameters as stored "
      "and round activations where they write them; 'work' is tracked workspace (the "
      "kernels' blocking scratch is per thread, untracked)",
      square, 100.0 * square / start_peak.gflops, cpu_gemm_description());
  if (o.profile)
    for (const PrecisionRow& r : rows) print_profile(log, r, o.steps);

  if (!o.json_path.empty()) {
    nlohmann::json j = {{"bench", "train"},
                        {"model", o.model},
                        {"batch", B},
                        {"seq_len", T},
                        {"activation_checkpointing", o.checkpoint},
                        {"flops_per_token", flops_per_token},
                        {"cpu", cpu_model_name()},
                        {"cpu_simd", cpu_simd_features()},
                        {"threads", start_peak.threads},
                        {"peak_isa", start_peak.isa},
                        {"startup_peak_gflops", start_peak.gflops},
                        {"dnnl_isa", onednn_isa_name()},
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
                           {"peak_gflops", r.peak},
                           {"fraction_of_peak", r.fraction},
                           {"gemm", r.gemm_name},
                           {"gemm_gflops", r.gemm},
                           {"fraction_of_gemm", r.gemm > 0 ? r.gflops / r.gemm : 0.0},
                           {"skipped_steps", r.skipped},
                           {"step_ms", r.step_ms},
                           {"paired_ratio_to_first_row", paired_ratio_json(r)},
                           {"losses", r.losses},
                           {"peak_gflops_per_step", r.peak_rates},
                           {"gemm_gflops_per_step", r.gemm_rates},
                           {"peak_bytes", peak}});
      if (o.profile) j["rows"].back()["profile"] = profile_json(r, o.steps);
    }
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace zt
