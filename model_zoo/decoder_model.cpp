// DecoderModel and EmbeddingLayer (decoder_model.h).
#include "model_zoo/decoder_model.h"

#include "model_zoo/lora.h"
#include "model_zoo/table_unit.h"

namespace zt::zoo {

DecoderModel::DecoderModel() = default;
DecoderModel::~DecoderModel() = default;

Table& DecoderModel::add_table(const std::string& name, std::vector<ParamSpec> specs,
                               const Tuning& tuning) {
  auto frozen = [&](const ParamSpec& spec) { return frozen_by(tuning, spec); };
  std::vector<ParamSpec> parts[2];  // trainable, frozen
  std::vector<std::pair<int, int>> where;
  for (ParamSpec& spec : specs) {
    const int part = frozen(spec) ? 1 : 0;
    where.emplace_back(part, static_cast<int>(parts[part].size()));
    parts[part].push_back(std::move(spec));
  }
  std::vector<TableUnit*> units;
  std::vector<int> indices;
  int slot[2] = {-1, -1};
  const bool split = !parts[0].empty() && !parts[1].empty();
  for (int part : {0, 1}) {
    if (parts[part].empty()) continue;
    const std::string unit_name = part == 1 && split ? name + ".frozen" : name;
    auto unit = std::make_unique<TableUnit>(unit_name, std::move(parts[part]), part == 1);
    slot[part] = static_cast<int>(units.size());
    units.push_back(unit.get());
    indices.push_back(static_cast<int>(unit_ptrs_.size()));
    unit_ptrs_.push_back(unit.get());
    units_.push_back(std::move(unit));
  }
  for (auto& [part, index] : where) part = slot[part];
  tables_.push_back(
      std::make_unique<Table>(std::move(units), std::move(indices), std::move(where)));
  return *tables_.back();
}

void DecoderModel::add_layer(std::unique_ptr<Layer> layer) {
  layer_ptrs_.push_back(layer.get());
  layers_.push_back(std::move(layer));
}

double DecoderModel::parameter_count() const {
  double params = 0;
  for (const Unit* u : unit_ptrs_) params += static_cast<double>(u->layout().param_count());
  return params;
}

int EmbeddingLayer::unit_index() const { return root_.unit_indices().front(); }
std::vector<int> EmbeddingLayer::unit_indices() const { return root_.unit_indices(); }

void EmbeddingLayer::forward(Kernels& k, const LayerIO& io, ActivationStore&) {
  const Batch& b = *io.batch;
  const ConstOperand positions_table =
      positions_table_ < 0 ? ConstOperand() : root_.param(positions_table_);
  k.embedding_forward(io.output, b.inputs, root_.param(table_), positions_table, b.B, b.T, C_,
                      b.positions);
}

void EmbeddingLayer::decode(Kernels& k, const DecodeIO& io, ActivationStore&) {
  const ConstOperand positions_table =
      positions_table_ < 0 ? ConstOperand() : root_.param(positions_table_);
  k.embedding_forward(io.output, io.tokens, root_.param(table_), positions_table, io.B, io.T, C_,
                      io.positions);
}

void EmbeddingLayer::backward(Kernels& k, const LayerIO& io, ActivationStore&, ActivationStore&) {
  const Batch& b = *io.batch;
  const Operand d_positions_table = positions_table_ < 0 ? Operand() : root_.grad(positions_table_);
  k.embedding_backward(root_.grad(table_), d_positions_table, io.d_output, b.inputs, b.B, b.T, C_,
                       b.positions);
}

}  // namespace zt::zoo
