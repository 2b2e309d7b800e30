// Llama through the engine: the parameter table against LlamaForCausalLM's names, shapes and
// counts (tied and untied heads, optional biases), config validation, finite-difference
// gradients of the whole model (GQA; tied with q/k/v biases, untied without biases, MLP biases;
// packed documents with ignored targets), a document's losses packed after another against
// alone, activation checkpointing (bitwise-identical gradients) and the layers' activation
// declarations against what the engine's tracker sees.
#include "model_zoo/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "comm/self_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/runtime/packed_documents.h"
#include "zero/engine.h"
#include "tests/model_zoo/tiny_llama.h"

namespace zt {
namespace {

using namespace model_test;

// name -> shape over every unit.
std::map<std::string, std::vector<int64_t>> parameter_shapes(Model& m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (Unit* u : m.units())
    for (const auto& e : u->layout().entries()) shapes[e.spec.name] = e.spec.shape;
  return shapes;
}

int64_t parameter_count(Model& m) {
  int64_t n = 0;
  for (Unit* u : m.units()) n += u->layout().param_count();
  return n;
}

// tests/model_zoo/tiny_llama.h's, 61 tokens and 16 positions, Qwen2's q/k/v-only biases.
LlamaConfig tiny(bool tied, bool attention_bias, bool mlp_bias) {
  return tiny_llama_config(61, 16, tied, attention_bias, mlp_bias);
}

// The state-dict names and shapes of transformers' LlamaForCausalLM for a config (its
// named_parameters(), written out from modeling_llama.py's module tree).
std::map<std::string, std::vector<int64_t>> llama_for_causal_lm(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, hd = c.resolved_head_dim();
  const int64_t Q = c.num_attention_heads * hd, KV = c.num_key_value_heads * hd;
  std::map<std::string, std::vector<int64_t>> m;
  m["model.embed_tokens.weight"] = {c.vocab_size, C};
  m["model.norm.weight"] = {C};
  if (!c.tie_word_embeddings) m["lm_head.weight"] = {c.vocab_size, C};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m[p + "input_layernorm.weight"] = {C};
    m[p + "post_attention_layernorm.weight"] = {C};
    m[p + "self_attn.q_proj.weight"] = {Q, C};
    m[p + "self_attn.k_proj.weight"] = {KV, C};
    m[p + "self_attn.v_proj.weight"] = {KV, C};
    m[p + "self_attn.o_proj.weight"] = {C, Q};
    if (c.attention_bias) {
      m[p + "self_attn.q_proj.bias"] = {Q};
      m[p + "self_attn.k_proj.bias"] = {KV};
      m[p + "self_attn.v_proj.bias"] = {KV};
      if (c.attention_out_bias) m[p + "self_attn.o_proj.bias"] = {C};
    }
    m[p + "mlp.gate_proj.weight"] = {F, C};
    m[p + "mlp.up_proj.weight"] = {F, C};
    m[p + "mlp.down_proj.weight"] = {C, F};
    if (c.mlp_bias) {
      m[p + "mlp.gate_proj.bias"] = {F};
      m[p + "mlp.up_proj.bias"] = {F};
      m[p + "mlp.down_proj.bias"] = {C};
    }
  }
  return m;
}

TEST(Llama, ParameterTableMatchesLlamaForCausalLM) {
  for (bool tied : {false, true})
    for (bool attention_bias : {false, true})
      for (bool out_bias : {false, true})
        for (bool mlp_bias : {false, true}) {
          LlamaConfig c = tiny(tied, attention_bias, mlp_bias);
          c.attention_out_bias = out_bias;
          Llama model(c);
          EXPECT_EQ(parameter_shapes(model), llama_for_causal_lm(c))
              << "tied " << tied << " attention_bias " << attention_bias << " o bias " << out_bias
              << " mlp_bias " << mlp_bias;
          ASSERT_EQ(model.units().size(), 3u);
          EXPECT_EQ(model.units()[0]->layout().find("lm_head.weight") != nullptr, !tied);
        }
}

TEST(Llama, ParameterCountsMatchPublishedCheckpoints) {
  Llama llama(llama_zoo_config("llama-3.2-1B"));
  EXPECT_EQ(parameter_count(llama), 1235814400);  // meta-llama/Llama-3.2-1B (tied head)
  Llama qwen(llama_zoo_config("qwen2-0.5B"));
  EXPECT_EQ(parameter_count(qwen), 494032768);  // Qwen/Qwen2-0.5B (tied, q/k/v biases)
  const FlatLayout& block = qwen.units()[3]->layout();
  ASSERT_NE(block.find("model.layers.2.self_attn.k_proj.bias"), nullptr);
  EXPECT_EQ(block.find("model.layers.2.self_attn.k_proj.weight")->spec.shape,
            (std::vector<int64_t>{128, 896}));
  EXPECT_EQ(block.find("model.layers.2.self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(block.find("model.layers.2.mlp.down_proj.weight")->spec.decay, Decay::kYes);
  EXPECT_EQ(block.find("model.layers.2.self_attn.q_proj.bias")->spec.decay, Decay::kNo);
  EXPECT_EQ(block.find("model.layers.2.input_layernorm.weight")->spec.decay, Decay::kNo);
  for (const char* name : {"llama-tiny", "qwen2-tiny"}) {
    EXPECT_NO_THROW(validate_llama_config(llama_zoo_config(name), name));
    EXPECT_NO_THROW(Llama{llama_zoo_config(name)});
  }
}

TEST(Llama, RejectsBadConfigsNamingTheField) {
  auto message = [](const LlamaConfig& c) {
    try {
      validate_llama_config(c, "x/config.json");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect_names = [&](LlamaConfig c, const char* field) {
    const std::string m = message(c);
    EXPECT_NE(m.find("x/config.json"), std::string::npos) << m;
    EXPECT_NE(m.find(field), std::string::npos) << m;
  };
  LlamaConfig c = tiny(false, false, false);
  c.num_key_value_heads = 3;
  expect_names(c, "num_key_value_heads");
  c = tiny(false, false, false);
  c.head_dim = 0;
  c.num_attention_heads = 5;
  c.num_key_value_heads = 5;
  expect_names(c, "num_attention_heads");
  c = tiny(false, false, false);
  c.head_dim = 7;
  expect_names(c, "head_dim");
  c = tiny(false, false, false);
  c.hidden_size = 40;
  expect_names(c, "hidden_size");
  c = tiny(false, false, false);
  c.rms_norm_eps = 0.0f;
  expect_names(c, "rms_norm_eps");
  c = tiny(false, false, false);
  c.rope_theta = -1.0f;
  expect_names(c, "rope_theta");
  c = tiny(false, false, false);
  c.vocab_size = 0;
  expect_names(c, "vocab_size");
  c = tiny(false, false, false);
  c.intermediate_size = 40;
  c.mlp_bias = true;
  expect_names(c, "intermediate_size");
  EXPECT_THROW(llama_zoo_config("llama-huge"), Error);
  EXPECT_THROW(Llama{c}, Error);
}

// The whole model's gradient against central differences (model_test_util.h).
void check_whole_model_gradient(const LlamaConfig& config) {
  CpuDevice device;
  Llama model(config);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 7, config.vocab_size, 7);
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 50);
}

TEST(Llama, WholeModelGradientMatchesFiniteDifferencesGqaTiedWithQkvBias) {
  check_whole_model_gradient(tiny(true, true, false));
}

TEST(Llama, WholeModelGradientMatchesFiniteDifferencesGqaUntiedNoBias) {
  check_whole_model_gradient(tiny(false, false, false));
}

TEST(Llama, WholeModelGradientMatchesFiniteDifferencesMlpAndOutputBiases) {
  LlamaConfig c = tiny(false, true, true);
  c.attention_out_bias = true;
  c.num_key_value_heads = 4;  // multi-head attention: the GQA kernel's G = 1 case
  check_whole_model_gradient(c);
}

// Rows packing documents (one of a single token; the second row's first document the rest of
// one cut off), some targets ignored.
TEST(Llama, WholeModelGradientOverPackedDocumentsMatchesFiniteDifferences) {
  const LlamaConfig config = tiny(false, true, false);
  CpuDevice device;
  Llama model(config);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 7, config.vocab_size, 8);
  pack_documents(t, test::document_positions({{3, 1, 3}, {2, 5}}), {0, 4, 9, 10});
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 50);
}

// A document's token losses after another document in its row are its losses alone: its
// queries read its own keys only, and its rotary angles count from its first token.
TEST(Llama, PackedDocumentLossesAreTheDocumentsAlone) {
  const LlamaConfig config = tiny(true, false, false);
  CpuDevice device;
  Llama model(config);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  randomize_parameters(engine, model, 0.5f, 12);
  for (int64_t a_len : {1, 5})
    expect_documents_independent(document_losses(engine, 11, a_len, config.vocab_size, 13));
}

TEST(Llama, CheckpointingGivesBitwiseIdenticalGradients) {
  for (bool tied : {false, true}) {
    const LlamaConfig config = tiny(tied, tied, false);
    Tokens t = random_tokens(2, 16, config.vocab_size, 11);
    std::vector<std::vector<float>> grads[2];
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      CpuDevice device;
      Llama model(config);
      EngineOptions options;
      if (ckpt) options.checkpoint = every_block(model);
      SelfCommunicator comm(device);
      Engine engine(device, comm, model, options);
      engine.compute_gradients(t.batch);
      for (int u = 0; u < engine.num_units(); ++u) grads[ckpt].push_back(engine.unit_grads(u));
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t u = 0; u < grads[0].size(); ++u)
      EXPECT_EQ(std::memcmp(grads[0][u].data(), grads[1][u].data(), grads[0][u].size() * 4), 0)
          << "tied " << tied << " unit " << u;
  }
}

