// planned_attention_record (device_factory.h): what a device keeps in att by its back end's
// rules, asked without making a device, as the memory planner asks it for a GPU job. Runs
// without a GPU: the CUDA rules need only the linked cuDNN's version. On a GPU,
// CudaCudnnAttentionTest.ThePlannedRecordIsTheDevices checks it against the device's answer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/device_factory.h"

namespace zt {
namespace {

// GPT-2 124M's heads.
constexpr AttentionHeads kGpt2{12, 12, 64, 0};
constexpr int64_t B = 4, T = 1024;

AttentionRecord probabilities(const AttentionHeads& h) { return {B * h.NH * T * T, true}; }

void expect_record(const AttentionRecord& got, const AttentionRecord& want, std::string_view what) {
  EXPECT_EQ(got.floats, want.floats) << what;
  EXPECT_EQ(got.packable, want.packable) << what;
}

TEST(PlannedAttentionRecord, TheCpuKeepsTheProbabilities) {
  for (DType act : {DType::kF32, DType::kBF16, DType::kF16})
    expect_record(planned_attention_record(DeviceKind::kCpu, act, kGpt2, B, T, false),
                  probabilities(kGpt2), dtype_name(act));
}

TEST(PlannedAttentionRecord, ACudaJobKeepsCudnnsRecordWhereItsRulesTakeTheShape) {
#if !ZT_HAVE_CUDA || !ZT_HAVE_CUDNN
  GTEST_SKIP() << "built without CUDA or cuDNN: every shape keeps the probabilities";
#else
  const char* path = std::getenv("ZT_CUDA_ATTENTION");
  if (path && std::string(path) == "reference")
    GTEST_SKIP() << "ZT_CUDA_ATTENTION=reference: every shape keeps the probabilities";
  // The statistics (B,NH,T) fp32, rounded up to 4 floats, then the 16-bit O (B,T,NH·hd).
  const AttentionRecord record{B * 12 * T + B * T * 12 * 64 / 2, false};
  for (DType act : {DType::kBF16, DType::kF16})
    expect_record(planned_attention_record(DeviceKind::kCuda, act, kGpt2, B, T, false), record,
                  dtype_name(act));
  // Grouped-query heads: O has NH heads; a window reading every key is plain causal.
  const AttentionHeads gqa{8, 2, 128, T};
  expect_record(planned_attention_record(DeviceKind::kCuda, DType::kBF16, gqa, 3, T, false),
                {(3 * 8 * T + 3) / 4 * 4 + 3 * T * 8 * 128 / 2, false}, "GQA");
  // What the rules refuse keeps the probabilities: fp32, packed documents, a sliding window,
  // a head size past 128.
  expect_record(planned_attention_record(DeviceKind::kCuda, DType::kF32, kGpt2, B, T, false),
                probabilities(kGpt2), "fp32");
  expect_record(planned_attention_record(DeviceKind::kCuda, DType::kBF16, kGpt2, B, T, true),
                probabilities(kGpt2), "packed");
  const AttentionHeads window{12, 12, 64, 256}, wide{4, 4, 256, 0};
  expect_record(planned_attention_record(DeviceKind::kCuda, DType::kBF16, window, B, T, false),
                probabilities(window), "window 256");
  expect_record(planned_attention_record(DeviceKind::kCuda, DType::kBF16, wide, B, T, false),
                probabilities(wide), "hd 256");
#endif
}

}  // namespace
}  // namespace zt
