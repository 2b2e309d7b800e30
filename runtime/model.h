// What a model offers the engine (zero/): units (parameter groups, ZeRO-3's granularity) and
// layers (the forward order of compute, each using one unit's parameters). The engine owns
// every buffer: parameters and gradients of each unit (bound into the unit as views), the
// hidden states between layers, and each layer's ActivationStore. A model holds no memory of
// its own beyond its tables, so the engine decides placement, sharding and recomputation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/activation_store.h"
#include "runtime/device.h"
#include "runtime/flat_layout.h"
#include "runtime/status.h"

namespace zt {

// A target that is not trained on (a prompt token of instruction data, padding): its loss is
// 0, its logits' gradient is 0, and it is not counted in the mean loss. Any negative target
// means this; the data loader writes kIgnoreTarget.
inline constexpr int32_t kIgnoreTarget = -1;

// A micro-batch of token ids: inputs and next-token targets, each (B, T).
// `positions`, when set, packs several documents into a row: positions[b*T + t] is token t's
// position in its document (0 at a document's first token and at every row's first token, else
// the previous token's plus one). Attention then stays within a document (query t reads keys
// t - positions[t] .. t) and position embeddings (GPT-2's wpe, Llama's RoPE) use it. Null: one
// document per row, positions 0..T-1 (and bitwise what the kernels computed before positions).
struct Batch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;  // targets < 0: ignored (kIgnoreTarget)
  int64_t B = 0;
  int64_t T = 0;
  const int32_t* positions = nullptr;
};

// A group of parameters gathered, released and reduced together; one flat buffer.
class Unit {
 public:
  virtual ~Unit() = default;
  virtual const std::string& name() const = 0;
  virtual const FlatLayout& layout() const = 0;
  // Points the unit's parameter and gradient views into flat buffers of layout().numel()
  // elements, each in its own dtype (the working params' and the produced gradients'), which
  // the views pass to the kernels as they are (grads may be null for forward-only use).
  virtual void bind(Operand params, Operand grads) = 0;
  // The gradient buffer (this and later bindings) holds no values yet in the tensors whose
  // spec has grad_written_whole, and zeros elsewhere: until handed to a kernel, each such
  // tensor's gradient view is fresh (kernels.h), so its first kernel writes it. A view taken
  // must reach a kernel that writes it (matmul_backward's dweight); one never taken in the
  // pass is zeroed by the engine when the unit's gradient is complete (grad_fresh), which then
  // ends the fresh state (end_fresh_grads).
  virtual void start_fresh_grads() = 0;
  virtual void end_fresh_grads() = 0;
  // Whether tensor i (layout order) is still fresh.
  virtual bool grad_fresh(size_t i) const = 0;
  // A frozen unit trains nothing (zt.freeze, a LoRA base): the engine keeps no gradient, master
  // or optimizer state for it and binds its gradients null, so no kernel computes them.
  virtual bool frozen() const { return false; }
};

// What a layer reads and writes. Hidden states and their gradients are (B, T, C) on the device,
// in the pass's activation dtype (the working dtype: kernels.h, Precision).
struct LayerIO {
  const Batch* batch = nullptr;
  ConstOperand input;  // previous layer's output; null for the first layer
  Operand output;      // this layer's output; null for the last layer
  // Backward: gradient of the loss w.r.t. output (read) and input (accumulated into).
  ConstOperand d_output;
  Operand d_input;
  // Last layer only. Forward writes per-position losses (B*T). When training, dloss is set: the
  // last layer also computes its gradients in the same pass with d loss_i = *dloss for every
  // position (the mean's 1/(B*T*accumulation) times any loss scale), so it never stores logits.
  // Evaluation: nullopt.
  float* losses = nullptr;
  std::optional<float> dloss;
  // A training pass (dropout applies: a LoRA adapter's), and the pass's seed, from which every
  // random mask of the pass derives (the same in a checkpointed layer's recompute).
  bool training = false;
  uint64_t seed = 0;
};

// The heads of an attention call (Kernels::attention_record's arguments but the batch's).
struct AttentionHeads {
  int64_t NH = 0, NKV = 0, hd = 0;
  int64_t window = 0;  // sliding window; 0: plain causal
};

// One buffer a layer's forward puts in its ActivationStore: `elements` values, allocated with
// alloc_acts (in the activation dtype) or alloc_stats (`stats`: fp32).
// `attention`: the buffer is att, allocated with alloc_attention as attention_record answers for
// these heads; `elements` and `stats` then declare the probabilities (B·NH·T·T, packable), what
// every CPU table keeps, and the memory planner asks the job's device rule for its own answer.
struct ActivationBuffer {
  int64_t elements = 0;
  bool stats = false;
  std::optional<AttentionHeads> attention = std::nullopt;
};

