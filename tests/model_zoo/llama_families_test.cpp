// The Llama families past Llama through the engine: Mistral (sliding-window attention), Qwen3
// (q_norm and k_norm per head) and Phi-3 (fused qkv_proj and gate_up_proj, a sliding window):
// their parameter tables against transformers' names and shapes, finite-difference gradients of
// the whole model (with packed documents too), activation checkpointing (bitwise-identical
// gradients), the layers' activation declarations against the engine's tracker, a window of
// the sequence or more giving Llama's bits, the zoo's names, and config.json's family keys
// (defaults, what is refused by name).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comm/self_communicator.h"
#include "model_zoo/hf_config.h"
#include "model_zoo/llama.h"
#include "model_zoo/model_spec.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/runtime/packed_documents.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace model_test;

LlamaConfig tiny(LlamaFamily family) { return tiny_family_config(family, 61, 16); }

std::map<std::string, std::vector<int64_t>> parameter_shapes(Model& m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (Unit* u : m.units())
    for (const auto& e : u->layout().entries()) shapes[e.spec.name] = e.spec.shape;
  return shapes;
}

// One decoder layer's tensors as transformers' MistralForCausalLM, Qwen3ForCausalLM and
// Phi3ForCausalLM name them (modeling_mistral.py, modeling_qwen3.py, modeling_phi3.py).
TEST(LlamaFamilies, ParameterTablesMatchTransformers) {
  const int64_t C = 32, F = 48, hd = 16, Q = 4 * hd, KV = 2 * hd;
  const std::string p = "model.layers.1.";
  for (LlamaFamily f : kNewFamilies) {
    SCOPED_TRACE(family_name(f));
    Llama model(tiny(f));
    const auto shapes = parameter_shapes(model);
    const bool phi3 = f == LlamaFamily::kPhi3;
    EXPECT_EQ(shapes.count(p + "self_attn.qkv_proj.weight"), phi3 ? 1u : 0u);
    EXPECT_EQ(shapes.count(p + "mlp.gate_up_proj.weight"), phi3 ? 1u : 0u);
    EXPECT_EQ(shapes.count(p + "self_attn.q_proj.weight"), phi3 ? 0u : 1u);
    EXPECT_EQ(shapes.count(p + "mlp.up_proj.weight"), phi3 ? 0u : 1u);
    if (phi3) {
      EXPECT_EQ(shapes.at(p + "self_attn.qkv_proj.weight"), (std::vector<int64_t>{Q + 2 * KV, C}));
      EXPECT_EQ(shapes.at(p + "mlp.gate_up_proj.weight"), (std::vector<int64_t>{2 * F, C}));
    } else {
      EXPECT_EQ(shapes.at(p + "self_attn.k_proj.weight"), (std::vector<int64_t>{KV, C}));
    }
    const bool qwen3 = f == LlamaFamily::kQwen3;
    EXPECT_EQ(shapes.count(p + "self_attn.q_norm.weight"), qwen3 ? 1u : 0u);
    if (qwen3) {
      EXPECT_EQ(shapes.at(p + "self_attn.q_norm.weight"), (std::vector<int64_t>{hd}));
      EXPECT_EQ(shapes.at(p + "self_attn.k_norm.weight"), (std::vector<int64_t>{hd}));
    }
    EXPECT_EQ(shapes.count("lm_head.weight"), qwen3 ? 0u : 1u);  // qwen3's tiny one is tied
    // 2 layers: norms, attention, MLP; the root's embedding, norm and untied head.
    const int64_t layer = 2 * C + C * (Q + 2 * KV) + Q * C + 3 * F * C + (qwen3 ? 2 * hd : 0);
    int64_t n = 0;
    for (Unit* u : model.units()) n += u->layout().param_count();
    EXPECT_EQ(n, 2 * layer + 61 * C + C + (qwen3 ? 0 : 61 * C));
  }
}

void check_whole_model_gradient(const LlamaConfig& config, const std::vector<int32_t>& positions) {
  CpuDevice device;
  Llama model(config);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  Tokens t = random_tokens(2, 7, config.vocab_size, 7);
  if (!positions.empty()) pack_documents(t, positions, {0, 4, 9});
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 50);
}

TEST(LlamaFamilies, WholeModelGradientMatchesFiniteDifferences) {
  for (LlamaFamily f : kNewFamilies) {
    SCOPED_TRACE(family_name(f));
    check_whole_model_gradient(tiny(f), {});
  }
  LlamaConfig qwen3 = tiny(LlamaFamily::kQwen3);  // Qwen3's attention_bias: q, k, v and o
  qwen3.attention_bias = qwen3.attention_out_bias = true;
  SCOPED_TRACE("qwen3 attention_bias");
  check_whole_model_gradient(qwen3, {});
}

