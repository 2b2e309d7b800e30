// Llama parameter tables and decoder layer; the embedding and the head are the zoo's
// (decoder_model.h, lm_head.h).
//
// Table order within a decoder layer groups the tensors one GEMM reads: q_proj, k_proj and
// v_proj weights ((NH·hd, C), (NKV·hd, C), (NKV·hd, C)) are adjacent in the flat buffer, so they
// are one (NH·hd + 2·NKV·hd, C) matrix in nn.Linear's (out, in) layout and one matmul writes
// qkv rows in the layout the rotary and attention kernels read; their biases likewise; gate_proj
// and up_proj are one (2F, C) matrix whose output rows hold gate then up, as swiglu reads them.
// Adjacency needs each tensor's size to be a multiple of the layout's 16-element alignment,
// which validate_llama_config demands and the constructor asserts. Phi-3's checkpoints hold
// these matrices whole (qkv_proj (R, C), gate_up_proj (2F, C)): its table has them as one tensor
// each, the same rows in the same order. Qwen3's q_norm and k_norm (head_dim each) follow o_proj.
// Names are Hugging Face's, so the order does not matter to weights import or export.
#include "model_zoo/llama.h"

#include <cmath>
#include <memory>
#include <string>

#include "model_zoo/lm_head.h"
#include "model_zoo/lora.h"
#include "model_zoo/table_unit.h"
#include "runtime/status.h"

