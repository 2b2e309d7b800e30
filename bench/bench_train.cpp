// zt-bench train: whole training steps against the cores' peak fp32 FMA rate, measured in the
// same run (runtime/cpu/cpu_peak.h), beside the rate oneDNN's GEMMs reach on the model's own
// matmul shapes (M = B*T rows); with --profile, where each step's time went, per Kernels entry.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/bench_gemm_paths.h"
#include "bench/harness.h"
#include "comm/self_communicator.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/device_factory.h"
#include "runtime/dtype.h"
#include "runtime/profiling_kernels.h"
#include "runtime/status.h"
#include "train/memory_plan.h"
#include "zero/engine.h"

namespace zt {

namespace {

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
      const auto t0 = bench::Clock::now();
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
      seconds += (bench::ms_since(t0) / 1e3) * g.count;
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
    auto t0 = bench::Clock::now();
    check_dnnl(dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n),
               "dnnl_sgemm");
    best = std::max(best, 2.0 * n * n * n / (bench::ms_since(t0) / 1e3) / 1e9);
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
  // The memory planner's activation peak for this row's step (zero/memory_model.h, as
  // zt-estimate replays it), beside the tracker's measured one in `memory`.
  int64_t planned_activation_bytes = -1;
  OpProfile profile;  // --profile: the timed steps' kernel time, per Kernels entry
  // The row's step over the first row's step of the same round, over the rounds (1 for the
  // first row).
  bench::Summary ratio;
};

// The CPU's references, alternated with the steps; absent on a GPU (MFU instead).
struct CpuReferences {
  std::unique_ptr<GemmProbe> sgemm, bf16;  // bf16: made when a bf16 row is asked for
  BenchGemmPaths paths;                    // the 16-bit rows' GEMM paths, installed in each
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

// What the memory planner replays for a row's step, as zt-estimate would for the same job.
int64_t planned_activations(const BenchTrainOptions& o, Gpt2& model, const EngineOptions& eo) {
  const bool cuda = parse_device_kind(o.device, "--device") == DeviceKind::kCuda;
  return activation_peak_bytes(model, activation_options(o.batch, o.seq_len, eo, cuda, false))
      .value_or(-1);
}

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
  run->row.planned_activation_bytes = planned_activations(o, model, eo);
  run->gemm = cpu ? &cpu->for_precision(precision) : nullptr;
  return run;
}

// The profiled tables' stream times, read once a step, after it (a no-op on the CPU).
void flush_profile(RowRun& run) {
  for (auto& table : run.profiling_tables) table->flush();
}

double warm_up(RowRun& run, const Batch& batch) {
  StepResult r;
  const double ms = bench::time_ms([&] { r = run.engine->train_step({&batch, 1}, 1e-4f); });
  flush_profile(run);
  run.row.skipped += r.skipped;
  run.row.losses.push_back(r.loss);
  if (run.gemm) run.gemm->run();
  return ms;
}

// One timed step, then on the CPU the references right after it, so both see the same machine:
// the peak FMA rate, then the GEMM probe.
double timed_step(RowRun& run, const Batch& batch) {
  StepResult r;
  const double ms = bench::time_ms([&] { r = run.engine->train_step({&batch, 1}, 1e-4f); });
  flush_profile(run);
  run.row.skipped += r.skipped;
  run.row.losses.push_back(r.loss);
  if (!run.gemm) return ms;
  run.row.peak_rates.push_back(peak_after_step().gflops);
  run.row.gemm_rates.push_back(run.gemm->run());
  return ms;
}

// The row's figures from its rounds; its paired ratio is to the first row's step of each round.
PrecisionRow finish_row(const BenchTrainOptions& o, RowRun& run, const Batch& batch,
                        const bench::Rounds& rounds) {
  const double flops_per_token = 3.0 * run.model->forward_flops_per_token(batch.T);  // fwd + 2x bwd
  const double tokens = static_cast<double>(batch.B * batch.T);
  PrecisionRow row = std::move(run.row);
  row.step_ms = rounds.figures(row.name);
  row.ratio = bench::paired_ratio(row.step_ms, rounds.figures(o.precisions.front()));
  row.ms = bench::summarize(row.step_ms).median;
  row.tokens_per_s = tokens / (row.ms / 1e3);
  row.gflops = flops_per_token * row.tokens_per_s / 1e9;
  if (run.gemm) {
    row.gemm_name = run.gemm->name();
    row.gemm = bench::summarize(row.gemm_rates).median;
    row.peak = bench::summarize(row.peak_rates).median;
    row.fraction = row.peak > 0 ? row.gflops / row.peak : 0.0;
  }
  row.mfu = row.gflops / (o.peak_tflops * 1e3);
  row.memory = run.device->memory();
  if (run.profile) row.profile = *run.profile;
  return row;
}

nlohmann::json paired_ratio_json(const PrecisionRow& r) {
  return {{"median", r.ratio.median}, {"q1", r.ratio.q1}, {"q3", r.ratio.q3}};
}

