// train/gemm_choice.h across ranks: rank 1's timer prefers another path than rank 0's, and every
// rank ends with rank 0's table, installed in its device; rank 0's input error is every rank's.
#include "train/gemm_choice.h"

#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {
namespace {

const GemmKey kA{GemmProduct::kForward, 64,          96,         160,
                 WeightLayout::kInOut,  DType::kF16, DType::kF16};
const GemmKey kB{GemmProduct::kDinput, 64, 96, 160, WeightLayout::kOutIn, DType::kF16, DType::kF16};

class PreferringTimer final : public GemmTimer {
 public:
  explicit PreferringTimer(GemmPath fastest) : fastest_(fastest) {}
  double seconds(const GemmKey&, GemmPath path, const std::function<void()>&) override {
    return path == fastest_ ? 1e-3 : 5e-3;
  }

 private:
  GemmPath fastest_;
};

TEST(GemmChoiceMpiTest, EveryRankInstallsRankZerosChoice) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const std::vector<GemmKey> keys{kA, kB};
  // Rank 0 times widened fastest, every other rank packed.
  PreferringTimer timer(comm.rank() == 0 ? GemmPath::kWidened : GemmPath::kPacked);
  const GemmPaths mine = paths_of(measure_gemm_paths(keys, timer));
  EXPECT_EQ(mine.find(kA), comm.rank() == 0 ? GemmPath::kWidened : GemmPath::kPacked);
  const GemmPaths agreed = agree_gemm_paths(comm, [&] { return mine; });
  device.gemm_routing().install(std::make_shared<const GemmPaths>(agreed));
  EXPECT_EQ(agreed.find(kA), GemmPath::kWidened) << "rank " << comm.rank();
  EXPECT_EQ(agreed.find(kB), GemmPath::kWidened) << "rank " << comm.rank();
  EXPECT_EQ(device.gemm_routing().path_for(kA, cpu_gemm_abilities()), GemmPath::kWidened);
}

TEST(GemmChoiceMpiTest, RankZerosInputErrorIsThrownOnEveryRank) {
  CpuDevice device;
  MpiCommunicator comm(device);
  try {
    agree_gemm_paths(comm, []() -> GemmPaths { throw_input("ZT_CPU_GEMM is 'x'"); });
    ADD_FAILURE() << "no error on rank " << comm.rank();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(std::string(e.what()).find("ZT_CPU_GEMM is 'x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt
