// TableUnit: a Unit made from a parameter table (ParamSpec per tensor, placed by a FlatLayout)
// and the views bound into the engine's flat buffers; plus the ParamSpec helpers the zoo's
// tables share. Shared by the zoo's models (gpt2.cpp, llama.cpp). Holds no tensor memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model.h"

namespace zt::zoo {

class TableUnit final : public Unit {
 public:
  TableUnit(std::string name, std::vector<ParamSpec> specs, bool frozen = false)
      : name_(std::move(name)), layout_(std::move(specs)), frozen_(frozen) {
    params_.assign(layout_.entries().size(), Operand());
    grads_.assign(layout_.entries().size(), Operand());
    fresh_.assign(layout_.entries().size(), 0);
  }
  const std::string& name() const override { return name_; }
  const FlatLayout& layout() const override { return layout_; }
  void bind(Operand params, Operand grads) override {
    auto entries = layout_.entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      params_[i] = params.at(entries[i].offset);
      grads_[i] = grads ? grads.at(entries[i].offset) : Operand();
    }
  }
  void start_fresh_grads() override {
    auto entries = layout_.entries();
    for (size_t i = 0; i < entries.size(); ++i) fresh_[i] = entries[i].spec.grad_written_whole;
  }
  void end_fresh_grads() override { std::fill(fresh_.begin(), fresh_.end(), 0); }
  bool grad_fresh(size_t i) const override { return fresh_.at(i) != 0; }
  bool frozen() const override { return frozen_; }
  ConstOperand param(int i) const { return params_[i]; }
  // Tensor i's gradient view, for a kernel to write: fresh the first time of a step when the
  // tensor starts so (start_fresh_grads), the view handed out then being the one that writes.
  Operand grad(int i) const {
    Operand g = grads_[i];
    if (g && fresh_[i]) {
      g.fresh = true;
      fresh_[i] = 0;
    }
    return g;
  }

 private:
  std::string name_;
  FlatLayout layout_;
  bool frozen_;
  std::vector<Operand> params_;
  std::vector<Operand> grads_;
  mutable std::vector<uint8_t> fresh_;  // per tensor: not yet handed out since start_fresh_grads
};

// A layer's parameter table, its tensors in one unit or split over two: the trainable tensors in
// one, the frozen ones (zt.freeze, a LoRA base) in another (DecoderModel::add_table). Tensor i
// keeps its table index wherever it lives; a frozen tensor's gradient view is null, so the
// kernels skip it.
class Table {
 public:
  // parts: the units holding the table (trainable first), with their model indices; where[i]:
  // (part, index in that part's table) of tensor i.
  Table(std::vector<TableUnit*> parts, std::vector<int> unit_indices,
        std::vector<std::pair<int, int>> where)
      : parts_(std::move(parts)), units_(std::move(unit_indices)), where_(std::move(where)) {}
  ConstOperand param(int i) const { return part(i).param(index(i)); }
  Operand grad(int i) const { return part(i).grad(index(i)); }
  const FlatLayout::Entry& entry(int i) const {
    return part(i).layout().entries()[static_cast<size_t>(index(i))];
  }
  const std::string& name(int i) const { return entry(i).spec.name; }
  bool frozen(int i) const { return part(i).frozen(); }
  // Tensor b follows tensor a in one flat buffer with no padding between them.
  bool adjacent(int a, int b) const {
    return where_[a].first == where_[b].first &&
           entry(a).offset + entry(a).numel == entry(b).offset;
  }
  // The units, trainable first: Layer::unit_indices of a layer computing with this table.
  const std::vector<int>& unit_indices() const { return units_; }
  size_t size() const { return where_.size(); }

 private:
  const TableUnit& part(int i) const { return *parts_[static_cast<size_t>(where_[i].first)]; }
  int index(int i) const { return where_[i].second; }
  std::vector<TableUnit*> parts_;
  std::vector<int> units_;
  std::vector<std::pair<int, int>> where_;
};

// A matrix or embedding table: decayed, normal init of `std`.
inline ParamSpec weight_spec(std::string name, std::vector<int64_t> shape, float std) {
  return ParamSpec{std::move(name), std::move(shape), Decay::kYes,
                   ParamInit{ParamInit::Kind::kNormal, std}, -1};
}
// A bias: not decayed, zeros.
inline ParamSpec bias_spec(std::string name, int64_t n) {
  return ParamSpec{std::move(name), {n}, Decay::kNo, ParamInit{ParamInit::Kind::kZeros}, -1};
}
// A norm's scale: not decayed, ones.
inline ParamSpec norm_weight_spec(std::string name, int64_t n) {
  return ParamSpec{std::move(name), {n}, Decay::kNo, ParamInit{ParamInit::Kind::kOnes}, -1};
}

}  // namespace zt::zoo
