// zt-bench zero: ZeRO stages 0-3 side by side under mpirun (step time, reduce time, the share
// of reduce time hidden by overlap_comm, model-state and comm memory per rank).
#pragma once

#include <string>

namespace zt {

struct BenchZeroOptions {
  std::string model = "gpt2-tiny";
  int batch = 8;
  int seq_len = 64;
  int steps = 6;
  int warmup = 2;
  std::string json_path;
};

int bench_zero(const BenchZeroOptions& options);

}  // namespace zt
