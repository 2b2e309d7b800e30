// LoRA adapters (model_zoo/lora.h) and frozen tensors (zt.freeze): one adapted product against a
// float64 loop, forward and backward, with and without dropout; the adapted models' gradients by
// finite differences; the adapters' names and shapes (PEFT's inside the model); an adapted model
// starting as its base; frozen units' placement; the refusals.
#include "model_zoo/lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "model_zoo/llama.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/dropout_mask.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/model_zoo/tiny_llama.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace model_test;
using zoo::LoraProduct;
using zoo::Table;
using zoo::TableUnit;

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Tuning lora_all_linear(int r = 4, float dropout = 0.0f) {
  Tuning t;
  t.lora.enabled = true;
  t.lora.r = r;
  t.lora.alpha = 2.0f * r;
  t.lora.dropout = dropout;
  t.lora.target_modules = {"all-linear"};
  return t;
}

// Two adapters on one product of 40 columns: q (columns 0..15) and v (24..39), r = 3, in = 16;
// against a float64 loop of out += s·B·(A·dropout(x)) and its gradients.
void check_product(float dropout, bool training) {
  const int64_t N = 5, in = 16, stride = 40, r = 3;
  LoraConfig lora;
  lora.enabled = true;
  lora.r = r;
  lora.alpha = 6.0f;  // s = 2
  lora.dropout = dropout;
  LoraProduct product(lora, in, stride);
  std::vector<ParamSpec> specs;
  product.add(specs, "m.q_proj", 0, 16);
  product.add(specs, "m.v_proj", 24, 16);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "m.q_proj.lora_A.weight");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{r, in}));
  EXPECT_EQ(specs[1].name, "m.q_proj.lora_B.weight");
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{16, r}));
  TableUnit unit("t", specs);
  std::vector<float> params = random_values(unit.layout().numel(), 1, 0.5f);
  std::vector<float> grads(unit.layout().numel(), 0.0f);
  unit.bind(Operand(params.data(), DType::kF32), Operand(grads.data(), DType::kF32));
  const Table table({&unit}, {0}, {{0, 0}, {0, 1}, {0, 2}, {0, 3}});

  CpuDevice device;
  Kernels& k = device.kernels();
  const std::vector<float> x = random_values(N * in, 2);
  const std::vector<float> base = random_values(N * stride, 3);
  std::vector<float> out = base;
  ActivationStore acts(device);
  const uint64_t seed = 77;
  const std::vector<Operand> saved = product.alloc_saved(acts, N);
  product.forward(k, table, out.data(), x.data(), N, saved, device, training, seed);

  const std::vector<float> d_out = random_values(N * stride, 4);
  std::vector<float> dx(N * in, 0.0f);
  ActivationStore scratch(device);
  product.backward(k, table, dx.data(), d_out.data(), x.data(), N, acts, 0, scratch, training,
                   seed);

  // float64 reference
  const double s = 2.0;
  const double keep_scale = 1.0 / (1.0 - dropout);
  std::vector<double> out_ref(base.begin(), base.end()), dx_ref(N * in, 0.0);
  const int64_t cols[2] = {0, 24};
  for (int a = 0; a < 2; ++a) {
    const auto& A = unit.layout().entries()[2 * a];
    const auto& B = unit.layout().entries()[2 * a + 1];
    const uint64_t mask_seed = seed ^ [&] {  // the product's stream for this adapter
      uint64_t h = 1469598103934665603ull;
      for (unsigned char ch : std::string(a == 0 ? "m.q_proj" : "m.v_proj"))
        h = (h ^ ch) * 1099511628211ull;
      return h;
    }();
    std::vector<double> xd(N * in), xa(N * r, 0.0), dprod(N * 16), dxa(N * r, 0.0);
    for (int64_t i = 0; i < N * in; ++i)
      xd[i] = training && dropout > 0 && !dropout_keep(mask_seed, i, dropout)
                  ? 0.0
                  : x[i] * (training && dropout > 0 ? keep_scale : 1.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < r; ++j)
        for (int64_t c = 0; c < in; ++c)
          xa[n * r + j] += params[A.offset + j * in + c] * xd[n * in + c];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < 16; ++o) {
        double sum = 0;
        for (int64_t j = 0; j < r; ++j) sum += params[B.offset + o * r + j] * xa[n * r + j];
        out_ref[n * stride + cols[a] + o] += s * sum;
        dprod[n * 16 + o] = s * d_out[n * stride + cols[a] + o];
      }
    for (int64_t o = 0; o < 16; ++o)  // dB = dprodᵀ·xa
      for (int64_t j = 0; j < r; ++j) {
        double g = 0;
        for (int64_t n = 0; n < N; ++n) g += dprod[n * 16 + o] * xa[n * r + j];
        EXPECT_NEAR(grads[B.offset + o * r + j], g, 1e-4 * (1 + std::abs(g))) << "dB " << a;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < r; ++j)
        for (int64_t o = 0; o < 16; ++o)
          dxa[n * r + j] += dprod[n * 16 + o] * params[B.offset + o * r + j];
    for (int64_t j = 0; j < r; ++j)  // dA = dxaᵀ·xd
      for (int64_t c = 0; c < in; ++c) {
        double g = 0;
        for (int64_t n = 0; n < N; ++n) g += dxa[n * r + j] * xd[n * in + c];
        EXPECT_NEAR(grads[A.offset + j * in + c], g, 1e-4 * (1 + std::abs(g))) << "dA " << a;
      }
    for (int64_t n = 0; n < N; ++n)  // dx through the mask
      for (int64_t c = 0; c < in; ++c) {
        const int64_t i = n * in + c;
        if (training && dropout > 0 && !dropout_keep(mask_seed, i, dropout)) continue;
        double g = 0;
        for (int64_t j = 0; j < r; ++j) g += dxa[n * r + j] * params[A.offset + j * in + c];
        dx_ref[i] += g * (training && dropout > 0 ? keep_scale : 1.0);
      }
  }
  for (int64_t i = 0; i < N * stride; ++i)
    EXPECT_NEAR(out[i], out_ref[i], 1e-5 * (1 + std::abs(out_ref[i]))) << "out " << i;
  for (int64_t i = 0; i < N * in; ++i)
    EXPECT_NEAR(dx[i], dx_ref[i], 1e-4 * (1 + std::abs(dx_ref[i]))) << "dx " << i;
}

