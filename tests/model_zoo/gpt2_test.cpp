// GPT-2 through the engine: finite-difference gradients of the whole model and of a block's
// input (also over packed documents with ignored targets), a document's losses packed after
// another against alone, activation checkpointing (bitwise-identical gradients, activation peak
// ratio), the parameter table against Hugging Face's names and counts.
#include "model_zoo/gpt2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "comm/self_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/runtime/packed_documents.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace model_test;

TEST(Gpt2, ParameterTableMatchesHuggingFaceGpt2) {
  Gpt2 model(gpt2_zoo_config("gpt2-124M"));
  int64_t params = 0;
  for (Unit* u : model.units()) params += u->layout().param_count();
  EXPECT_EQ(params, 124439808);  // GPT2LMHeadModel's count (tied head counted once)
  ASSERT_EQ(model.units().size(), 13u);
  const FlatLayout& root = model.units()[0]->layout();
  ASSERT_NE(root.find("wte.weight"), nullptr);
  EXPECT_EQ(root.find("wte.weight")->spec.shape, (std::vector<int64_t>{50304, 768}));
  EXPECT_EQ(root.find("wte.weight")->spec.exported_rows(), 50257);
  const FlatLayout& block = model.units()[5]->layout();
  ASSERT_NE(block.find("h.4.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(block.find("h.4.attn.c_attn.weight")->spec.shape, (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(block.find("h.4.mlp.c_proj.weight")->spec.decay, Decay::kYes);
  EXPECT_EQ(block.find("h.4.mlp.c_proj.bias")->spec.decay, Decay::kNo);
  EXPECT_EQ(block.find("h.4.ln_2.weight")->spec.decay, Decay::kNo);
  EXPECT_EQ(root.find("wpe.weight")->spec.decay, Decay::kYes);
}

TEST(Gpt2, RejectsBadShapes) {
  Gpt2Config c{2, 3, 16, 64, 8};
  EXPECT_THROW(validate_gpt2_config(c, "x.json"), Error);
  EXPECT_THROW(gpt2_zoo_config("gpt2-huge"), Error);
}

// The whole model's gradient against central differences (model_test_util.h).
TEST(Gpt2, WholeModelGradientMatchesFiniteDifferences) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{2, 2, 16, 61, 8});
  EngineOptions options;
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, options);
  Tokens t = random_tokens(2, 5, 61, 7);
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 50);
}

// Rows packing documents (one of a single token; the second row's first document the rest of
// one cut off), some targets ignored.
TEST(Gpt2, WholeModelGradientOverPackedDocumentsMatchesFiniteDifferences) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{2, 2, 16, 61, 8});
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 7, 61, 8);
  pack_documents(t, test::document_positions({{3, 1, 3}, {2, 5}}), {0, 4, 9, 10});
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 50);
}

// A document's token losses after another document in its row are its losses alone: its
// queries read its own keys only, and its position embeddings count from its first token.
TEST(Gpt2, PackedDocumentLossesAreTheDocumentsAlone) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{2, 2, 16, 61, 16});
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  randomize_parameters(engine, model, 0.5f, 12);
  for (int64_t a_len : {1, 5})
    expect_documents_independent(document_losses(engine, 11, a_len, 61, 13));
}

TEST(Gpt2, CheckpointingGivesBitwiseIdenticalGradients) {
  const Gpt2Config config{3, 2, 32, 97, 16};
  Tokens t = random_tokens(2, 16, 97, 11);
  std::vector<std::vector<float>> grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    CpuDevice device;
    Gpt2 model(config);
    EngineOptions options;
    if (ckpt) options.checkpoint = every_block(model);
    SelfCommunicator comm(device);
    Engine engine(device, comm, model, options);
    engine.compute_gradients(t.batch);
    for (int u = 0; u < engine.num_units(); ++u) {
      const int64_t n = model.units()[u]->layout().numel();
      grads[ckpt].push_back(engine.unit_grads(u));
      ASSERT_EQ(static_cast<int64_t>(grads[ckpt].back().size()), n);
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t u = 0; u < grads[0].size(); ++u)
    EXPECT_EQ(std::memcmp(grads[0][u].data(), grads[1][u].data(), grads[0][u].size() * 4), 0)
        << "unit " << u;
}

// The activation peak with every block checkpointed is at most 1/3 of the peak without, on a
// 12-layer model (measured ratio printed).
TEST(Gpt2, CheckpointingCutsActivationPeak) {
  const Gpt2Config config{12, 6, 384, 50257, 256};
  Tokens t = random_tokens(2, 256, 50257, 5);
  size_t peak[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    CpuDevice device;
    Gpt2 model(config);
    EngineOptions options;
    if (ckpt) options.checkpoint = every_block(model);
    SelfCommunicator comm(device);
    Engine engine(device, comm, model, options);
    engine.compute_gradients(t.batch);
    peak[ckpt] = device.memory().peak(MemCategory::kActivations);
  }
  const double ratio = static_cast<double>(peak[1]) / static_cast<double>(peak[0]);
  std::printf("activation peak: %.1f MiB without checkpointing, %.1f MiB with; ratio %.3f\n",
              peak[0] / 1048576.0, peak[1] / 1048576.0, ratio);
  EXPECT_LE(ratio, 1.0 / 3.0);
}

TEST(Gpt2, EvalLeavesParametersAndGradientsUntouched) {
  CpuDevice device;
  Gpt2 model(Gpt2Config{2, 2, 16, 61, 8});
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 8, 61, 9);
  engine.compute_gradients(t.batch);
  const int64_t n = model.units()[1]->layout().numel();
  std::vector<float> p(engine.unit_params(1), engine.unit_params(1) + n);
  const std::vector<float> g = engine.unit_grads(1);
  const double a = engine.eval_loss(t.batch);
  const double b = engine.eval_loss(t.batch);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::memcmp(p.data(), engine.unit_params(1), n * 4), 0);
  EXPECT_EQ(std::memcmp(g.data(), engine.unit_grads(1).data(), n * 4), 0);
}

}  // namespace
}  // namespace zt