namespace zt {

namespace {

using zoo::LoraProduct;
using zoo::Table;

constexpr float kInitStd = 0.02f;  // LlamaConfig's initializer_range

// Root unit tensors, in table order (kLmHead only when untied).
enum RootParam { kEmbed, kNorm, kLmHead };

// Where each tensor of a decoder layer sits in its table; -1: absent (an optional bias).
// Phi-3's fused tensors sit at q (qkv_proj) and gate (gate_up_proj), k, v and up absent.
struct BlockIndex {
  int ln1 = -1, q = -1, k = -1, v = -1, q_bias = -1, k_bias = -1, v_bias = -1, o = -1, o_bias = -1,
      q_norm = -1, k_norm = -1, ln2 = -1, gate = -1, up = -1, gate_bias = -1, up_bias = -1,
      down = -1, down_bias = -1;
};

// Model dimensions, resolved once.
struct Dims {
  int64_t C, F, NH, NKV, hd, Q, KV, R;  // Q = NH·hd, KV = NKV·hd, R = Q + 2·KV (a qkv row)
  explicit Dims(const LlamaConfig& c)
      : C(c.hidden_size), F(c.intermediate_size), NH(c.num_attention_heads),
        NKV(c.num_key_value_heads), hd(c.resolved_head_dim()), Q(NH * hd), KV(NKV * hd),
        R(Q + 2 * KV) {}
};

std::vector<ParamSpec> root_specs(const LlamaConfig& c) {
  const int64_t V = c.vocab_size, C = c.hidden_size;
  std::vector<ParamSpec> specs = {
      zoo::weight_spec("model.embed_tokens.weight", {V, C}, kInitStd),  // (V, C)
      zoo::norm_weight_spec("model.norm.weight", C),                    // (C)
  };
  if (!c.tie_word_embeddings) specs.push_back(zoo::weight_spec("lm_head.weight", {V, C}, kInitStd));
  // The LM head's product writes its weight's gradient first (tied: before the embedding adds
  // its rows; untied, the embedding table's rows are only added, so it starts zeroed).
  (c.tie_word_embeddings ? specs.front() : specs.back()).grad_written_whole = true;
  return specs;
}

std::vector<ParamSpec> block_specs(const LlamaConfig& c, int layer, BlockIndex& at) {
  const Dims d(c);
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  std::vector<ParamSpec> specs;
  auto add = [&](int& index, ParamSpec spec) {
    index = static_cast<int>(specs.size());
    specs.push_back(std::move(spec));
  };
  const bool fused = c.family == LlamaFamily::kPhi3;
  add(at.ln1, zoo::norm_weight_spec(p + "input_layernorm.weight", d.C));  // (C)
  if (fused) {
    add(at.q, zoo::weight_spec(p + "self_attn.qkv_proj.weight", {d.R, d.C}, kInitStd));  // (R, C)
  } else {
    add(at.q, zoo::weight_spec(p + "self_attn.q_proj.weight", {d.Q, d.C}, kInitStd));   // (Q, C)
    add(at.k, zoo::weight_spec(p + "self_attn.k_proj.weight", {d.KV, d.C}, kInitStd));  // (KV, C)
    add(at.v, zoo::weight_spec(p + "self_attn.v_proj.weight", {d.KV, d.C}, kInitStd));  // (KV, C)
  }
  if (c.attention_bias) {
    add(at.q_bias, zoo::bias_spec(p + "self_attn.q_proj.bias", d.Q));   // (Q)
    add(at.k_bias, zoo::bias_spec(p + "self_attn.k_proj.bias", d.KV));  // (KV)
    add(at.v_bias, zoo::bias_spec(p + "self_attn.v_proj.bias", d.KV));  // (KV)
  }
  add(at.o, zoo::weight_spec(p + "self_attn.o_proj.weight", {d.C, d.Q}, kInitStd));  // (C, Q)
  if (c.attention_bias && c.attention_out_bias)
    add(at.o_bias, zoo::bias_spec(p + "self_attn.o_proj.bias", d.C));  // (C)
  if (c.family == LlamaFamily::kQwen3) {
    add(at.q_norm, zoo::norm_weight_spec(p + "self_attn.q_norm.weight", d.hd));  // (hd)
    add(at.k_norm, zoo::norm_weight_spec(p + "self_attn.k_norm.weight", d.hd));  // (hd)
  }
  add(at.ln2, zoo::norm_weight_spec(p + "post_attention_layernorm.weight", d.C));  // (C)
  if (fused) {
    add(at.gate, zoo::weight_spec(p + "mlp.gate_up_proj.weight", {2 * d.F, d.C}, kInitStd));
  } else {
    add(at.gate, zoo::weight_spec(p + "mlp.gate_proj.weight", {d.F, d.C}, kInitStd));  // (F, C)
    add(at.up, zoo::weight_spec(p + "mlp.up_proj.weight", {d.F, d.C}, kInitStd));      // (F, C)
  }
  if (c.mlp_bias) {
    add(at.gate_bias, zoo::bias_spec(p + "mlp.gate_proj.bias", d.F));  // (F)
    add(at.up_bias, zoo::bias_spec(p + "mlp.up_proj.bias", d.F));      // (F)
  }
  add(at.down, zoo::weight_spec(p + "mlp.down_proj.weight", {d.C, d.F}, kInitStd));  // (C, F)
  if (c.mlp_bias) add(at.down_bias, zoo::bias_spec(p + "mlp.down_proj.bias", d.C));  // (C)
  // Written whole by their products; k, v and up are written by the fused products through
  // q's and gate's views, so they start zeroed instead (never handed out themselves).
  for (int i : {at.q, at.o, at.gate, at.down}) specs[i].grad_written_whole = true;
  return specs;
}

// Tensors `first` .. `last` of the table follow one another in the flat buffer with no padding
// between them (the fused GEMMs read them as one matrix): zt.freeze must freeze all or none.
void assert_adjacent(const Table& u, std::initializer_list<int> indices) {
  int prev = -1;
  for (int i : indices) {
    if (i < 0) continue;
    if (prev >= 0 && u.frozen(prev) != u.frozen(i))
      throw_input(fmt::format(
          "{} would be frozen but not {} (zt.freeze, or zt.lora's bias \"lora_only\" with part "
          "of q/k/v or gate/up targeted): one product reads them as one matrix; freeze both "
          "or neither",
          u.name(u.frozen(prev) ? prev : i), u.name(u.frozen(prev) ? i : prev)));
    if (prev >= 0)
      ZT_ASSERT(u.adjacent(prev, i), "{} does not follow {} in the flat buffer", u.name(i),
                u.name(prev));
    prev = i;
  }
}

// A block's LoRA adapters, one product each (lora.h): q/k/v (one GEMM), o, gate/up (one GEMM),
// down. Phi-3's fused modules take one adapter each (PEFT adapts its qkv_proj and gate_up_proj
// whole).
struct BlockLora {
  LoraProduct qkv, o, gate_up, down;
};

// The block's linear modules (their full names), in product order.
std::vector<std::string> block_linear_modules(const LlamaConfig& c, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  if (c.family == LlamaFamily::kPhi3)
    return {p + "self_attn.qkv_proj", p + "self_attn.o_proj", p + "mlp.gate_up_proj",
            p + "mlp.down_proj"};
  return {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj",
          p + "self_attn.o_proj", p + "mlp.gate_proj",    p + "mlp.up_proj",
          p + "mlp.down_proj"};
}

// Appends the adapters of the targeted modules of block `layer` to its specs.
BlockLora add_block_lora(const LlamaConfig& c, int layer, const LoraConfig& lora,
                         std::vector<ParamSpec>& specs) {
  const Dims d(c);
  BlockLora b{LoraProduct(lora, d.C, d.R), LoraProduct(lora, d.Q, d.C),
              LoraProduct(lora, d.C, 2 * d.F), LoraProduct(lora, d.F, d.C)};
  if (!lora.enabled) return b;
  const std::vector<std::string> m = block_linear_modules(c, layer);
  auto add = [&](LoraProduct& product, const std::string& module, int64_t col, int64_t width) {
    if (zoo::lora_targets(lora, module)) product.add(specs, module, col, width);
  };
  if (c.family == LlamaFamily::kPhi3) {
    add(b.qkv, m[0], 0, d.R);
    add(b.o, m[1], 0, d.C);
    add(b.gate_up, m[2], 0, 2 * d.F);
    add(b.down, m[3], 0, d.C);
  } else {
    add(b.qkv, m[0], 0, d.Q);
    add(b.qkv, m[1], d.Q, d.KV);
    add(b.qkv, m[2], d.Q + d.KV, d.KV);
    add(b.o, m[3], 0, d.C);
    add(b.gate_up, m[4], 0, d.F);
    add(b.gate_up, m[5], d.F, d.F);
    add(b.down, m[6], 0, d.C);
  }
  return b;
}

// Refuses LoRA settings this model cannot take, naming the key: a target that names no linear
// layer (PEFT refuses it too), a module to save that names no module of the model.
void check_lora(const LlamaConfig& c, const LoraConfig& lora) {
  if (!lora.enabled) return;
  if (lora.r <= 0) throw_input(fmt::format("zt.lora.r must be > 0; got {}", lora.r));
  for (const std::string& m : lora.modules_to_save) {
    BlockIndex at;
    std::vector<ParamSpec> specs = root_specs(c);
    for (ParamSpec& s : block_specs(c, 0, at)) specs.push_back(std::move(s));
    LoraConfig one = lora;
    one.modules_to_save = {m};
    if (std::none_of(specs.begin(), specs.end(),
                     [&](const ParamSpec& s) { return zoo::lora_saves_whole(one, s.name); }))
      throw_input(fmt::format(
          "zt.lora.modules_to_save: '{}' names no module of this model (such as embed_tokens, "
          "{}norm or a block's input_layernorm){}",
          m, c.tie_word_embeddings ? "" : "lm_head, ",
          c.tie_word_embeddings && m == "lm_head"
              ? "; its head is tied to embed_tokens: name embed_tokens to train the one tensor"
              : ""));
  }
  const std::vector<std::string> modules = block_linear_modules(c, 0);
  std::string names;
  for (const std::string& m : modules)
    names += (names.empty() ? "" : ", ") + m.substr(m.rfind('.') + 1);
  for (const std::string& target : lora.target_modules) {
    LoraConfig one = lora;
    one.target_modules = {target};
    const bool found = std::any_of(modules.begin(), modules.end(),
                                   [&](const std::string& m) { return zoo::lora_targets(one, m); });
    if (!found)
      throw_input(fmt::format(
          "zt.lora.target_modules: '{}' names no linear layer of this model; its blocks' linear "
          "layers are {} (or \"all-linear\"); the embeddings and lm_head take no adapters",
          target, names));
  }
}

// ---- Layers ---------------------------------------------------------------------------------

// One pre-norm decoder layer: h = x + o_proj(attn(rope(qkv_proj(rmsnorm(x))))), then
// out = h + down_proj(silu(gate_proj(rmsnorm(h))) · up_proj(rmsnorm(h))).
class DecoderLayer final : public Layer {
 public:
  DecoderLayer(const LlamaConfig& c, const Table& table, const BlockIndex& at, BlockLora lora)
      : c_(c), d_(c), u_(table), at_(at), lora_(std::move(lora)) {}
  int unit_index() const override { return u_.unit_indices().front(); }
  std::vector<int> unit_indices() const override { return u_.unit_indices(); }
  bool checkpointable() const override { return true; }

