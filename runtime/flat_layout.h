// ParamSpec and FlatLayout: a unit's parameters as a table of (name, shape, decay, init) and the
// offsets of their views inside the unit's one flat buffer. The same layout feeds the model's
// views, the optimizer's decay ranges, shards (zero/) and the weights/checkpoint index.
// Pure arithmetic: no allocation of tensor memory, no communication.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zt {

enum class Decay : bool { kNo, kYes };  // weight decay applies to this tensor or not

struct ParamInit {
  // kUniform: uniform on [-std, std) (a LoRA A matrix: PEFT's Kaiming-uniform with a = √5 is
  // the bound 1/√fan_in).
  enum class Kind { kZeros, kOnes, kNormal, kUniform } kind = Kind::kZeros;
  float std = 0.0f;  // kNormal: the standard deviation, mean 0; kUniform: the bound
};

struct ParamSpec {
  std::string name;            // external (Hugging Face) name, e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // shape as stored here (row-major)
  Decay decay = Decay::kNo;
  ParamInit init;
  // Rows of dim 0 that hold real values; the rest is padding kept at zero and left out of
  // exported weights (the vocabulary padded to a multiple of 128). -1: all rows.
  int64_t used_rows = -1;
  // The first kernel to write this tensor's gradient in a pass writes all of it (a matmul's
  // weight gradient; the tied LM head's over wte, before the embedding adds its rows): a step
  // hands it out fresh (kernels.h, model.h's Unit) instead of zeroing it first.
  bool grad_written_whole = false;
  // A LoRA adapter's tensor (lora_A, lora_B): not part of the base model, so weights files of
  // the model neither hold nor receive it (the adapter files do: pretrained/adapter_io.h).
  bool adapter = false;

  int64_t numel() const;
  int64_t exported_rows() const { return used_rows < 0 ? shape.at(0) : used_rows; }
};

class FlatLayout {
 public:
  struct Entry {
    ParamSpec spec;
    int64_t offset = 0;  // elements from the start of the flat buffer
    int64_t numel = 0;
  };

  FlatLayout() = default;
  // Tensors are placed in table order, each offset rounded up to `align` elements (64 bytes of
  // fp32 by default) so vectorised kernels start on cache lines.
  explicit FlatLayout(std::vector<ParamSpec> specs, int64_t align = 16);

  std::span<const Entry> entries() const { return entries_; }
  const Entry* find(const std::string& name) const;  // nullptr if absent
  int64_t numel() const { return numel_; }           // padded total, a multiple of `align`
  int64_t param_count() const;                       // real parameters, padding excluded

 private:
  std::vector<Entry> entries_;
  int64_t numel_ = 0;
};

}  // namespace zt
