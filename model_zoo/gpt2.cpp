// GPT-2 parameter tables and transformer block; the embedding and the head are the zoo's
// (decoder_model.h, lm_head.h).
#include "model_zoo/gpt2.h"

#include <cmath>
#include <memory>
#include <string>

#include "model_zoo/lm_head.h"
#include "model_zoo/table_unit.h"
#include "runtime/status.h"

namespace zt {

namespace {

// Root unit tensors, in table order.
enum RootParam { kWte, kWpe, kLnfW, kLnfB, kRootParamCount };
// Block tensors, in table order (Hugging Face's order within h.{i}).
enum BlockParam {
  kLn1W,
  kLn1B,
  kAttnW,
  kAttnB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFcProjW,
  kFcProjB,
  kBlockParamCount
};

ParamSpec weight(std::string name, std::vector<int64_t> shape, float std) {
  return zoo::weight_spec(std::move(name), std::move(shape), std);
}
ParamSpec bias(std::string name, int64_t n) { return zoo::bias_spec(std::move(name), n); }
ParamSpec norm_weight(std::string name, int64_t n) {
  return zoo::norm_weight_spec(std::move(name), n);
}

std::vector<ParamSpec> root_specs(const Gpt2Config& c) {
  std::vector<ParamSpec> specs = {
      weight("wte.weight", {c.padded_vocab_size(), c.n_embd}, 0.02f),  // (Vp, C), rows >= V zero
      weight("wpe.weight", {c.n_positions, c.n_embd}, 0.02f),          // (maxT, C)
      norm_weight("ln_f.weight", c.n_embd),                            // (C)
      bias("ln_f.bias", c.n_embd),                                     // (C)
  };
  specs[kWte].used_rows = c.vocab_size;
  specs[kWte].grad_written_whole = true;  // by the LM head's product, before the embedding's rows
  static_assert(kRootParamCount == 4);
  return specs;
}

std::vector<ParamSpec> block_specs(const Gpt2Config& c, int layer) {
  const int64_t C = c.n_embd;
  // Residual projections are scaled by 1/sqrt(2 * n_layer) at init (GPT-2 paper, section 2.3).
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  const std::string p = "h." + std::to_string(layer) + ".";
  std::vector<ParamSpec> specs = {
      norm_weight(p + "ln_1.weight", C),                      // (C)
      bias(p + "ln_1.bias", C),                               // (C)
      weight(p + "attn.c_attn.weight", {C, 3 * C}, 0.02f),    // (C, 3C)
      bias(p + "attn.c_attn.bias", 3 * C),                    // (3C)
      weight(p + "attn.c_proj.weight", {C, C}, proj_std),     // (C, C)
      bias(p + "attn.c_proj.bias", C),                        // (C)
      norm_weight(p + "ln_2.weight", C),                      // (C)
      bias(p + "ln_2.bias", C),                               // (C)
      weight(p + "mlp.c_fc.weight", {C, 4 * C}, 0.02f),       // (C, 4C)
      bias(p + "mlp.c_fc.bias", 4 * C),                       // (4C)
      weight(p + "mlp.c_proj.weight", {4 * C, C}, proj_std),  // (4C, C)
      bias(p + "mlp.c_proj.bias", C),                         // (C)
  };
  ZT_ASSERT(specs.size() == kBlockParamCount, "block table has {} entries", specs.size());
  for (int i : {kAttnW, kAttnProjW, kFcW, kFcProjW}) specs[i].grad_written_whole = true;
  return specs;
}

// ---- Layers ---------------------------------------------------------------------------------

// One pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class BlockLayer final : public Layer {
 public:
  BlockLayer(const Gpt2Config& c, const zoo::Table& table) : c_(c), u_(table) {}
  int unit_index() const override { return u_.unit_indices().front(); }
  std::vector<int> unit_indices() const override { return u_.unit_indices(); }
  bool checkpointable() const override { return true; }

  // Saved activations, by allocation order (ActivationStore::at).
  enum Saved {
    kLn1,
    kLn1Mean,
    kLn1Rstd,
    kQkv,
    kAtt,
    kAtty,
    kRes2,
    kLn2,
    kLn2Mean,
    kLn2Rstd,
    kFc,
    kGelu
  };

  void forward(Kernels& k, const LayerIO& io, ActivationStore& acts) override {
    const Batch& b = *io.batch;
    const int64_t NH = c_.n_head;
    compute(k, io.input, io.output, b.B * b.T, acts,
            k.attention_record(b.B, b.T, NH, NH, c_.n_embd / NH, b.positions != nullptr, 0),
            [&](Operand atty, Operand att, ConstOperand qkv) {
              k.attention_forward(atty, att, qkv, b.B, b.T, c_.n_embd, c_.n_head, b.positions);
            });
  }

  int64_t kv_width() const override { return c_.n_embd; }

