// measure_gemm_paths: every candidate of each key run on scratch buffers through the timer, the
// fastest kept (cpu_gemm_paths.h). The products are the kernels' own: a CpuKernels under the
// current instruction set with the candidate installed alone for that key, so what is timed is
// what a step runs. Called by the set-up (train/gemm_choice.h, zt-bench train), never by a
// kernel: a step's paths come only from the table installed before it.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "runtime/cpu/cpu_gemm_paths.h"
#include "runtime/cpu/cpu_kernels.h"

namespace zt {
namespace {

// One key's operands, filled with small values every dtype holds exactly (so the 16-bit
// activations are what a 16-bit table would store), made on the first run: a fake timer that
// runs nothing allocates nothing.
class ScratchProduct {
 public:
  explicit ScratchProduct(const GemmKey& key) : key_(key) {}

  void run(Kernels& k) {
    if (act_.empty()) allocate();
    const int64_t M = key_.M, K = key_.K, N = key_.N;
    const ConstOperand w(weight_.data(), key_.operand);
    switch (key_.product) {
      case GemmProduct::kForward:
        k.matmul_forward(out_.data(), act_.data(), w, nullptr, M, K, N, key_.layout);
        break;
      case GemmProduct::kDinput:
        k.matmul_backward(out_.data(), {}, {}, grad_out_.data(), act_.data(), w, M, K, N,
                          key_.layout, GradOutput::kWrite);
        break;
      case GemmProduct::kDweight:
        k.matmul_backward(nullptr, Operand(weight_.data(), key_.operand), {}, grad_out_.data(),
                          act_.data(), nullptr, M, K, N, key_.layout, GradOutput::kWrite);
        break;
    }
  }

 private:
  void allocate() {
    const int64_t M = key_.M, K = key_.K, N = key_.N;
    const auto value = [](int64_t i) { return 0.0078125f * static_cast<float>(i % 17 - 8); };
    act_.resize(M * K);
    grad_out_.resize(M * N);
    out_.resize(M * std::max(K, N));
    for (int64_t i = 0; i < M * K; ++i) act_[i] = value(i);
    for (int64_t i = 0; i < M * N; ++i) grad_out_[i] = value(i + 5);
    weight_.resize(K * N);
    for (int64_t i = 0; i < K * N; ++i)
      weight_[i] =
          key_.operand == DType::kBF16 ? fp32_to_bf16(value(i + 3)) : fp32_to_fp16(value(i + 3));
  }

  GemmKey key_;
  std::vector<float> act_, grad_out_, out_;
  std::vector<uint16_t> weight_;  // the weight, or the weight gradient (kDweight)
};

constexpr int kMinRounds = 3, kMaxRounds = 16;
constexpr double kKeySeconds = 0.1;  // a key's timed total before rounds stop (after the minimum)

}  // namespace

double WallClockGemmTimer::seconds(const GemmKey&, GemmPath, const std::function<void()>& run) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  run();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<GemmMeasurement> measure_gemm_paths(std::span<const GemmKey> keys, GemmTimer& timer,
                                                const GemmAbilities& abilities) {
  std::vector<GemmMeasurement> out;
  for (const GemmKey& key : keys) {
    ScratchProduct product(key);
    const std::vector<GemmPath> paths = gemm_candidates(key, abilities);
    const size_t n = paths.size();
    // Each candidate's kernels: a table routing this key alone to it.
    std::vector<std::unique_ptr<GemmRouting>> routings;
    std::vector<std::unique_ptr<CpuKernels>> kernels;
    std::vector<std::function<void()>> runs;
    for (GemmPath path : paths) {
      auto alone = std::make_shared<GemmPaths>();
      alone->set(key, path);
      routings.push_back(std::make_unique<GemmRouting>());
      routings.back()->install(std::move(alone));
      kernels.push_back(
          std::make_unique<CpuKernels>(cpu::choose_isa(), key.act, routings.back().get()));
      runs.push_back([&product, k = kernels.back().get()] { product.run(*k); });
    }
    for (size_t i = 0; i < n; ++i) timer.warm_up(key, paths[i], runs[i]);
    std::vector<double> best(n, 0.0);
    double total = 0.0;
    for (int round = 0; round < kMinRounds || (total < kKeySeconds && round < kMaxRounds); ++round)
      for (size_t j = 0; j < n; ++j) {
        const size_t i = round % 2 == 0 ? j : n - 1 - j;
        const double s = timer.seconds(key, paths[i], runs[i]);
        best[i] = round == 0 ? s : std::min(best[i], s);
        total += s;
      }
    out.push_back(choose_gemm_path(key, abilities, [&](GemmPath path) {
      return best[std::find(paths.begin(), paths.end(), path) - paths.begin()];
    }));
  }
  return out;
}

}  // namespace zt
