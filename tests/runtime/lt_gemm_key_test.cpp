// The host-side logic of the CUDA back end's GEMM plans and chunking, runnable without a GPU:
// LtGemmKey (runtime/cuda/lt_gemm_key.h: a plan per problem, types and pointer alignment) and
// gpu_chunk_budget_bytes (runtime/device.h: the LM head's chunk budget on a GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "runtime/cuda/lt_gemm_key.h"
#include "runtime/device.h"

namespace zt {
namespace {

const void* address(uintptr_t a) { return reinterpret_cast<const void*>(a); }

TEST(LtGemmKey, AlignmentIsTheLargestPowerOfTwoDividingTheAddressUpTo256) {
  EXPECT_EQ(lt_alignment(nullptr), kLtMaxAlignment);
  EXPECT_EQ(lt_alignment(address(0x1000)), 256u);
  EXPECT_EQ(lt_alignment(address(0x1100)), 256u);
  EXPECT_EQ(lt_alignment(address(0x1080)), 128u);
  EXPECT_EQ(lt_alignment(address(0x1010)), 16u);
  EXPECT_EQ(lt_alignment(address(0x1008)), 8u);
  EXPECT_EQ(lt_alignment(address(0x1002)), 2u);  // a bf16 view at an odd element offset
  EXPECT_EQ(lt_alignment(address(0x1001)), 1u);
}

TEST(LtGemmKey, ProblemsDifferingInAnyFieldGetTheirOwnPlan) {
  LtGemmKey base;
  base.ab = DType::kBF16;
  base.cd = DType::kBF16;
  base.m = 768;
  base.n = 8192;
  base.k = 768;
  base.lda = base.ldb = base.ldd = 768;
  base.align_a = base.align_b = base.align_d = base.align_bias = 256;
  std::map<LtGemmKey, int> plans;
  plans[base] = 0;
  int id = 1;
  auto variant = [&](auto change) {
    LtGemmKey k = base;
    change(k);
    EXPECT_TRUE(plans.emplace(k, id++).second) << "variant " << id - 1 << " shares a plan";
  };
  variant([](LtGemmKey& k) { k.ab = DType::kF16; });
  variant([](LtGemmKey& k) { k.cd = DType::kF32; });
  variant([](LtGemmKey& k) { k.trans_a = true; });
  variant([](LtGemmKey& k) { k.trans_b = true; });
  variant([](LtGemmKey& k) { k.m = 767; });
  variant([](LtGemmKey& k) { k.n = 8191; });
  variant([](LtGemmKey& k) { k.k = 769; });
  variant([](LtGemmKey& k) { k.ldd = 769; });
  variant([](LtGemmKey& k) { k.bias = true; });
  variant([](LtGemmKey& k) { k.align_a = 2; });  // a weight view only 2-byte aligned
  variant([](LtGemmKey& k) { k.align_bias = 2; });
  EXPECT_EQ(plans.size(), 12u);
  EXPECT_EQ(plans.at(base), 0);  // the same problem finds its plan again
  LtGemmKey same = base;
  EXPECT_TRUE(same == base);
}

TEST(GpuChunkBudget, IsAFractionOfTheGpusMemoryNeverBelowTheCpus) {
  const int64_t h200 = int64_t{143771} << 20;  // 140.4 GiB, as cudaDeviceProp reports an H200
  EXPECT_EQ(gpu_chunk_budget_bytes(h200), h200 / 32);
  // GPT-2's logits for 16 x 1024 tokens (Vp 50304, fp32) fit one chunk on an H200.
  EXPECT_GE(gpu_chunk_budget_bytes(h200), int64_t{16} * 1024 * 50304 * 4);
  EXPECT_EQ(gpu_chunk_budget_bytes(int64_t{256} << 20), Device::kCpuChunkBudgetBytes);
  EXPECT_EQ(gpu_chunk_budget_bytes(0), Device::kCpuChunkBudgetBytes);
}

}  // namespace
}  // namespace zt