// Rows packing documents (one of a single token), windows inside them, some targets ignored.
TEST(LlamaFamilies, WholeModelGradientOverPackedDocumentsMatchesFiniteDifferences) {
  for (LlamaFamily f : kNewFamilies) {
    SCOPED_TRACE(family_name(f));
    check_whole_model_gradient(tiny(f), test::document_positions({{3, 1, 3}, {2, 5}}));
  }
}

std::vector<std::vector<float>> gradients(const LlamaConfig& config, const Tokens& t,
                                          bool checkpoint, double* loss = nullptr) {
  CpuDevice device;
  Llama model(config);
  EngineOptions options;
  options.seed = 5;
  if (checkpoint) options.checkpoint = every_block(model);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, options);
  const double l = engine.compute_gradients(t.batch);
  if (loss) *loss = l;
  std::vector<std::vector<float>> grads;
  for (int u = 0; u < engine.num_units(); ++u) grads.push_back(engine.unit_grads(u));
  return grads;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() || std::memcmp(a[u].data(), b[u].data(), a[u].size() * 4) != 0)
      return false;
  return true;
}

TEST(LlamaFamilies, CheckpointingGivesBitwiseIdenticalGradients) {
  const Tokens t = random_tokens(2, 16, 61, 11);
  for (LlamaFamily f : kNewFamilies)
    EXPECT_TRUE(same_bits(gradients(tiny(f), t, false), gradients(tiny(f), t, true)))
        << family_name(f);
}

// A Mistral whose window covers the sequence is Llama: the same tensors, the same bits.
TEST(LlamaFamilies, AWindowOfTheSequenceOrMoreIsLlamasBits) {
  const Tokens t = random_tokens(2, 16, 61, 12);
  LlamaConfig llama = tiny(LlamaFamily::kMistral);
  llama.family = LlamaFamily::kLlama;
  llama.sliding_window = 0;
  double llama_loss = 0;
  const auto reference = gradients(llama, t, false, &llama_loss);
  for (int window : {16, 100}) {
    LlamaConfig mistral = tiny(LlamaFamily::kMistral);
    mistral.sliding_window = window;
    double loss = 0;
    EXPECT_TRUE(same_bits(reference, gradients(mistral, t, false, &loss))) << window;
    EXPECT_EQ(loss, llama_loss);
  }
  LlamaConfig narrow = tiny(LlamaFamily::kMistral);  // and a window of 3 does change the loss
  double loss = 0;
  gradients(narrow, t, false, &loss);
  EXPECT_NE(loss, llama_loss);
}

// Every layer declares its activations; the engine's peak holds the decoder layers' saved
// buffers (Qwen3's pre-norm q/k/v and its norms' statistics among them).
TEST(LlamaFamilies, ActivationsDeclaredAndCheckpointingCutsThePeak) {
  const int64_t B = 2, T = 16;
  const Tokens t = random_tokens(B, T, 61, 5);
  for (LlamaFamily f : kNewFamilies) {
    size_t peak[2];
    int64_t saved_bytes = 0;
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      CpuDevice device;
      Llama model(tiny(f));
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
    EXPECT_GE(static_cast<int64_t>(peak[0]), saved_bytes) << family_name(f);
    EXPECT_LT(peak[1], peak[0]) << family_name(f);
  }
}

TEST(LlamaFamilies, ZooNamesBuildTheirFamily) {
  for (const char* name : {"mistral-tiny", "qwen3-tiny", "phi3-tiny"}) {
    const ModelSpec spec = zoo_model_spec(name);
    EXPECT_EQ(spec.model_type(), std::string(name).substr(0, std::string(name).find('-')));
    EXPECT_NO_THROW(build_model(spec)) << name;
  }
  EXPECT_EQ(zoo_model_spec("mistral-7B-v0.1").llama().sliding_window, 4096);
  EXPECT_EQ(zoo_model_spec("qwen3-0.6B").llama().resolved_head_dim(), 128);
  EXPECT_EQ(zoo_model_spec("phi3-mini-4k").model_type(), "phi3");
  EXPECT_THROW(zoo_model_spec("qwen3-huge"), Error);
}

// The zoo's full-size models count the published checkpoints' parameters (Qwen3-0.6B tied:
// 596,049,920; Mistral-7B-v0.1: 7,241,732,096; Phi-3-mini-4k: 3,821,079,552).
TEST(LlamaFamilies, ParameterCountsMatchPublishedCheckpoints) {
  const std::pair<const char*, int64_t> expected[] = {
      {"qwen3-0.6B", 596049920}, {"mistral-7B-v0.1", 7241732096}, {"phi3-mini-4k", 3821079552}};
  for (const auto& [name, count] : expected) {
    const std::unique_ptr<Model> m = build_model(zoo_model_spec(name));
    int64_t n = 0;
    for (Unit* u : m->units()) n += u->layout().param_count();
    EXPECT_EQ(n, count) << name;
  }
}

