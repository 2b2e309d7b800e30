// DecoderModel: what the zoo's decoder language models (Gpt2, Llama) share as runtime Models:
// their units and layers, owned, in the order the engine walks them (unit 0 the root: token
// embedding, final norm and LM head; then one unit per block; layers: embedding, blocks, head),
// and the LM head's logits chunking (logits_chunking.h). A model adds its units and layers in
// its constructor. Also their first layer, EmbeddingLayer; their last is lm_head.h's.
// Holds no tensor memory: the engine binds flat buffers into the units.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model_zoo/logits_chunking.h"
#include "runtime/model.h"
#include "runtime/tuning.h"

namespace zt::zoo {

class Table;
class TableUnit;

class DecoderModel : public Model {
 public:
  ~DecoderModel() override;
  std::span<Unit* const> units() override { return unit_ptrs_; }
  std::span<Layer* const> layers() override { return layer_ptrs_; }
  // Rows of logits computed at once by the head (bounds the head's activation memory).
  void set_logits_chunk_rows(int64_t rows) { logits_chunking_.rows = rows; }
  void set_chunk_budget_bytes(int64_t bytes) override { logits_chunking_.budget_bytes = bytes; }

 protected:
  DecoderModel();
  // The unit or units of a table named `name` (a block's "model.layers.3"): the tensors
  // `tuning` freezes (lora.h's frozen_by) go to a frozen unit (named `name` when every tensor is
  // frozen, else `name`.frozen, after the trainable one). Returns the table the layers read; the
  // model owns it.
  Table& add_table(const std::string& name, std::vector<ParamSpec> specs, const Tuning& tuning);
  // Appends `layer` to the forward order.
  void add_layer(std::unique_ptr<Layer> layer);
  const LogitsChunking& logits_chunking() const { return logits_chunking_; }
  // The parameters of every unit, padding excluded (FlatLayout::param_count).
  double parameter_count() const;

 private:
  LogitsChunking logits_chunking_;  // the head's rows per chunk
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::unique_ptr<Table>> tables_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Unit*> unit_ptrs_;
  std::vector<Layer*> layer_ptrs_;
};

// out (B,T,C) = table[tokens] + positions_table[positions] (model.h's Batch::positions); without
// a position table (Llama's: positions enter through RoPE) out = table[tokens]. Both tables are
// tensors of the root unit.
class EmbeddingLayer final : public Layer {
 public:
  // `table`, `positions_table`: tensor indices in `root`; positions_table -1: none.
  EmbeddingLayer(const Table& root, int table, int positions_table, int64_t C)
      : root_(root), table_(table), positions_table_(positions_table), C_(C) {}
  int unit_index() const override;
  std::vector<int> unit_indices() const override;
  bool checkpointable() const override { return false; }
  void forward(Kernels& k, const LayerIO& io, ActivationStore&) override;
  void backward(Kernels& k, const LayerIO& io, ActivationStore&, ActivationStore&) override;
  std::optional<LayerActivations> activations(int64_t, int64_t, bool) const override {
    return LayerActivations{};  // keeps nothing, needs no scratch
  }
  void decode(Kernels& k, const DecodeIO& io, ActivationStore&) override;

 private:
  const Table& root_;
  int table_, positions_table_;
  int64_t C_;
};

}  // namespace zt::zoo