  // Saved activations, by allocation order (ActivationStore::at); the last two with q/k norms
  // only (Qwen3): the projection's output before them, and their rstd (N, NH + NKV).
  enum Saved {
    kLn1,
    kLn1Rstd,
    kQkv,
    kAtt,
    kAtty,
    kRes2,
    kLn2,
    kLn2Rstd,
    kGateUp,
    kSwiglu,
    kQkvRaw,
    kQkRstd
  };

  void forward(Kernels& k, const LayerIO& io, ActivationStore& acts) override {
    const Batch& b = *io.batch;
    const AttentionRecord record = k.attention_record(b.B, b.T, d_.NH, d_.NKV, d_.hd,
                                                      b.positions != nullptr, c_.sliding_window);
    compute(k, io.input, io.output, b.B, b.T, b.positions, acts, record, io.training, io.seed,
            [&](Operand atty, Operand att, ConstOperand qkv) {
              k.gqa_attention_forward(atty, att, qkv, b.B, b.T, d_.NH, d_.NKV, d_.hd, b.positions,
                                      c_.sliding_window);
            });
  }

  int64_t kv_width() const override { return d_.KV; }

  // forward's computation with the attention over the cache; its buffers are temporaries.
  void decode(Kernels& k, const DecodeIO& io, ActivationStore& scratch) override {
    compute(k, io.input, io.output, io.B, io.T, io.positions, scratch, AttentionRecord{}, false, 0,
            [&](Operand atty, Operand, ConstOperand qkv) {
              k.gqa_attention_decode(atty, io.k_cache, io.v_cache, qkv, io.B, io.T, io.past,
                                     io.capacity, d_.NH, d_.NKV, d_.hd, c_.sliding_window);
            });
  }

