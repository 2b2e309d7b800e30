// DecoderModel and EmbeddingLayer (decoder_model.h).
#include "model_zoo/decoder_model.h"

#include "model_zoo/table_unit.h"

namespace zt::zoo {

DecoderModel::DecoderModel() = default;
DecoderModel::~DecoderModel() = default;

TableUnit& DecoderModel::add_unit(std::unique_ptr<TableUnit> unit) {
  TableUnit& added = *unit;
  unit_ptrs_.push_back(unit.get());
  units_.push_back(std::move(unit));
  return added;
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