// Every asked precision's row, the rows' steps interleaved by the harness's rounds (RowRun).
std::vector<PrecisionRow> measure_rows(const BenchTrainOptions& o, const Gpt2Config& config,
                                       const Batch& batch, CpuReferences* cpu) {
  std::vector<std::unique_ptr<RowRun>> runs;
  for (const std::string& precision : o.precisions)
    runs.push_back(start_row(o, config, precision, cpu));
  if (cpu) {  // every 16-bit product's path measured on the model's shapes, before any step
    std::vector<BenchGemmRow> gemm_rows;
    for (auto& run : runs)
      gemm_rows.push_back({dynamic_cast<CpuDevice*>(run->device.get()), run->engine.get()});
    cpu->paths = set_up_bench_gemm_paths(gemm_rows, batch.B, batch.T);
  }
  bench::Rounds rounds(o.warmup, o.steps);
  for (auto& run : runs)
    rounds.add(run->row.name, [&o, &batch, r = run.get()](int round) {
      if (round < o.warmup) return warm_up(*r, batch);
      if (round == o.warmup && r->profile) r->profile->reset();
      return timed_step(*r, batch);
    });
  rounds.run();
  std::vector<PrecisionRow> rows;
  for (auto& run : runs) rows.push_back(finish_row(o, *run, batch, rounds));
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
void report_profile(const PrecisionRow& r, int steps, bench::Report& report) {
  std::vector<std::pair<std::string, OpTime>> ops(r.profile.ops().begin(), r.profile.ops().end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  const double step_ms = mean(r.step_ms);
  bench::Table table(
      fmt::format("profile {}: time per Kernels entry per step (mean of {} steps)", r.name, steps),
      {"entry", "ms/step", "calls/step", "% of step"});
  for (const auto& [name, t] : ops)
    table.add_row({name, fmt::format("{:.2f}", t.seconds * 1e3 / steps),
                   fmt::format("{:.1f}", static_cast<double>(t.calls) / steps),
                   fmt::format("{:.1f}%", 100.0 * t.seconds * 1e3 / steps / step_ms)});
  const double sum_ms = r.profile.total_seconds() * 1e3 / steps;
  table.add_row(
      {"sum", fmt::format("{:.2f}", sum_ms), "", fmt::format("{:.1f}%", 100.0 * sum_ms / step_ms)});
  table.add_note(fmt::format("measured step {:.2f} ms", step_ms));
  report.add_table(table);
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

// The peak bytes of every memory category, and the total.
nlohmann::ordered_json peak_bytes_json(const MemoryTracker& m) {
  nlohmann::ordered_json peak;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    peak[std::string(mem_category_name(cat))] = m.peak(cat);
  }
  peak["total"] = m.peak_total();
  return peak;
}

// The columns every row has: its name and figures, then peak MiB per category.
std::vector<std::string> memory_cells(const MemoryTracker& m) {
  std::vector<std::string> cells;
  for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                        MemCategory::kActivations, MemCategory::kWorkspace})
    cells.push_back(fmt::format("{:.1f}", mib(m.peak(c))));
  cells.push_back(fmt::format("{:.1f}", mib(m.peak_total())));
  return cells;
}

const std::vector<std::string> kMemoryHeader = {"params MiB", "grads MiB", "optim MiB",
                                                "activ MiB",  "work MiB",  "total MiB"};

std::vector<std::string> with_memory(std::vector<std::string> header_or_row,
                                     const std::vector<std::string>& memory) {
  header_or_row.insert(header_or_row.end(), memory.begin(), memory.end());
  return header_or_row;
}

// On a GPU: each row's step, throughput and MFU against the dense peak given.
void report_gpu(const BenchTrainOptions& o, const std::vector<PrecisionRow>& rows,
                double flops_per_token, bench::Report& report) {
  report.add_reference({"the GPU's dense 16-bit peak (--peak-tflops)", "TFLOP/s", o.peak_tflops});
  bench::Table table(
      "GPT-2 training step on the GPU",
      with_memory({"precision", "ms/step", "tokens/s", "TFLOP/s", "MFU", "x first row (q1-q3)"},
                  kMemoryHeader));
  for (const PrecisionRow& r : rows)
    table.add_row(
        with_memory({r.name, fmt::format("{:.2f}", r.ms), fmt::format("{:.0f}", r.tokens_per_s),
                     fmt::format("{:.1f}", r.gflops / 1e3), fmt::format("{:.1f}%", 100.0 * r.mfu),
                     bench::quartile_cell(r.ratio, 3)},
                    memory_cells(r.memory)));
  table.add_note(fmt::format(
      "MFU: model FLOPs (6 x params + attention, {:.3g}/token) per second over {} TFLOP/s. "
      "'x first row': the step over the {} row's step of the same round, median (quartiles)",
      flops_per_token, o.peak_tflops, rows.front().name));
  report.add_table(table);
  nlohmann::ordered_json& j = report.json();
  j["device"] = o.device;
  j["peak_tflops"] = o.peak_tflops;
  for (const PrecisionRow& r : rows) {
    j["rows"].push_back({{"precision", r.name},
                         {"ms_per_step", r.ms},
                         {"tokens_per_s", r.tokens_per_s},
                         {"mfu", r.mfu},
                         {"step_ms", r.step_ms},
                         {"losses", r.losses},
                         {"skipped_steps", r.skipped},
                         {"peak_bytes", peak_bytes_json(r.memory)},
                         {"peak_bytes_total", r.memory.peak_total()},
                         {"peak_activation_bytes", r.memory.peak(MemCategory::kActivations)},
                         {"planned_activation_bytes", r.planned_activation_bytes},
                         {"paired_ratio_to_first_row", paired_ratio_json(r)}});
    if (o.profile) j["rows"].back()["profile"] = profile_json(r, o.steps);
  }
}