  // The layer on B rows of T tokens at `positions` (model.h's Batch::positions), its buffers in
  // `acts` in the order of Saved (att: as attention_record asked, given to attend), then the LoRA
  // adapters' (lora_first()), attend computing atty from qkv (q and k rotated). `training`:
  // the adapters' dropout applies, its masks from `seed`.
  template <class Attend>
  void compute(Kernels& k, ConstOperand x, Operand out, int64_t B, int64_t T,
               const int32_t* positions, ActivationStore& acts, AttentionRecord att_record,
               bool training, uint64_t seed, const Attend& attend) {
    const int64_t N = B * T;
    const int64_t C = d_.C, F = d_.F, NH = d_.NH, NKV = d_.NKV, hd = d_.hd;
    Operand ln1 = acts.alloc_acts(N * C);            // (N, C)
    float* ln1_rstd = acts.alloc_stats(N);           // (N)
    Operand qkv = acts.alloc_acts(N * d_.R);         // (N, R): q, k (rotated), v
    Operand att = acts.alloc_attention(att_record);  // (B, NH, T, T) or a record
    Operand atty = acts.alloc_acts(N * d_.Q);        // (N, Q)
    Operand res2 = acts.alloc_acts(N * C);           // (N, C) x + attention
    Operand ln2 = acts.alloc_acts(N * C);            // (N, C)
    float* ln2_rstd = acts.alloc_stats(N);           // (N)
    Operand gate_up = acts.alloc_acts(N * 2 * F);    // (N, 2F): gate, up
    Operand swiglu = acts.alloc_acts(N * F);         // (N, F)
    Operand qkv_raw = qk_norm() ? acts.alloc_acts(N * d_.R) : Operand();      // (N, R)
    float* qk_rstd = qk_norm() ? acts.alloc_stats(N * (NH + NKV)) : nullptr;  // (N, NH + NKV)
    const std::vector<Operand> qkv_a = lora_.qkv.alloc_saved(acts, N);
    const std::vector<Operand> o_a = lora_.o.alloc_saved(acts, N);
    const std::vector<Operand> gate_up_a = lora_.gate_up.alloc_saved(acts, N);
    const std::vector<Operand> down_a = lora_.down.alloc_saved(acts, N);
    Device& device = acts.device();
    const float eps = c_.rms_norm_eps;

    k.rmsnorm_forward(ln1, ln1_rstd, x, param(at_.ln1), N, C, eps);
    k.matmul_forward(qk_norm() ? qkv_raw : qkv, ln1, param(at_.q), param(at_.q_bias), N, C, d_.R,
                     WeightLayout::kOutIn);  // q_proj, k_proj, v_proj in one
    lora_.qkv.forward(k, u_, qk_norm() ? qkv_raw : qkv, ln1, N, qkv_a, device, training, seed);
    if (qk_norm()) {  // Qwen3: q_norm on each query head, k_norm on each key head
      cast(k, qkv, qkv_raw, N * d_.R);
      k.head_rmsnorm_forward(qkv, qk_rstd, param(at_.q_norm), N, NH, hd, d_.R, eps);
      k.head_rmsnorm_forward(qkv.at(d_.Q), qk_rstd + N * NH, param(at_.k_norm), N, NKV, hd, d_.R,
                             eps);
    }
    k.rope_forward(qkv, B, T, NH, NKV, hd, RopeFrequencies(c_.rope_theta, c_.rope_scaling),
                   positions);
    attend(atty, att, qkv);
    k.matmul_forward(res2, atty, param(at_.o), param(at_.o_bias), N, d_.Q, C, WeightLayout::kOutIn);
    lora_.o.forward(k, u_, res2, atty, N, o_a, device, training, seed);
    k.residual_forward(res2, res2, x, N * C);
    k.rmsnorm_forward(ln2, ln2_rstd, res2, param(at_.ln2), N, C, eps);
    k.matmul_forward(gate_up, ln2, param(at_.gate), param(at_.gate_bias), N, C, 2 * F,
                     WeightLayout::kOutIn);  // gate_proj, up_proj in one
    lora_.gate_up.forward(k, u_, gate_up, ln2, N, gate_up_a, device, training, seed);
    k.swiglu_forward(swiglu, gate_up, N, F);
    k.matmul_forward(out, swiglu, param(at_.down), param(at_.down_bias), N, F, C,
                     WeightLayout::kOutIn);
    lora_.down.forward(k, u_, out, swiglu, N, down_a, device, training, seed);
    k.residual_forward(out, out, res2, N * C);
  }