  // forward's computation with the attention over the cache; its buffers are temporaries.
  void decode(Kernels& k, const DecodeIO& io, ActivationStore& scratch) override {
    const int64_t NH = c_.n_head;
    compute(k, io.input, io.output, io.B * io.T, scratch, AttentionRecord{},
            [&](Operand atty, Operand, ConstOperand qkv) {
              k.gqa_attention_decode(atty, io.k_cache, io.v_cache, qkv, io.B, io.T, io.past,
                                     io.capacity, NH, NH, c_.n_embd / NH, 0);
            });
  }

  // The block on N tokens, its buffers in `acts` in the order of Saved (att: as
  // attention_record asked, given to attend), attend computing atty from qkv.
  template <class Attend>
  void compute(Kernels& k, ConstOperand x, Operand out, int64_t N, ActivationStore& acts,
               AttentionRecord att_record, const Attend& attend) {
    const int64_t C = c_.n_embd;
    Operand ln1 = acts.alloc_acts(N * C);            // (N, C)
    float* ln1_mean = acts.alloc_stats(N);           // (N)
    float* ln1_rstd = acts.alloc_stats(N);           // (N)
    Operand qkv = acts.alloc_acts(N * 3 * C);        // (N, 3C)
    Operand att = acts.alloc_attention(att_record);  // (B, NH, T, T) or a record
    Operand atty = acts.alloc_acts(N * C);           // (N, C)
    Operand res2 = acts.alloc_acts(N * C);           // (N, C) x + attention
    Operand ln2 = acts.alloc_acts(N * C);            // (N, C)
    float* ln2_mean = acts.alloc_stats(N);           // (N)
    float* ln2_rstd = acts.alloc_stats(N);           // (N)
    Operand fc = acts.alloc_acts(N * 4 * C);         // (N, 4C)
    Operand gelu = acts.alloc_acts(N * 4 * C);       // (N, 4C)

    k.layernorm_forward(ln1, ln1_mean, ln1_rstd, x, u_.param(kLn1W), u_.param(kLn1B), N, C);
    k.matmul_forward(qkv, ln1, u_.param(kAttnW), u_.param(kAttnB), N, C, 3 * C,
                     WeightLayout::kInOut);
    attend(atty, att, qkv);
    k.matmul_forward(res2, atty, u_.param(kAttnProjW), u_.param(kAttnProjB), N, C, C,
                     WeightLayout::kInOut);
    k.residual_forward(res2, res2, x, N * C);
    k.layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, u_.param(kLn2W), u_.param(kLn2B), N, C);
    k.matmul_forward(fc, ln2, u_.param(kFcW), u_.param(kFcB), N, C, 4 * C, WeightLayout::kInOut);
    k.gelu_forward(gelu, fc, N * 4 * C);
    k.matmul_forward(out, gelu, u_.param(kFcProjW), u_.param(kFcProjB), N, 4 * C, C,
                     WeightLayout::kInOut);
    k.residual_forward(out, out, res2, N * C);
  }

  // forward's twelve buffers and backward's seven, as allocated above.
  std::optional<LayerActivations> activations(int64_t B, int64_t T, bool) const override {
    const int64_t C = c_.n_embd, NH = c_.n_head, N = B * T;
    LayerActivations a;
    const AttentionHeads heads{NH, NH, C / NH, 0};
    a.saved = {{N * C},     {N, true},  {N, true}, {N * 3 * C}, {B * NH * T * T, false, heads},
               {N * C},     {N * C},    {N * C},   {N, true},   {N, true},
               {N * 4 * C}, {N * 4 * C}};
    ZT_ASSERT(a.saved.size() == kGelu + 1, "{} saved buffers declared", a.saved.size());
    a.scratch = N * C + 4 * N * C + 4 * N * C + N * C + N * C + 3 * N * C + N * C;
    return a;
  }