// What a layer allocates under MemCategory::kActivations for a micro-batch of (B, T), as its
// calls allocate it, for the memory planner (zero/memory_model.h), which replays the engine's
// pass over these declarations:
//   saved      forward's buffers in its ActivationStore, in allocation order (what the layer
//              keeps for its backward, or drops when checkpointed)
//   transient  activation elements forward allocates after `saved` and frees before it returns
//   scratch    activation elements backward allocates in its scratch store (freed by the
//              engine after)
struct LayerActivations {
  std::vector<ActivationBuffer> saved;
  int64_t transient = 0;
  int64_t scratch = 0;
};

// What a layer reads and writes when generating (generate/generator.h): a forward over the
// T new tokens of each of B rows that reads and extends a key/value cache instead of keeping
// activations for a backward. Every row has `past` tokens in the cache before the call; the new
// tokens are at positions past .. past + T - 1. All pointers are device memory.
struct DecodeIO {
  const int32_t* tokens = nullptr;     // (B, T) the new token ids, already checked (< V)
  const int32_t* positions = nullptr;  // (B, T) their positions, past + t
  int64_t B = 0, T = 0;
  int64_t past = 0;      // tokens already in the cache, each row
  int64_t capacity = 0;  // cache rows per batch row (past + T <= capacity)
  ConstOperand input;    // (B, T, C) previous layer's output; null for the first layer
  Operand output;        // (B, T, C) this layer's output; null for the last layer
  // This layer's cache, each (B, capacity, kv_width()): keys and values of positions
  // 0 .. past - 1 on entry, 0 .. past + T - 1 on return. Null for a layer that keeps none.
  Operand k_cache;
  Operand v_cache;
  float* logits = nullptr;  // last layer: (B, V) fp32, the logits of each row's last new token
};

// One step of the forward order: computes with its unit's parameters, and with those of any
// other units it names (a LoRA block: its frozen base weights and its adapters).
class Layer {
 public:
  virtual ~Layer() = default;
  virtual int unit_index() const = 0;
  // Every unit the layer computes with, unit_index() first, each once: all are in place while
  // it computes (stage 3 gathers each).
  virtual std::vector<int> unit_indices() const { return {unit_index()}; }
  // Checkpointable layers may drop their activations after forward and recompute them.
  virtual bool checkpointable() const = 0;
  virtual void forward(Kernels& k, const LayerIO& io, ActivationStore& acts) = 0;
  // `scratch` is for temporaries of this call; the engine releases it afterwards.
  virtual void backward(Kernels& k, const LayerIO& io, ActivationStore& acts,
                        ActivationStore& scratch) = 0;
  // The activations forward (training: `training`, the last layer's gradient computed in the
  // same pass) and backward allocate for a micro-batch of (B, T). nullopt: the layer does not
  // say, and the planner reports activations as unknown. GPT-2's layers declare theirs;
  // tests/mpi/memory_model_test.cpp holds the replay against the engine's tracker.
  virtual std::optional<LayerActivations> activations(int64_t B, int64_t T, bool training) const {
    (void)B, (void)T, (void)training;
    return std::nullopt;
  }
  // Generation. kv_width: the elements per token of this layer's key cache (and of its value
  // cache); 0 when it keeps none. decode: the forward of DecodeIO's new tokens, the same
  // function of the sequence as forward's, temporaries in `scratch` (released by the caller).
  // A layer that cannot generate keeps these defaults: decode throws kInput naming the layer.
  virtual int64_t kv_width() const { return 0; }
  virtual void decode(Kernels& k, const DecodeIO& io, ActivationStore& scratch) {
    (void)k, (void)io, (void)scratch;
    throw_input("this model's layers cannot generate (no decode)");
  }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::span<Unit* const> units() = 0;
  virtual std::span<Layer* const> layers() = 0;  // forward order
  virtual int64_t hidden_size() const = 0;       // C of the (B, T, C) hidden states
  virtual int64_t max_seq_len() const = 0;
  virtual int64_t vocab_size() const = 0;  // token ids must be below this
  // Forward FLOPs per token at sequence length T (matmuls + attention), for MFU figures.
  virtual double forward_flops_per_token(int64_t T) const = 0;
  // The device's Device::chunk_budget_bytes, for layers that compute in chunks (an LM head's
  // logits). the trainer (train/) and the planner pass it before the engine or the planner asks for
  // activations; without it a model keeps the CPU's budget. A model with no chunked layer ignores
  // it.
  virtual void set_chunk_budget_bytes(int64_t bytes) { (void)bytes; }
};

}  // namespace zt
