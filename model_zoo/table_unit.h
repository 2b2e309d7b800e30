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
  TableUnit(std::string name, std::vector<ParamSpec> specs)
      : name_(std::move(name)), layout_(std::move(specs)) {
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
  std::vector<Operand> params_;
  std::vector<Operand> grads_;
  mutable std::vector<uint8_t> fresh_;  // per tensor: not yet handed out since start_fresh_grads
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