TEST(LoraProduct, MatchesAFloat64Loop) { check_product(0.0f, true); }
TEST(LoraProduct, MatchesAFloat64LoopWithDropout) { check_product(0.25f, true); }
TEST(LoraProduct, EvaluationDropsNothing) { check_product(0.25f, false); }

// Every family's adapted model: gradients of the adapters (and of biases trained with
// bias = "all") by finite differences, from parameters far from their initial values (B != 0).
TEST(LoraModel, GradientsMatchFiniteDifferences) {
  const int vocab = 64;
  const std::pair<const char*, LlamaConfig> kModels[] = {
      {"llama qkv-bias", tiny_llama_config(vocab, 16, true, true, false)},
      {"qwen3", tiny_family_config(LlamaFamily::kQwen3, vocab, 16)},
      {"phi3", tiny_family_config(LlamaFamily::kPhi3, vocab, 16)}};
  for (const auto& [name, config] : kModels) {
    SCOPED_TRACE(name);
    Tuning tuning = lora_all_linear();
    tuning.lora.bias = "all";
    Llama model(config, tuning);
    CpuDevice device;
    SelfCommunicator comm(device);
    Engine engine(device, comm, model, EngineOptions{});
    randomize_parameters(engine, model, 0.3f, 5);
    Tokens t = random_tokens(2, 8, vocab, 6);
    engine.compute_gradients(t.batch);
    EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 40);
  }
}