// The activations a micro-batch allocates, as the layers declare them: every layer declares;
// the engine's activation peak without checkpointing is at least the decoder layers' saved
// buffers (all alive together before backward) and the checkpointed peak is lower.
TEST(Llama, ActivationsDeclaredAndCheckpointingCutsThePeak) {
  const LlamaConfig config = tiny(false, false, false);
  const int64_t B = 2, T = 16;
  Tokens t = random_tokens(B, T, config.vocab_size, 5);
  size_t peak[2];
  int64_t saved_bytes = 0;
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    CpuDevice device;
    Llama model(config);
    if (ckpt == 0)
      for (Layer* l : model.layers()) {
        const auto a = l->activations(B, T, true);
        ASSERT_TRUE(a.has_value());
        if (l->checkpointable())
          for (const ActivationBuffer& b : a->saved) saved_bytes += b.elements * 4;
      }
    EngineOptions options;
    if (ckpt) options.checkpoint = every_block(model);
    SelfCommunicator comm(device);
    Engine engine(device, comm, model, options);
    engine.compute_gradients(t.batch);
    peak[ckpt] = device.memory().peak(MemCategory::kActivations);
  }
  EXPECT_GE(static_cast<int64_t>(peak[0]), saved_bytes);
  EXPECT_LT(peak[1], peak[0]);
}

TEST(Llama, EvalLeavesParametersAndGradientsUntouched) {
  CpuDevice device;
  Llama model(llama_zoo_config("qwen2-tiny"));
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 8, model.config().vocab_size, 9);
  engine.compute_gradients(t.batch);
  const int64_t n = model.units()[1]->layout().numel();
  std::vector<float> p(engine.unit_params(1), engine.unit_params(1) + n);
  const std::vector<float> g = engine.unit_grads(1);
  const double a = engine.eval_loss(t.batch);
  const double b = engine.eval_loss(t.batch);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::isfinite(a));
  EXPECT_EQ(std::memcmp(p.data(), engine.unit_params(1), n * 4), 0);
  EXPECT_EQ(std::memcmp(g.data(), engine.unit_grads(1).data(), n * 4), 0);
}

}  // namespace
}  // namespace zt
