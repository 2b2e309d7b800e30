// Shared by the multi-rank engine suites: the small model, the rank helpers and a global batch
// that every rank builds identically and trains on its own rows of.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model_zoo/gpt2.h"
#include "runtime/model.h"

namespace zt::zero_test {

inline const Gpt2Config kModel{2, 2, 32, 97, 16};
constexpr int64_t kB = 2, kT = 16;  // per rank and micro-batch
constexpr int kSteps = 5;

inline int world_size() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}
inline int my_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Rows of the global batch of (step, micro-batch): world * kB rows of kT tokens, the same on
// every rank; rank r trains on rows [r*kB, (r+1)*kB).
struct GlobalBatch {
  std::vector<int32_t> inputs, targets;
  GlobalBatch(int step, int micro, int world) {
    std::mt19937 rng(1000 * step + micro);
    std::uniform_int_distribution<int32_t> token(0, kModel.vocab_size - 1);
    inputs.resize(world * kB * kT);
    targets.resize(world * kB * kT);
    for (auto& t : inputs) t = token(rng);
    for (auto& t : targets) t = token(rng);
  }
  Batch rows(int64_t first_row, int64_t count) const {
    return Batch{inputs.data() + first_row * kT, targets.data() + first_row * kT, count, kT};
  }
};

// A scratch directory every rank agrees on (`zt_<tag>_<rank 0's pid>` under the temp
// directory), made by every rank before any uses it, removed by rank 0 once all are done.
class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& tag) {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path_ = (std::filesystem::temp_directory_path() / fmt::format("zt_{}_{}", tag, pid)).string();
    std::filesystem::create_directories(path_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (my_rank() == 0) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace zt::zero_test