// modules_to_save: the embedding trains whole beside the adapters (tied: the head's too); its
// gradient and the adapters' by finite differences; the final norm stays frozen.
TEST(LoraModel, ModulesToSaveTrainWhole) {
  Tuning tuning = lora_all_linear();
  tuning.lora.modules_to_save = {"embed_tokens"};
  Llama model(tiny_llama_config(64, 16, true, false, false), tuning);
  EXPECT_EQ(model.units()[0]->name(), "root");
  EXPECT_FALSE(model.units()[0]->frozen());
  ASSERT_EQ(model.units()[0]->layout().entries().size(), 1u);
  EXPECT_EQ(model.units()[0]->layout().entries()[0].spec.name, "model.embed_tokens.weight");
  EXPECT_EQ(model.units()[1]->name(), "root.frozen");
  CpuDevice device;
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  randomize_parameters(engine, model, 0.3f, 5);
  Tokens t = random_tokens(2, 8, 64, 6);
  engine.compute_gradients(t.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, t.batch), 40);
}

// B starts at zero: the adapted model computes its base's losses, bit for bit.
TEST(LoraModel, StartsAsItsBase) {
  const LlamaConfig config = tiny_llama_config(64, 16, false, false, false);
  Llama base(config), adapted(config, lora_all_linear());
  CpuDevice device;
  SelfCommunicator comm(device), comm2(device);
  Engine base_engine(device, comm, base, EngineOptions{});
  Engine adapted_engine(device, comm2, adapted, EngineOptions{});
  // The same base weights in both (by name), the adapters as initialised.
  for (int u = 0; u < base_engine.num_units(); ++u) {
    std::vector<float> values(base.units()[u]->layout().numel());
    base_engine.read_unit_params(u, values.data());
    for (int v = 0; v < adapted_engine.num_units(); ++v) {
      if (!adapted.units()[v]->frozen()) continue;
      std::vector<float> into(adapted.units()[v]->layout().numel());
      adapted_engine.read_unit_params(v, into.data());
      bool any = false;
      for (const auto& e : adapted.units()[v]->layout().entries())
        for (const auto& f : base.units()[u]->layout().entries())
          if (e.spec.name == f.spec.name) {
            std::copy_n(values.begin() + f.offset, f.numel, into.begin() + e.offset);
            any = true;
          }
      if (any) adapted_engine.write_unit_params(v, into.data());
    }
  }
  Tokens t = random_tokens(2, 8, 64, 9);
  EXPECT_EQ(base_engine.eval_loss(t.batch), adapted_engine.eval_loss(t.batch));
}

TEST(LoraModel, AdaptersAreNamedAndShapedAsPeftNamesThem) {
  const LlamaConfig config = tiny_llama_config(64, 16, true, false, false);
  Tuning tuning = lora_all_linear(8);
  Llama model(config, tuning);
  // root (frozen whole), then per block its adapters and its frozen base.
  ASSERT_EQ(model.units().size(), 5u);
  EXPECT_EQ(model.units()[0]->name(), "root");
  EXPECT_TRUE(model.units()[0]->frozen());
  EXPECT_EQ(model.units()[1]->name(), "model.layers.0");
  EXPECT_FALSE(model.units()[1]->frozen());
  EXPECT_EQ(model.units()[2]->name(), "model.layers.0.frozen");
  EXPECT_TRUE(model.units()[2]->frozen());
  const int64_t C = 32, Q = 64, KV = 32, F = 48;
  const struct {
    const char* module;
    int64_t in, out;
  } kModules[] = {{"self_attn.q_proj", C, Q},  {"self_attn.k_proj", C, KV},
                  {"self_attn.v_proj", C, KV}, {"self_attn.o_proj", Q, C},
                  {"mlp.gate_proj", C, F},     {"mlp.up_proj", C, F},
                  {"mlp.down_proj", F, C}};
  auto entries = model.units()[1]->layout().entries();
  ASSERT_EQ(entries.size(), 14u);
  for (size_t m = 0; m < 7; ++m) {
    const std::string p = std::string("model.layers.0.") + kModules[m].module;
    EXPECT_EQ(entries[2 * m].spec.name, p + ".lora_A.weight");
    EXPECT_EQ(entries[2 * m].spec.shape, (std::vector<int64_t>{8, kModules[m].in}));
    EXPECT_EQ(entries[2 * m + 1].spec.name, p + ".lora_B.weight");
    EXPECT_EQ(entries[2 * m + 1].spec.shape, (std::vector<int64_t>{kModules[m].out, 8}));
  }
  // Only q_proj and v_proj: PEFT's usual targets.
  tuning.lora.target_modules = {"q_proj", "v_proj"};
  Llama qv(config, tuning);
  EXPECT_EQ(qv.units()[1]->layout().entries().size(), 4u);
}

