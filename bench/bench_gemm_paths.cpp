// zt-bench train's GEMM path table (see bench_gemm_paths.h).
#include "bench/bench_gemm_paths.h"

#include <cstdlib>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "runtime/status.h"
#include "train/gemm_choice.h"

namespace zt {
namespace {

// The rate of `key`'s product with fp32 operands on the fp32 table (dnnl_sgemm), the step's
// fp32 row's code: a warm-up, then the best of 5 runs.
double sgemm_gflops(const GemmKey& key, GemmTimer& timer) {
  const int64_t M = key.M, K = key.K, N = key.N;
  std::vector<float> act(M * K, 0.01f), dout(M * N, 0.02f), w(K * N, 0.03f);
  std::vector<float> out(M * std::max(K, N));
  const std::unique_ptr<Kernels> k = make_cpu_kernels(DType::kF32);
  const auto run = [&] {
    if (key.product == GemmProduct::kForward)
      k->matmul_forward(out.data(), act.data(), w.data(), nullptr, M, K, N, key.layout);
    else if (key.product == GemmProduct::kDinput)
      k->matmul_backward(out.data(), {}, {}, dout.data(), act.data(), w.data(), M, K, N, key.layout,
                         GradOutput::kWrite);
    else
      k->matmul_backward(nullptr, w.data(), {}, dout.data(), act.data(), nullptr, M, K, N,
                         key.layout, GradOutput::kWrite);
  };
  timer.warm_up(key, GemmPath::kWidened, run);
  double s = timer.seconds(key, GemmPath::kWidened, run);
  for (int i = 0; i < 4; ++i) s = std::min(s, timer.seconds(key, GemmPath::kWidened, run));
  return 2.0 * static_cast<double>(M) * K * N / s / 1e9;
}

}  // namespace

BenchGemmPaths set_up_bench_gemm_paths(const std::vector<BenchGemmRow>& rows, int64_t B,
                                       int64_t T) {
  BenchGemmPaths g;
  const bench::Clock::time_point t0 = bench::Clock::now();
  std::set<GemmKey> all;
  const std::vector<int32_t> tokens(static_cast<size_t>(B * T), 0);
  for (const BenchGemmRow& row : rows) {
    const Precision& precision = row.engine->options().precision;
    if (precision.compute == DType::kF32) continue;
    row.device->gemm_routing().start_recording();
    row.engine->eval_loss(Batch{tokens.data(), tokens.data(), B, T, nullptr});
    for (const GemmKey& key :
         training_gemm_keys(row.device->gemm_routing().stop_recording(), precision.grad_accum))
      all.insert(key);
  }
  const std::vector<GemmKey> keys(all.begin(), all.end());
  GemmSetting setting = gemm_setting("measure");
  WallClockGemmTimer timer;
  if (setting.mode == GemmSetting::Mode::kAuto) setting.mode = GemmSetting::Mode::kMeasure;
  const GemmDecision d = decide_gemm_paths(keys, setting, cpu_gemm_abilities(), {}, nullptr, timer);
  g.paths = d.paths;
  g.measured = d.measured;
  g.setting = setting.source == "ZT_CPU_GEMM" ? "ZT_CPU_GEMM=" + setting.value : "measured";
  for (const GemmKey& key : keys) g.sgemm_gflops.push_back(sgemm_gflops(key, timer));
  const auto installed = std::make_shared<const GemmPaths>(g.paths);
  for (const BenchGemmRow& row : rows) row.device->gemm_routing().install(installed);
  g.setup_ms = bench::ms_since(t0);
  return g;
}

void report_gemm_paths(const BenchGemmPaths& g, double peak_gflops, bench::Report& report) {
  if (g.paths.empty()) return;
  std::vector<std::string> header{"product", "path"};
  for (GemmPath p : kAllGemmPaths) header.push_back(fmt::format("{} GF/s", gemm_path_name(p)));
  header.push_back("fp32 sgemm GF/s");
  header.push_back("path / sgemm");
  bench::Table table(fmt::format("16-bit GEMM paths ({}; table {})", g.setting, g.paths.hash()),
                     header);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  size_t i = 0;
  for (const auto& [key, path] : g.paths.entries()) {
    std::vector<std::string> cells{to_string(key), std::string(gemm_path_name(path))};
    nlohmann::ordered_json rates = nlohmann::ordered_json::object();
    double chosen = 0.0;
    for (GemmPath p : kAllGemmPaths) {
      std::string cell = "-";
      for (const GemmMeasurement& m : g.measured)
        for (const GemmRate& r : m.rates)
          if (m.key == key && r.path == p) {
            cell = fmt::format("{:.1f}", r.gflops);
            rates[std::string(gemm_path_name(p))] = r.gflops;
            if (p == path) chosen = r.gflops;
          }
      cells.push_back(cell);
    }
    const double sgemm = g.sgemm_gflops[i++];
    cells.push_back(fmt::format("{:.1f}", sgemm));
    cells.push_back(chosen > 0 ? fmt::format("{:.2f}", chosen / sgemm) : "-");
    table.add_row(cells);
    rows.push_back({{"key", to_string(key)},
                    {"path", gemm_path_name(path)},
                    {"gflops", rates},
                    {"sgemm_gflops", sgemm}});
  }
  table.add_note(fmt::format(
      "Each 16-bit product of a step (forward, dinput, dweight; M x K x N, weight layout, "
      "operand/activation dtypes) on the path installed for every row; each candidate's rate "
      "its best run, the candidates alternated over 3-16 rounds after a warm-up, beside dnnl_sgemm "
      "on the same shape in "
      "fp32 (the fp32 row's code). Cores' peak {:.1f} GFLOP/s. Set-up (recording forward, "
      "timing) {:.0f} ms.",
      peak_gflops, g.setup_ms));
  report.add_table(table);
  nlohmann::ordered_json& j = report.json();
  j["gemm_paths"] = rows;
  j["gemm_paths_table"] = g.paths.serialize();
  j["gemm_paths_hash"] = g.paths.hash();
  j["gemm_paths_setup_ms"] = g.setup_ms;
}

}  // namespace zt