  // forward's ten buffers (twelve with q/k norms), then the adapters', and backward's seven (and
  // the adapters'), as allocated above and below.
  std::optional<LayerActivations> activations(int64_t B, int64_t T, bool training) const override {
    const int64_t N = B * T, C = d_.C, F = d_.F;
    LayerActivations a;
    const AttentionHeads heads{d_.NH, d_.NKV, d_.hd, c_.sliding_window};
    a.saved = {{N * C},     {N, true}, {N * d_.R}, {B * d_.NH * T * T, false, heads},
               {N * d_.Q},  {N * C},   {N * C},    {N, true},
               {N * 2 * F}, {N * F}};
    if (qk_norm()) {
      a.saved.push_back({N * d_.R});
      a.saved.push_back({N * (d_.NH + d_.NKV), true});
    }
    ZT_ASSERT(a.saved.size() == (qk_norm() ? kQkRstd : kSwiglu) + 1u, "{} saved buffers declared",
              a.saved.size());
    a.scratch = N * C + N * F + 2 * N * F + N * C + N * d_.Q + N * d_.R + N * C;
    for (const LoraProduct* p : {&lora_.qkv, &lora_.o, &lora_.gate_up, &lora_.down})
      p->declare(a, N, training);
    return a;
  }

  void backward(Kernels& k, const LayerIO& io, ActivationStore& acts,
                ActivationStore& scratch) override {
    const int64_t B = io.batch->B, T = io.batch->T, N = B * T;
    const int64_t C = d_.C, F = d_.F, NH = d_.NH, NKV = d_.NKV, hd = d_.hd;
    // The products write their dinp (GradOutput::kWrite: each has no other writer); SwiGLU's
    // and attention's gradients accumulate (Kernels contract) into zeroed buffers; the residual
    // branch's gradient starts as a copy of d_output.
    Operand d_res2 = scratch.alloc_acts(N * C);
    Operand d_swiglu = scratch.alloc_acts(N * F);
    Operand d_gate_up = scratch.alloc_acts(N * 2 * F);
    Operand d_ln2 = scratch.alloc_acts(N * C);
    Operand d_atty = scratch.alloc_acts(N * d_.Q);
    Operand d_qkv = scratch.alloc_acts(N * d_.R);
    Operand d_ln1 = scratch.alloc_acts(N * C);
    cast(k, d_res2, io.d_output, N * C);
    k.fill(d_gate_up, 0.0f, 2 * N * F);
    k.fill(d_qkv, 0.0f, N * d_.R);
    constexpr GradOutput kWrite = GradOutput::kWrite;

    const size_t qkv_a = lora_first(), o_a = qkv_a + lora_.qkv.size(),
                 gate_up_a = o_a + lora_.o.size(), down_a = gate_up_a + lora_.gate_up.size();
    const bool train = io.training;
    k.matmul_backward(d_swiglu, grad(at_.down), grad(at_.down_bias), io.d_output, acts.at(kSwiglu),
                      param(at_.down), N, F, C, WeightLayout::kOutIn, kWrite);
    lora_.down.backward(k, u_, d_swiglu, io.d_output, acts.at(kSwiglu), N, acts, down_a, scratch,
                        train, io.seed);
    k.swiglu_backward(d_gate_up, acts.at(kGateUp), d_swiglu, N, F);
    k.matmul_backward(d_ln2, grad(at_.gate), grad(at_.gate_bias), d_gate_up, acts.at(kLn2),
                      param(at_.gate), N, C, 2 * F, WeightLayout::kOutIn, kWrite);
    lora_.gate_up.backward(k, u_, d_ln2, d_gate_up, acts.at(kLn2), N, acts, gate_up_a, scratch,
                           train, io.seed);
    k.rmsnorm_backward(d_res2, grad(at_.ln2), d_ln2, acts.at(kRes2), param(at_.ln2),
                       acts.stats_at(kLn2Rstd), N, C);
    k.accumulate(io.d_input, d_res2, N * C);  // the residual path around attention
    k.matmul_backward(d_atty, grad(at_.o), grad(at_.o_bias), d_res2, acts.at(kAtty), param(at_.o),
                      N, d_.Q, C, WeightLayout::kOutIn, kWrite);
    lora_.o.backward(k, u_, d_atty, d_res2, acts.at(kAtty), N, acts, o_a, scratch, train, io.seed);
    k.gqa_attention_backward(d_qkv, d_atty, acts.at(kQkv), acts.at(kAtt), B, T, NH, NKV, hd,
                             io.batch->positions, c_.sliding_window);
    // d_qkv now holds the gradient w.r.t. the rotated q and k; rotated back in place, it is the
    // gradient w.r.t. the projection's output (with q/k norms: through them too, in place).
    k.rope_backward(d_qkv, B, T, NH, NKV, hd, RopeFrequencies(c_.rope_theta, c_.rope_scaling),
                    io.batch->positions);
    if (qk_norm()) {
      const ConstOperand raw = acts.at(kQkvRaw);
      const float* rstd = acts.stats_at(kQkRstd);
      k.head_rmsnorm_backward(d_qkv, grad(at_.q_norm), raw, param(at_.q_norm), rstd, N, NH, hd,
                              d_.R);
      k.head_rmsnorm_backward(d_qkv.at(d_.Q), grad(at_.k_norm), raw.at(d_.Q), param(at_.k_norm),
                              rstd + N * NH, N, NKV, hd, d_.R);
    }
    k.matmul_backward(d_ln1, grad(at_.q), grad(at_.q_bias), d_qkv, acts.at(kLn1), param(at_.q), N,
                      C, d_.R, WeightLayout::kOutIn, kWrite);
    lora_.qkv.backward(k, u_, d_ln1, d_qkv, acts.at(kLn1), N, acts, qkv_a, scratch, train, io.seed);
    k.rmsnorm_backward(io.d_input, grad(at_.ln1), d_ln1, io.input, param(at_.ln1),
                       acts.stats_at(kLn1Rstd), N, C);
  }