TEST(LoraModel, RefusesWhatItCannotBuild) {
  const LlamaConfig config = tiny_llama_config(64, 16, true, false, false);
  auto message = [](auto&& build) {
    try {
      build();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      return e.message();
    }
    return std::string("no error");
  };
  Tuning t = lora_all_linear();
  t.lora.target_modules = {"q_proj", "c_attn"};
  EXPECT_NE(message([&] { Llama m(config, t); }).find("'c_attn' names no linear layer"),
            std::string::npos);
  t = lora_all_linear();
  t.lora.modules_to_save = {"lm_head"};
  EXPECT_NE(message([&] { Llama m(config, t); }).find("modules_to_save"), std::string::npos);
  EXPECT_NE(message([&] {
              Gpt2 m(Gpt2Config{2, 4, 32, 64, 16}, lora_all_linear());
            }).find("Llama family"),
            std::string::npos);
  Tuning freeze;
  freeze.freeze = {"*.q_proj.weight"};  // q without k and v: one fused product
  EXPECT_NE(message([&] { Llama m(config, freeze); }).find("freeze both or neither"),
            std::string::npos);
  freeze.freeze = {"*"};
  Llama all_frozen(config, freeze);
  CpuDevice device;
  SelfCommunicator comm(device);
  EXPECT_NE(message([&] {
              Engine e(device, comm, all_frozen, EngineOptions{});
            }).find("nothing to train"),
            std::string::npos);
}

// zt.freeze on GPT-2: the first block and the root frozen; the rest trains, the frozen values
// stay, and the trainable ones' gradients match finite differences.
TEST(FrozenTensors, GptBlocksFreezeByPattern) {
  Tuning t;
  t.freeze = {"h.0.*", "wte.weight", "wpe.weight"};
  Gpt2 model(Gpt2Config{2, 4, 32, 64, 16}, t);
  ASSERT_EQ(model.units().size(), 4u);  // root: ln_f trainable, wte/wpe frozen
  EXPECT_EQ(model.units()[0]->name(), "root");
  EXPECT_EQ(model.units()[1]->name(), "root.frozen");
  EXPECT_TRUE(model.units()[2]->frozen());  // h.0 whole
  EXPECT_EQ(model.units()[2]->name(), "h.0");
  CpuDevice device;
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, EngineOptions{});
  randomize_parameters(engine, model, 0.3f, 5);
  Tokens tokens = random_tokens(2, 8, 64, 6);
  engine.compute_gradients(tokens.batch);
  EXPECT_GT(check_gradients_by_finite_differences(engine, model, tokens.batch), 20);
  std::vector<float> before(model.units()[2]->layout().numel()), after(before.size());
  engine.read_unit_params(2, before.data());
  engine.train_step(std::span<const Batch>(&tokens.batch, 1), 1e-2f);
  engine.read_unit_params(2, after.data());
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace zt
