// LogitsChunking (model_zoo/logits_chunking.h): the LM head's rows per chunk. The CPU's budget
// splits into the fewest equal chunks of 64 MiB; a GPU's budget (Device::chunk_budget_bytes, given
// to the model by Model::set_chunk_budget_bytes) takes a whole GPT-2 batch at once; fixed rows
// override both.
#include <gtest/gtest.h>

#include <cstdint>

#include "model_zoo/gpt2.h"
#include "model_zoo/logits_chunking.h"
#include "runtime/device.h"

namespace zt {
namespace {

constexpr int64_t kGpt2Vp = 50304;  // GPT-2's padded vocabulary

TEST(LogitsChunking, CpuBudgetSplitsIntoTheFewestEqualChunksOf64MiB) {
  const LogitsChunking cpu;
  EXPECT_EQ(cpu.budget_bytes, int64_t{64} << 20);
  // 64 MiB / (50304 · 4 B) = 333 rows: 16 x 1024 tokens in 50 chunks of 328 rows (the last 312);
  // zt-bench train's B=4 x T=64 in one.
  EXPECT_EQ(cpu.rows_for(16 * 1024, kGpt2Vp), 328);
  EXPECT_EQ(cpu.rows_for(256, kGpt2Vp), 256);
  EXPECT_EQ(cpu.rows_for(333, kGpt2Vp), 333);
  EXPECT_EQ(cpu.rows_for(334, kGpt2Vp), 167);  // two equal chunks, not 333 + 1
  EXPECT_EQ(cpu.rows_for(5, kGpt2Vp), 5);
  // A row wider than the budget: one row at a time.
  EXPECT_EQ(cpu.rows_for(7, int64_t{32} << 20), 1);
}

TEST(LogitsChunking, GpuBudgetTakesAWholeBatch) {
  LogitsChunking gpu;
  gpu.budget_bytes = gpu_chunk_budget_bytes(int64_t{143771} << 20);  // an H200
  EXPECT_EQ(gpu.rows_for(16 * 1024, kGpt2Vp), 16 * 1024);
}

TEST(LogitsChunking, FixedRowsOverrideTheBudget) {
  LogitsChunking fixed;
  fixed.rows = 100;
  EXPECT_EQ(fixed.rows_for(16 * 1024, kGpt2Vp), 100);
  EXPECT_EQ(fixed.rows_for(40, kGpt2Vp), 40);
}

// The model passes the budget to its head: the head's declared transient logits follow it.
TEST(LogitsChunking, Gpt2HeadDeclaresItsChunkFromTheBudget) {
  Gpt2Config c;  // GPT-2 124M
  Gpt2 model(c);
  const auto head = model.layers().back()->activations(16, 1024, true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->transient, 328 * c.padded_vocab_size());
  model.set_chunk_budget_bytes(gpu_chunk_budget_bytes(int64_t{143771} << 20));
  EXPECT_EQ(model.layers().back()->activations(16, 1024, true)->transient,
            16 * 1024 * c.padded_vocab_size());
}

}  // namespace
}  // namespace zt
