// zt-bench train's GEMM path table: each 16-bit row's products found by one recording forward on
// its engine (as zt-train finds them, train/gemm_choice.h), every candidate path timed on the
// model's shapes, the fastest installed into every row's device before the rows step, and a
// table of each product's path and each candidate's rate beside dnnl_sgemm's on the same shape.
// ZT_CPU_GEMM pins the paths as it does for zt-train (nothing timed but sgemm then); the bench
// never reads or writes the cache: it reports rates measured in this run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_gemm_paths.h"
#include "zero/engine.h"

namespace zt {

struct BenchGemmRow {
  CpuDevice* device;
  Engine* engine;
};

struct BenchGemmPaths {
  GemmPaths paths;
  std::vector<GemmMeasurement> measured;  // empty when pinned
  std::vector<double> sgemm_gflops;       // per key of `paths`, the fp32 product's rate
  std::string setting;                    // "ZT_CPU_GEMM widened", "measured"
  double setup_ms = 0.0;
};

// Finds, measures and installs (every row's device gets the same table). B x T: the rows'
// micro-batch.
BenchGemmPaths set_up_bench_gemm_paths(const std::vector<BenchGemmRow>& rows, int64_t B, int64_t T);
// The table and its JSON section ("gemm_paths"), against the cores' peak `peak_gflops`.
void report_gemm_paths(const BenchGemmPaths& g, double peak_gflops, bench::Report& report);

}  // namespace zt
