// zt-bench adam: the CPU optimizer step of ZeRO-Offload on one rank's cores. The fused step
// (offload/cpu_adam.h: AdamW over the fp32 master, moments and gradient, writing the 16-bit
// working copy in the same pass) next to the back end's two passes (Kernels::adamw, then
// Kernels::cast of the master to the working dtype), against STREAM's triad over arrays of the
// same size, all measured in the same run: each round runs the triad, a fused step and a
// two-pass step, one after the other, so a neighbour's load falls on all three alike.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/harness.h"
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
  bench::Report report("adam", log);
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

  const std::string fused = "fused (CpuAdam)", two_pass = has_working ? "adamw + cast" : "adamw";
  const Operand working = has_working ? Operand(shard.working.get(), working_dtype) : Operand();
  bench::Rounds rounds(o.warmup, o.steps);
  rounds.add("STREAM triad", [&](int) { return triad.run_gbps(); });
  rounds.add(fused, [&](int round) {
    args.step = round + 1;
    return bench::time_ms([&] {
      adam.step(shard.master.get(), shard.grad.get(), shard.m.get(), shard.v.get(), working,
                shard.n, args);
    });
  });
  rounds.add(two_pass, [&](int) {
    return bench::time_ms([&] {
      kernels->adamw(shard.master.get(), shard.grad.get(), shard.m.get(), shard.v.get(), shard.n,
                     args);
      if (has_working)
        kernels->cast(working.data, working_dtype, shard.master.get(), DType::kF32, shard.n);
    });
  });
  rounds.run();
  if (!triad.check()) throw_internal("zt-bench adam: the triad's result is wrong");

  // Each step's GB/s over the same round's triad: the paired ratio to the hardware's bandwidth.
  const std::vector<double>& triad_gbps = rounds.figures("STREAM triad");
  const auto gbps_of = [&](const std::string& name) {
    std::vector<double> gbps;
    for (double ms : rounds.figures(name)) gbps.push_back(step_bytes / ms / 1e6);
    return gbps;
  };
  const bench::Summary stream = rounds.summary("STREAM triad");
  report.add_reference({fmt::format("STREAM triad over 3 x {:.0f} MiB, {} threads",
                                    static_cast<double>(triad.elements()) * 4 / (1 << 20), threads),
                        "GB/s", stream.median});
  bench::Table table("AdamW step on one shard",
                     {"", "ms (q1-q3)", "GB/s", "x triad (q1-q3)", "x fused (q1-q3)"});
  nlohmann::ordered_json rows = nlohmann::json::array();
  for (const std::string& name : {fused, two_pass}) {
    const bench::Summary ms = rounds.summary(name);
    const bench::Summary to_triad = bench::paired_ratio(gbps_of(name), triad_gbps);
    const bench::Summary to_fused =
        bench::paired_ratio(rounds.figures(name), rounds.figures(fused));
    table.add_row({name, bench::quartile_cell(ms),
                   fmt::format("{:.1f}", step_bytes / ms.median / 1e6),
                   bench::quartile_cell(to_triad, 2), bench::quartile_cell(to_fused, 2)});
    rows.push_back({{"name", name},
                    {"ms", bench::to_json(ms)},
                    {"gbps", step_bytes / ms.median / 1e6},
                    {"ratio_to_triad", bench::to_json(to_triad)},
                    {"ratio_to_fused", bench::to_json(to_fused)},
                    {"step_ms", rounds.figures(name)}});
  }
  table.add_row({"STREAM triad", "", bench::quartile_cell(stream)});
  table.add_note(fmt::format(
      "GB/s: {:.0f} bytes per parameter (master, m, v read and written, the fp32 gradient read{}) "
      "over the median step; STREAM counts 12 bytes per triad element. Ratios are per round "
      "(paired), median and quartiles of {} rounds.",
      bytes_per_param, has_working ? ", the 16-bit working copy written" : "", o.steps));
  report.add_table(table);

  nlohmann::ordered_json& j = report.json();
  j["isa"] = adam.isa_name();
  j["params"] = o.params;
  j["precision"] = o.precision;
  j["bytes_per_param"] = bytes_per_param;
  j["steps"] = o.steps;
  j["stream_gbps"] = bench::to_json(stream);
  j["stream_gbps_per_round"] = triad_gbps;
  j["stream_elements"] = triad.elements();
  j["rows"] = rows;
  report.write(o.json_path, o.markdown_path);
  return 0;
}

}  // namespace zt
