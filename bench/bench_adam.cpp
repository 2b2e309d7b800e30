// zt-bench adam: the CPU optimizer step of ZeRO-Offload on one rank's cores. The fused step
// (offload/cpu_adam.h: AdamW over the fp32 master, moments and gradient, writing the 16-bit
// working copy in the same pass) next to the back end's two passes (Kernels::adamw, then
// Kernels::cast of the master to the working dtype), against STREAM's triad over arrays of the
// same size, all measured in the same run: each round runs the triad, a fused step and a
// two-pass step, one after the other, so a neighbour's load falls on all three alike.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "launch/logger.h"
#include "offload/cpu_adam.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/cpu/cpu_stream.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The median, the mean of the middle two of an even count (this bench's figures since it was
// written).
double median_averaged(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}
double best(const std::vector<double>& ms) { return *std::min_element(ms.begin(), ms.end()); }

// One optimizer shard: master, moments and gradient in fp32, the working copy in its dtype.
// First touched by the OpenMP threads in the static split the kernels use, so on a multi-socket
// machine each thread's pages sit on its own node.
struct Shard {
  int64_t n;
  std::unique_ptr<float[]> master, m, v, grad;
  std::unique_ptr<uint16_t[]> working;  // null when there is none

  Shard(int64_t elements, bool has_working)
      : n(elements), master(new float[static_cast<size_t>(n)]),
        m(new float[static_cast<size_t>(n)]), v(new float[static_cast<size_t>(n)]),
        grad(new float[static_cast<size_t>(n)]),
        working(has_working ? new uint16_t[static_cast<size_t>(n)] : nullptr) {
    // Values of a training run's scale: no zeros, no subnormals on the way.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float r = static_cast<float>(i % 1009) * (1.0f / 1009.0f);  // [0, 1)
      master[i] = 0.02f * (r - 0.5f);
      m[i] = 1e-3f * (0.5f - r);
      v[i] = 1e-6f * (1.0f + r);
      grad[i] = 0.01f * (r - 0.25f);
      if (working) working[i] = 0;
    }
  }
};

struct Row {
  std::string name;
  std::vector<double> step_ms;
  double ms = 0.0, ms_best = 0.0, gbps = 0.0, gbps_median = 0.0;
};

void finish(Row& r, double bytes) {
  r.ms = median_averaged(r.step_ms);
  r.ms_best = best(r.step_ms);
  r.gbps = bytes / r.ms_best / 1e6;
  r.gbps_median = bytes / r.ms / 1e6;
}

// Checks on a prefix copy of the shard that the fused step leaves the bits of the two passes
// (tests/offload/cpu_adam_test.cpp pins this on every path; here it guards the figures).
bool fused_matches_two_pass(const Shard& s, DType working_dtype, bool has_working,
                            const CpuAdam& adam, Kernels& k, const AdamWArgs& args) {
  const int64_t n = std::min<int64_t>(s.n, int64_t(1) << 20);
  std::vector<float> master[2], m[2], v[2];
  std::vector<uint16_t> working[2];
  for (int c = 0; c < 2; ++c) {
    master[c].assign(s.master.get(), s.master.get() + n);
    m[c].assign(s.m.get(), s.m.get() + n);
    v[c].assign(s.v.get(), s.v.get() + n);
    working[c].assign(static_cast<size_t>(n), 0);
  }
  adam.step(master[0].data(), s.grad.get(), m[0].data(), v[0].data(),
            has_working ? Operand(working[0].data(), working_dtype) : Operand(), n, args);
  k.adamw(master[1].data(), s.grad.get(), m[1].data(), v[1].data(), n, args);
  if (has_working) k.cast(working[1].data(), working_dtype, master[1].data(), DType::kF32, n);
  const auto same = [](const auto& a, const auto& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  return same(master[0], master[1]) && same(m[0], m[1]) && same(v[0], v[1]) &&
         same(working[0], working[1]);
}

}  // namespace