// On the CPU: each row against the cores' peak FMA rate measured after each of its steps, and
// the rate oneDNN's GEMMs reach on the model's shapes.
void report_cpu(const BenchTrainOptions& o, const std::vector<PrecisionRow>& rows,
                const CpuReferences& cpu, const PeakFma& start_peak, double flops_per_token,
                bench::Report& report) {
  const double square = square_sgemm_gflops();
  report.add_reference({fmt::format("peak fp32 FMA at start-up ({} loop, {} threads)",
                                    start_peak.isa, start_peak.threads),
                        "GFLOP/s", start_peak.gflops});
  bench::Table table("GPT-2 training step on the CPU",
                     with_memory({"precision", "ms/step", "tokens/s", "GFLOP/s", "GEMM GF/s",
                                  "peak GF/s", "of peak", "x first row (q1-q3)"},
                                 kMemoryHeader));
  for (const PrecisionRow& r : rows)
    table.add_row(
        with_memory({r.name, fmt::format("{:.1f}", r.ms), fmt::format("{:.0f}", r.tokens_per_s),
                     fmt::format("{:.1f}", r.gflops), fmt::format("{:.1f}", r.gemm),
                     fmt::format("{:.1f}", r.peak), fmt::format("{:.1f}%", 100.0 * r.fraction),
                     bench::quartile_cell(r.ratio, 3)},
                    memory_cells(r.memory)));
  for (const PrecisionRow& r : rows)
    if (r.skipped > 0)
      table.add_note(fmt::format("{}: {} of {} steps skipped on fp16 overflow", r.name, r.skipped,
                                 o.warmup + o.steps));
  table.add_note(fmt::format(
      "Model FLOPs/token {:.3g} (6 x params + attention); each row the median of {} steps, the "
      "rows stepping in turn. 'x first row': the step over the {} row's step of the same round. "
      "'of peak': the row's GFLOP/s over 'peak GF/s', the median of the cores' fp32 FMA rate "
      "measured right after each step ({}). 'GEMM GF/s': the median rate, after each step, of "
      "the model's forward, dinput and dweight matmul shapes in {} (bf16 rows: {}). A square "
      "1024^3 oneDNN sgemm in the same run: {:.1f} GFLOP/s ({:.1f}% of the start-up peak). The "
      "step's GEMMs: {}.",
      flops_per_token, o.steps, rows.front().name, cpu_model_name(), cpu.sgemm->name(),
      cpu.bf16 ? cpu.bf16->name() : "none asked", square, 100.0 * square / start_peak.gflops,
      cpu_gemm_description()));
  report.add_table(table);
  report_gemm_paths(cpu.paths, start_peak.gflops, report);
  nlohmann::ordered_json& j = report.json();
  j["peak_isa"] = start_peak.isa;
  j["startup_peak_gflops"] = start_peak.gflops;
  j["dnnl_isa"] = onednn_isa_name();
  j["square_sgemm_gflops"] = square;
  for (const PrecisionRow& r : rows) {
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
                         {"peak_bytes", peak_bytes_json(r.memory)},
                         {"planned_activation_bytes", r.planned_activation_bytes}});
    if (o.profile) j["rows"].back()["profile"] = profile_json(r, o.steps);
  }
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
  bench::Report report("train", log);
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
  log.rank0("CPU: {} ({}); peak fp32 FMA {:.1f} GFLOP/s ({} loop on {} threads, best of 5 x 50 ms)",
            cpu_model_name(), cpu_simd_features(), start_peak.gflops, start_peak.isa,
            start_peak.threads);
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
  nlohmann::ordered_json& j = report.json();
  j["model"] = o.model;
  j["batch"] = B;
  j["seq_len"] = T;
  j["activation_checkpointing"] = o.checkpoint;
  j["flops_per_token"] = flops_per_token;
  j["rows"] = nlohmann::ordered_json::array();
  if (gpu)
    report_gpu(o, rows, flops_per_token, report);
  else
    report_cpu(o, rows, *cpu, start_peak, flops_per_token, report);
  if (o.profile)
    for (const PrecisionRow& r : rows) report_profile(r, o.steps, report);
  report.write(o.json_path, o.markdown_path);
  return 0;
}

}  // namespace zt