 private:
  bool qk_norm() const { return at_.q_norm >= 0; }
  // Where the adapters' saved buffers start: after the layer's own.
  size_t lora_first() const { return static_cast<size_t>(qk_norm() ? kQkRstd : kSwiglu) + 1; }
  ConstOperand param(int i) const { return i < 0 ? ConstOperand() : u_.param(i); }
  Operand grad(int i) const { return i < 0 ? Operand() : u_.grad(i); }

  LlamaConfig c_;
  Dims d_;
  const Table& u_;
  BlockIndex at_;
  BlockLora lora_;
};

}  // namespace

LlamaConfig llama_zoo_config(const std::string& name) {
  auto make = [](int hidden, int intermediate, int layers, int heads, int kv_heads, int vocab,
                 int max_positions, float theta, float eps, bool tied, bool qkv_bias) {
    LlamaConfig c;
    c.hidden_size = hidden;
    c.intermediate_size = intermediate;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.vocab_size = vocab;
    c.max_position_embeddings = max_positions;
    c.rope_theta = theta;
    c.rms_norm_eps = eps;
    c.tie_word_embeddings = tied;
    c.attention_bias = qkv_bias;
    c.attention_out_bias = false;  // Qwen2's q/k/v-only biases where biases are on
    return c;
  };
  // The families past Llama and Qwen2: family, sliding window and head_dim set.
  auto family = [](LlamaConfig c, LlamaFamily f, int window, int head_dim) {
    c.family = f;
    c.sliding_window = window;
    c.head_dim = head_dim;
    return c;
  };
  using F = LlamaFamily;
  struct Entry {
    const char* name;
    LlamaConfig config;
  };
  const Entry kZoo[] = {
      {"llama-tiny", make(64, 176, 2, 4, 2, 256, 256, 10000.0f, 1e-5f, false, false)},
      {"qwen2-tiny", make(64, 176, 2, 4, 2, 256, 256, 1000000.0f, 1e-6f, true, true)},
      {"mistral-tiny",
       family(make(64, 176, 2, 4, 2, 256, 256, 10000.0f, 1e-5f, false, false), F::kMistral, 8, 0)},
      {"qwen3-tiny",
       family(make(64, 176, 2, 4, 2, 256, 256, 1000000.0f, 1e-6f, true, false), F::kQwen3, 0, 32)},
      {"phi3-tiny",
       family(make(64, 176, 2, 4, 4, 256, 256, 10000.0f, 1e-5f, false, false), F::kPhi3, 0, 0)},
      // meta-llama/Llama-3.2-1B's config.json (its llama3 rope_scaling set below).
      {"llama-3.2-1B", make(2048, 8192, 16, 32, 8, 128256, 131072, 500000.0f, 1e-5f, true, false)},
      // Qwen/Qwen2-0.5B's config.json.
      {"qwen2-0.5B", make(896, 4864, 24, 14, 2, 151936, 32768, 1000000.0f, 1e-6f, true, true)},
      // mistralai/Mistral-7B-v0.1's config.json.
      {"mistral-7B-v0.1",
       family(make(4096, 14336, 32, 32, 8, 32000, 32768, 10000.0f, 1e-5f, false, false),
              F::kMistral, 4096, 0)},
      // Qwen/Qwen3-0.6B's config.json.
      {"qwen3-0.6B",
       family(make(1024, 3072, 28, 16, 8, 151936, 40960, 1000000.0f, 1e-6f, true, false), F::kQwen3,
              0, 128)},
      // microsoft/Phi-3-mini-4k-instruct's config.json.
      {"phi3-mini-4k",
       family(make(3072, 8192, 32, 32, 32, 32064, 4096, 10000.0f, 1e-5f, false, false), F::kPhi3,
              2047, 0)},
  };
  std::string known;
  for (const auto& e : kZoo) {
    if (name == e.name) {
      LlamaConfig c = e.config;
      if (name == "llama-3.2-1B")
        c.rope_scaling = RopeScaling{RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
      return c;
    }
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw_input(fmt::format("unknown model '{}'; the Llama zoo has {}", name, known));
}

void validate_llama_config(const LlamaConfig& c, const std::string& source) {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw_input(fmt::format("{}: {}", source, what));
  };
  auto positive = [&](int64_t v, const char* field) {
    require(v > 0, fmt::format("{} must be > 0; got {}", field, v));
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_position_embeddings, "max_position_embeddings");
  require(c.head_dim >= 0, fmt::format("head_dim must be >= 0 (0: hidden_size / "
                                       "num_attention_heads); got {}",
                                       c.head_dim));
  require(c.num_attention_heads % c.num_key_value_heads == 0,
          fmt::format("num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
                      c.num_attention_heads, c.num_key_value_heads));
  require(c.head_dim > 0 || c.hidden_size % c.num_attention_heads == 0,
          fmt::format("hidden_size ({}) must be divisible by num_attention_heads ({}) when "
                      "head_dim is not given",
                      c.hidden_size, c.num_attention_heads));
  require(c.sliding_window >= 0,
          fmt::format("sliding_window must be >= 0 (0: none); got {}", c.sliding_window));
  const bool biased = c.attention_bias || c.mlp_bias;
  require(!biased || (c.family != LlamaFamily::kMistral && c.family != LlamaFamily::kPhi3),
          "attention_bias and mlp_bias must be false for mistral and phi3 (their layers have no "
          "biases)");
  require(!c.mlp_bias || c.family != LlamaFamily::kQwen3,
          "mlp_bias must be false for qwen3 (its MLP has no biases)");
  require(!c.attention_bias || c.attention_out_bias || c.family == LlamaFamily::kLlama,
          "attention_bias without o_proj's bias is Qwen2's (family llama)");
  require(c.resolved_head_dim() % 2 == 0,
          fmt::format("head_dim must be even (rotary embeddings rotate its two halves); got {}",
                      c.resolved_head_dim()));
  require(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0.0f,
          fmt::format("rms_norm_eps must be > 0; got {}", c.rms_norm_eps));
  require(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f,
          fmt::format("rope_theta must be > 0; got {}", c.rope_theta));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type != RopeScalingType::kNone)
    require(std::isfinite(rs.factor) && rs.factor >= 1.0f,
            fmt::format("rope_scaling.factor must be >= 1; got {}", rs.factor));
  if (rs.type == RopeScalingType::kLlama3)
    require(rs.low_freq_factor > 0.0f && rs.high_freq_factor > rs.low_freq_factor &&
                rs.original_max_position > 0,
            fmt::format("rope_scaling (llama3) needs 0 < low_freq_factor < high_freq_factor and "
                        "original_max_position_embeddings > 0; got {}, {}, {}",
                        rs.low_freq_factor, rs.high_freq_factor, rs.original_max_position));
  // The fused q/k/v and gate/up GEMMs read adjacent tensors as one matrix: every tensor they
  // join must fill whole 16-element alignment blocks of the flat layout.
  require(c.hidden_size % 16 == 0,
          fmt::format("hidden_size must be a multiple of 16; got {}", c.hidden_size));
  require(!c.attention_bias || (int64_t(c.num_key_value_heads) * c.resolved_head_dim()) % 16 == 0,
          fmt::format("with attention_bias, num_key_value_heads * head_dim must be a multiple of "
                      "16; got {}",
                      int64_t(c.num_key_value_heads) * c.resolved_head_dim()));
  require(!c.mlp_bias || c.intermediate_size % 16 == 0,
          fmt::format("with mlp_bias, intermediate_size must be a multiple of 16; got {}",
                      c.intermediate_size));
}

Llama::Llama(const LlamaConfig& config, const Tuning& tuning) : config_(config) {
  validate_llama_config(config, "LlamaConfig");
  check_lora(config, tuning.lora);
  const Table& root = add_table("root", root_specs(config), tuning);
  add_layer(std::make_unique<zoo::EmbeddingLayer>(root, kEmbed, -1, config.hidden_size));
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    BlockIndex at;
    std::vector<ParamSpec> specs = block_specs(config, l, at);
    BlockLora lora = add_block_lora(config, l, tuning.lora, specs);
    const Table& block = add_table("model.layers." + std::to_string(l), std::move(specs), tuning);
    assert_adjacent(block, {at.q, at.k, at.v});
    assert_adjacent(block, {at.q_bias, at.k_bias, at.v_bias});
    assert_adjacent(block, {at.gate, at.up});
    assert_adjacent(block, {at.gate_bias, at.up_bias});
    add_layer(std::make_unique<DecoderLayer>(config, block, at, std::move(lora)));
  }
  // The head: lm_head, or embed_tokens when tied; (V, C), the vocabulary not padded.
  const int head = config.tie_word_embeddings ? kEmbed : kLmHead;
  add_layer(std::make_unique<zoo::LmHeadLayer>(
      root, zoo::FinalNorm::rms_norm(kNorm, config.rms_norm_eps), head, config.hidden_size,
      config.vocab_size, config.vocab_size, logits_chunking()));
}

Llama::~Llama() = default;

double Llama::forward_flops_per_token(int64_t T) const {
  // 2 FLOPs per parameter per token for the matmuls (the head counted through its weight; an
  // untied embed_tokens is a lookup, not a product), plus attention's two products per layer,
  // QKᵀ and att·V, 2·2·T·(NH·hd) per token.
  double params = parameter_count();
  if (!config_.tie_word_embeddings)
    params -= static_cast<double>(config_.vocab_size) * config_.hidden_size;
  const double q_width =
      static_cast<double>(config_.num_attention_heads) * config_.resolved_head_dim();
  // A sliding window reads at most its `sliding_window` keys.
  const double keys = config_.sliding_window > 0 && config_.sliding_window < T
                          ? static_cast<double>(config_.sliding_window)
                          : static_cast<double>(T);
  return 2.0 * params + 4.0 * config_.num_hidden_layers * keys * q_width;
}

}  // namespace zt