int bench_adam(const BenchAdamOptions& o) {
  Logger log;
  const bool has_working = o.precision != "none";
  const DType working_dtype = has_working ? parse_dtype(o.precision) : DType::kF32;
  ZT_ASSERT(!has_working || working_dtype != DType::kF32, "--precision {}", o.precision);
  // Bytes a step must move per parameter: master, m and v read and written (24), the fp32
  // gradient read (4), and the 16-bit working copy written (2).
  const double bytes_per_param = 28.0 + (has_working ? 2.0 : 0.0);
  const double step_bytes = bytes_per_param * static_cast<double>(o.params);

  const CpuAdam adam;
  const std::unique_ptr<Kernels> kernels = make_cpu_kernels();
  const int threads = omp_get_max_threads();
  log.rank0(
      "zt-bench adam: {} fp32 parameters, AdamW, working copy {}, {} threads "
      "(omp_get_max_threads)",
      o.params, o.precision, threads);
  log.rank0("CPU: {} ({}); CpuAdam path {}", cpu_model_name(), cpu_simd_features(),
            adam.isa_name());

  Shard shard(o.params, has_working);
  StreamTriad triad(std::max(o.params, StreamTriad::default_elements()));
  log.rank0(
      "STREAM triad a = b + 3c over 3 x {:.0f} MiB fp32 arrays (last-level cache {:.0f} "
      "MiB); optimizer shard {:.0f} MiB",
      static_cast<double>(triad.elements()) * 4 / (1 << 20),
      static_cast<double>(last_level_cache_bytes()) / (1 << 20),
      static_cast<double>(o.params) * (16.0 + (has_working ? 2.0 : 0.0)) / (1 << 20));

  AdamWArgs args;
  args.lr = 6e-4f;
  args.weight_decay = 0.1f;
  if (!fused_matches_two_pass(shard, working_dtype, has_working, adam, *kernels, args))
    throw_internal("zt-bench adam: the fused step's bits differ from Kernels::adamw + cast");

  Row fused{"fused (CpuAdam)", {}}, two_pass{has_working ? "adamw + cast" : "adamw", {}};
  std::vector<double> triad_gbps;
  const Operand working = has_working ? Operand(shard.working.get(), working_dtype) : Operand();
  for (int round = 0; round < o.warmup + o.steps; ++round) {
    const bool timed = round >= o.warmup;
    const double gbps = triad.run_gbps();
    if (timed) triad_gbps.push_back(gbps);
    args.step = round + 1;

    auto t0 = Clock::now();
    adam.step(shard.master.get(), shard.grad.get(), shard.m.get(), shard.v.get(), working, shard.n,
              args);
    if (timed) fused.step_ms.push_back(ms_since(t0));

    t0 = Clock::now();
    kernels->adamw(shard.master.get(), shard.grad.get(), shard.m.get(), shard.v.get(), shard.n,
                   args);
    if (has_working)
      kernels->cast(working.data, working_dtype, shard.master.get(), DType::kF32, shard.n);
    if (timed) two_pass.step_ms.push_back(ms_since(t0));
  }
  if (!triad.check()) throw_internal("zt-bench adam: the triad's result is wrong");
  finish(fused, step_bytes);
  finish(two_pass, step_bytes);
  const double stream_gbps = *std::max_element(triad_gbps.begin(), triad_gbps.end());
  const double stream_median = median_averaged(triad_gbps);

  log.rank0("{:>18} {:>9} {:>9} {:>9} {:>9} {:>9}", "", "ms/step", "best ms", "GB/s", "x triad",
            "median");
  for (const Row* r : {&fused, &two_pass})
    log.rank0("{:>18} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.2f}x {:>8.2f}x", r->name, r->ms, r->ms_best,
              r->gbps, r->gbps / stream_gbps, r->gbps_median / stream_median);
  log.rank0("{:>18} {:>9} {:>9} {:>9.1f} {:>9} {:>9}", "STREAM triad", "", "", stream_gbps, "",
            fmt::format("{:.1f}", stream_median));
  log.rank0(
      "GB/s: {:.0f} bytes per parameter (master, m, v read and written, the fp32 gradient "
      "read{}) over the best of {} steps; STREAM counts 12 bytes per triad element "
      "(best of {}). 'x triad': over the best triad; 'median': median step over median "
      "triad. The fused step is {:.2f}x faster than the two passes (median ms)",
      bytes_per_param, has_working ? ", the 16-bit working copy written" : "", o.steps, o.steps,
      two_pass.ms / fused.ms);

  if (!o.json_path.empty()) {
    const auto row_json = [](const Row& r) {
      return nlohmann::json{{"name", r.name},
                            {"ms", r.ms},
                            {"ms_best", r.ms_best},
                            {"gbps", r.gbps},
                            {"gbps_median", r.gbps_median},
                            {"step_ms", r.step_ms}};
    };
    nlohmann::json j = {{"bench", "adam"},
                        {"cpu", cpu_model_name()},
                        {"cpu_simd", cpu_simd_features()},
                        {"isa", adam.isa_name()},
                        {"threads", threads},
                        {"params", o.params},
                        {"precision", o.precision},
                        {"bytes_per_param", bytes_per_param},
                        {"steps", o.steps},
                        {"ms", fused.ms},
                        {"ms_best", fused.ms_best},
                        {"gbps", fused.gbps},
                        {"gbps_median", fused.gbps_median},
                        {"stream_gbps", stream_gbps},
                        {"stream_gbps_median", stream_median},
                        {"stream_gbps_per_round", triad_gbps},
                        {"stream_elements", triad.elements()},
                        {"ratio", fused.gbps / stream_gbps},
                        {"ratio_median", fused.gbps_median / stream_median},
                        {"two_pass_ms", two_pass.ms},
                        {"two_pass_gbps", two_pass.gbps},
                        {"fused_speedup", two_pass.ms / fused.ms},
                        {"rows", nlohmann::json::array({row_json(fused), row_json(two_pass)})}};
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace zt