  void backward(Kernels& k, const LayerIO& io, ActivationStore& acts,
                ActivationStore& scratch) override {
    const int64_t B = io.batch->B, T = io.batch->T, C = c_.n_embd, NH = c_.n_head, N = B * T;
    // The products write their dinp (GradOutput::kWrite: each has no other writer); GELU's and
    // attention's gradients accumulate (Kernels contract) into zeroed buffers; the residual
    // branch's gradient starts as a copy of d_output.
    Operand d_res2 = scratch.alloc_acts(N * C);
    Operand d_gelu = scratch.alloc_acts(N * 4 * C);
    Operand d_fc = scratch.alloc_acts(N * 4 * C);
    Operand d_ln2 = scratch.alloc_acts(N * C);
    Operand d_atty = scratch.alloc_acts(N * C);
    Operand d_qkv = scratch.alloc_acts(N * 3 * C);
    Operand d_ln1 = scratch.alloc_acts(N * C);
    cast(k, d_res2, io.d_output, N * C);
    k.fill(d_fc, 0.0f, 4 * N * C);
    k.fill(d_qkv, 0.0f, 3 * N * C);
    constexpr GradOutput kWrite = GradOutput::kWrite;

    k.matmul_backward(d_gelu, u_.grad(kFcProjW), u_.grad(kFcProjB), io.d_output, acts.at(kGelu),
                      u_.param(kFcProjW), N, 4 * C, C, WeightLayout::kInOut, kWrite);
    k.gelu_backward(d_fc, acts.at(kFc), d_gelu, N * 4 * C);
    k.matmul_backward(d_ln2, u_.grad(kFcW), u_.grad(kFcB), d_fc, acts.at(kLn2), u_.param(kFcW), N,
                      C, 4 * C, WeightLayout::kInOut, kWrite);
    k.layernorm_backward(d_res2, u_.grad(kLn2W), u_.grad(kLn2B), d_ln2, acts.at(kRes2),
                         u_.param(kLn2W), acts.stats_at(kLn2Mean), acts.stats_at(kLn2Rstd), N, C);
    k.accumulate(io.d_input, d_res2, N * C);  // the residual path around attention
    k.matmul_backward(d_atty, u_.grad(kAttnProjW), u_.grad(kAttnProjB), d_res2, acts.at(kAtty),
                      u_.param(kAttnProjW), N, C, C, WeightLayout::kInOut, kWrite);
    k.attention_backward(d_qkv, d_atty, acts.at(kQkv), acts.at(kAtt), B, T, C, NH,
                         io.batch->positions);
    k.matmul_backward(d_ln1, u_.grad(kAttnW), u_.grad(kAttnB), d_qkv, acts.at(kLn1),
                      u_.param(kAttnW), N, C, 3 * C, WeightLayout::kInOut, kWrite);
    k.layernorm_backward(io.d_input, u_.grad(kLn1W), u_.grad(kLn1B), d_ln1, io.input,
                         u_.param(kLn1W), acts.stats_at(kLn1Mean), acts.stats_at(kLn1Rstd), N, C);
  }

 private:
  Gpt2Config c_;
  const zoo::Table& u_;
};

}  // namespace

Gpt2Config gpt2_zoo_config(const std::string& name) {
  struct Entry {
    const char* name;
    Gpt2Config config;
  };
  static const Entry kZoo[] = {
      {"gpt2-tiny", {4, 4, 128, 50257, 256}},      {"gpt2-124M", {12, 12, 768, 50257, 1024}},
      {"gpt2-350M", {24, 16, 1024, 50257, 1024}},  {"gpt2-774M", {36, 20, 1280, 50257, 1024}},
      {"gpt2-1558M", {48, 25, 1600, 50257, 1024}},
  };
  std::string known;
  for (const auto& e : kZoo) {
    if (name == e.name) return e.config;
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw_input(fmt::format("unknown model '{}'; the zoo has {}", name, known));
}

void validate_gpt2_config(const Gpt2Config& c, const std::string& source) {
  auto require = [&](bool ok, const char* what) {
    if (!ok) throw_input(fmt::format("{}: zt.model: {}", source, what));
  };
  require(c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.vocab_size > 0 && c.n_positions > 0,
          "n_layer, n_head, n_embd, vocab_size and n_positions must be > 0");
  require(c.n_embd % c.n_head == 0, "n_embd must be divisible by n_head");
  require(c.vocab_size <= 65536, "vocab_size must be <= 65536 (token files hold uint16 ids)");
}

Gpt2::Gpt2(const Gpt2Config& config, const Tuning& tuning) : config_(config) {
  if (tuning.lora.enabled)
    throw_input(
        "zt.lora: LoRA adapters are built for the Llama family (Llama, Qwen2, Mistral, Qwen3, "
        "Phi-3); GPT-2's Conv1D layers are not adapted");
  const zoo::Table& root = add_table("root", root_specs(config), tuning);
  add_layer(std::make_unique<zoo::EmbeddingLayer>(root, kWte, kWpe, config.n_embd));
  for (int l = 0; l < config.n_layer; ++l)
    add_layer(std::make_unique<BlockLayer>(
        config, add_table("h." + std::to_string(l), block_specs(config, l), tuning)));
  // The tied head: wte, (Vp, C), its padding rows zero.
  add_layer(std::make_unique<zoo::LmHeadLayer>(root, zoo::FinalNorm::layer_norm(kLnfW, kLnfB), kWte,
                                               config.n_embd, config.vocab_size,
                                               config.padded_vocab_size(), logits_chunking()));
}

Gpt2::~Gpt2() = default;

double Gpt2::forward_flops_per_token(int64_t T) const {
  // 2 FLOPs per parameter per token for the matmuls (the tied head counted through wte), plus
  // attention's two (T x T x C) products per layer: QKᵀ and att·V, 2·2·T·C per token.
  return 2.0 * parameter_count() + 4.0 * config_.n_layer * static_cast<double>(T) * config_.n_embd;
}

}  // namespace zt