TEST(LlamaFamilies, ValidationRefusesWhatAFamilyDoesNotHave) {
  LlamaConfig c = tiny(LlamaFamily::kPhi3);
  c.attention_bias = true;
  EXPECT_THROW(Llama{c}, Error);
  c = tiny(LlamaFamily::kMistral);
  c.mlp_bias = true;
  EXPECT_THROW(Llama{c}, Error);
  c = tiny(LlamaFamily::kMistral);
  c.sliding_window = -1;
  EXPECT_THROW(Llama{c}, Error);
}

// ---------------------------------------------------------------------------------------------
// config.json

std::string error_of(const nlohmann::json& j) {
  try {
    model_spec_from_hf_config(j, "config.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    return e.message();
  }
  return "no error";
}

nlohmann::json sizes(const char* model_type) {
  return {{"model_type", model_type}, {"hidden_size", 32},        {"intermediate_size", 48},
          {"num_hidden_layers", 2},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 67}};
}

TEST(LlamaFamilies, ConfigJsonDefaultsAndRefusals) {
  // Mistral: sliding_window absent is MistralConfig's 4096; null is none.
  nlohmann::json m = sizes("mistral");
  EXPECT_EQ(model_spec_from_hf_config(m, "c").llama().sliding_window, 4096);
  EXPECT_EQ(model_spec_from_hf_config(m, "c").llama().rms_norm_eps, 1e-6f);
  EXPECT_EQ(model_spec_from_hf_config(m, "c").llama().max_position_embeddings, 131072);
  m["sliding_window"] = nullptr;
  EXPECT_EQ(model_spec_from_hf_config(m, "c").llama().sliding_window, 0);
  m["sliding_window"] = 7;
  EXPECT_EQ(model_spec_from_hf_config(m, "c").llama().sliding_window, 7);
  m["sliding_window"] = 0;
  EXPECT_NE(error_of(m).find("\"sliding_window\" must be a positive integer"), std::string::npos);
  // Qwen3: head_dim 128 when absent (Qwen3Config's), attention_bias on q, k, v and o.
  nlohmann::json q = sizes("qwen3");
  q["intermediate_size"] = 48;
  const LlamaConfig qc = model_spec_from_hf_config(q, "c").llama();
  EXPECT_EQ(qc.family, LlamaFamily::kQwen3);
  EXPECT_EQ(qc.resolved_head_dim(), 128);
  EXPECT_FALSE(qc.attention_bias);
  q["attention_bias"] = true;
  EXPECT_TRUE(model_spec_from_hf_config(q, "c").llama().attention_out_bias);
  q["use_sliding_window"] = true;
  EXPECT_NE(error_of(q).find("\"use_sliding_window\": true is not supported"), std::string::npos);
  // Phi-3: no window unless given, rms_norm_eps 1e-5; longrope, su and partial rotary refused.
  nlohmann::json p = sizes("phi3");
  const LlamaConfig pc = model_spec_from_hf_config(p, "c").llama();
  EXPECT_EQ(pc.sliding_window, 0);
  EXPECT_EQ(pc.rms_norm_eps, 1e-5f);
  EXPECT_EQ(pc.max_position_embeddings, 4096);
  p["sliding_window"] = 2047;
  p["partial_rotary_factor"] = 1.0;
  p["resid_pdrop"] = 0.0;
  p["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(model_spec_from_hf_config(p, "c").llama().sliding_window, 2047);
  for (const char* type : {"longrope", "su", "yarn"}) {
    p["rope_scaling"] = {{"type", type}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
    EXPECT_NE(error_of(p).find(std::string("rope_type '") + type + "' is not supported"),
              std::string::npos)
        << type;
  }
  p["rope_scaling"] = nullptr;
  p["partial_rotary_factor"] = 0.75;
  EXPECT_NE(error_of(p).find("\"partial_rotary_factor\": 0.75 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(sizes("gemma")).find("supported: gpt2, llama, qwen2, mistral, qwen3, phi3"),
            std::string::npos);
}

// config.json written for each family reads back as the same model.
TEST(LlamaFamilies, ConfigJsonRoundTrips) {
  for (LlamaFamily f : kNewFamilies) {
    const ModelSpec spec{tiny(f)};
    const nlohmann::ordered_json j = hf_config_json(spec, DType::kBF16);
    EXPECT_EQ(j["model_type"], family_name(f));
    const ModelSpec back = model_spec_from_hf_config(nlohmann::json::parse(j.dump()), "c");
    EXPECT_EQ(back.model_type(), family_name(f));
    EXPECT_EQ(back.llama().sliding_window, spec.llama().sliding_window);
    EXPECT_EQ(hf_config_json(back, DType::kBF16), j);
  }
}

}  // namespace
}  // namespace zt
