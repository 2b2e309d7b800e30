// LoRA adapters as PEFT defines them: a targeted linear layer y = W·x (+ bias) becomes
// y = W·x + s·B·(A·dropout(x)), A (r, in) Kaiming-uniform, B (out, r) zeros, s = alpha / r
// (alpha / √r with use_rslora), W frozen. Here an adapter's two thin GEMMs run beside the frozen
// product and add into its output's columns, so a fused product (Llama's q/k/v in one GEMM, or
// gate/up) carries one adapter per module, each writing its own columns: the same function as
// PEFT's per-module adapters. The adapters' tensors are trainable tensors of their block's table
// (named as PEFT names them inside the model: <module>.lora_A.weight, <module>.lora_B.weight),
// sharded, reduced and updated as any other. Holds no tensor memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_zoo/table_unit.h"
#include "runtime/model.h"
#include "runtime/tuning.h"

namespace zt::zoo {

// Whether `spec` is frozen under `tuning`: an adapter's tensor never; one a zt.freeze pattern
// matches; with LoRA every base tensor but the biases its `bias` key trains ("all": every bias,
// "lora_only": those of targeted modules) and the tensors of modules_to_save.
bool frozen_by(const Tuning& tuning, const ParamSpec& spec);
// Whether `tensor` (a name) belongs to one of lora.modules_to_save: trained whole beside the
// adapters, and saved with them (PEFT's modules_to_save).
bool lora_saves_whole(const LoraConfig& lora, const std::string& tensor);

// "trainable: 0.037M of 7.21M parameters (0.52%); LoRA r=4 alpha=8 dropout=0.1 on all-linear",
// for a model some of whose units are frozen; empty when every parameter trains.
std::string describe_trainable(Model& model, const Tuning& tuning);

// Whether the linear module `module` (its full name, "model.layers.0.self_attn.q_proj") is one
// of target_modules (a name it equals or ends with after a dot; "all-linear": every module).
bool lora_targets(const LoraConfig& lora, const std::string& module);

// The adapters of one product of a layer: out (N, stride) = W·x over `x` (N, in), each adapter
// adding into columns [col, col + width) of every row.
class LoraProduct {
 public:
  struct Adapter {
    int a = -1, b = -1;  // tensor indices in the layer's table: A (r, in), B (width, r)
    int64_t col = 0, width = 0;
    uint64_t salt = 0;  // its dropout mask's stream (from the module's name)
  };
  LoraProduct() = default;
  LoraProduct(const LoraConfig& lora, int64_t in, int64_t stride)
      : r_(lora.r), scale_(lora.scale()), dropout_(lora.dropout), in_(in), stride_(stride) {}

  // Appends A and B for `module` (its full name) to `specs` and adapts columns [col, col + width).
  void add(std::vector<ParamSpec>& specs, const std::string& module, int64_t col, int64_t width);
  bool empty() const { return adapters_.empty(); }
  size_t size() const { return adapters_.size(); }

  // Forward: one (N, r) buffer per adapter allocated in `acts` now (A·dropout(x), kept for the
  // backward; call it where the layer allocates its saved buffers), then forward adds the
  // adapters into `out`, temporaries in a store of their own freed before it returns. Dropout
  // only when `training`, its masks from `seed`.
  std::vector<Operand> alloc_saved(ActivationStore& acts, int64_t N) const;
  void forward(Kernels& k, const Table& t, Operand out, ConstOperand x, int64_t N,
               const std::vector<Operand>& saved, Device& device, bool training,
               uint64_t seed) const;
  // Backward, after the frozen product's: dx (N, in) += the adapters' input gradient, their A
  // and B gradients written, from d_out (N, stride); saved is acts.at(first_saved) on;
  // temporaries in `scratch`.
  void backward(Kernels& k, const Table& t, Operand dx, ConstOperand d_out, ConstOperand x,
                int64_t N, const ActivationStore& acts, size_t first_saved,
                ActivationStore& scratch, bool training, uint64_t seed) const;

  // What forward and backward allocate (model.h's LayerActivations): saved (N, r) buffers,
  // forward's largest temporary and backward's scratch, in elements.
  void declare(LayerActivations& a, int64_t N, bool training) const;

 private:
  bool drops(bool training) const { return training && dropout_ > 0.0f; }
  int r_ = 0;
  float scale_ = 1.0f, dropout_ = 0.0f;
  int64_t in_ = 0, stride_ = 0;
  std::vector<Adapter> adapters_;
};

}  // namespace zt::zoo
