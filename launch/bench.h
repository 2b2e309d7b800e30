// zt-bench subcommands. Each measures, prints a human table and writes its figures as JSON
// (--json PATH). Figures are compared with a reference measured in the same run.
#pragma once

#include <string>
#include <vector>

namespace zt {

struct BenchTrainOptions {
  std::string model = "gpt2-124M";
  int batch = 4;
  int seq_len = 64;
  int steps = 8;
  int warmup = 2;
  bool checkpoint = false;
  std::string json_path;
};

// GPT-2 training steps (fp32, AdamW) next to the sgemm rate of the model's own matmul shapes.
int bench_train(const BenchTrainOptions& options);

}  // namespace zt
