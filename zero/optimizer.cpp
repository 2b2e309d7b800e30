// Optimizer: dispatch of Kernels::adamw / sgd over decay runs.
#include "zero/optimizer.h"

#include <algorithm>

#include "runtime/status.h"

namespace zt {

std::vector<std::string> optimizer_state_names(const OptimizerOptions& options) {
  if (options.type != OptimizerOptions::Type::kSgd) return {"exp_avg", "exp_avg_sq"};
  if (options.momentum != 0.0f) return {"momentum"};
  return {};
}

std::vector<DecayRange> decay_ranges(const FlatLayout& layout, int64_t begin, int64_t end) {
  std::vector<DecayRange> out;
  for (const auto& e : layout.entries()) {
    int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel);
    if (lo >= hi) continue;
    if (!out.empty() && out.back().end == lo - begin && out.back().decay == e.spec.decay)
      out.back().end = hi - begin;
    else
      out.push_back(DecayRange{lo - begin, hi - begin, e.spec.decay});
  }
  return out;
}

Optimizer::Optimizer(Device& device, Kernels& kernels, const OptimizerOptions& options,
                     std::vector<std::vector<DecayRange>> ranges, std::vector<int64_t> range_sizes,
                     bool state_elsewhere)
    : device_(device), kernels_(kernels), options_(options), ranges_(std::move(ranges)) {
  ZT_ASSERT(ranges_.size() == range_sizes.size(), "{} vs {}", ranges_.size(), range_sizes.size());
  const bool adam = options_.type != OptimizerOptions::Type::kSgd;
  const bool momentum = !adam && options_.momentum != 0.0f;
  if (state_elsewhere) {
    first_.resize(range_sizes.size());
    second_.resize(range_sizes.size());
    return;
  }
  for (int64_t n : range_sizes) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    first_.push_back(adam || momentum ? device_.alloc_zeroed(bytes, MemCategory::kOptimizer)
                                      : Buffer());
    second_.push_back(adam ? device_.alloc_zeroed(bytes, MemCategory::kOptimizer) : Buffer());
  }
}

AdamWArgs Optimizer::adam_args(const DecayRange& r, float lr, float grad_scale,
                               int64_t step) const {
  const float wd = r.decay == Decay::kYes ? options_.weight_decay : 0.0f;
  return AdamWArgs{lr,
                   options_.beta1,
                   options_.beta2,
                   options_.eps,
                   wd,
                   step,
                   grad_scale,
                   options_.type == OptimizerOptions::Type::kAdamW,
                   options_.bias_correction};
}

void Optimizer::step_part_host(int range, int64_t begin, int64_t end, float* master,
                               ConstOperand grads, Operand working, float lr, float grad_scale,
                               int64_t step, float* const* state) {
  update(range, begin, end, master, grads, working, lr, grad_scale, step, state, true);
}

void Optimizer::step_part(int range, int64_t begin, int64_t end, float* params, ConstOperand grads,
                          float lr, float grad_scale, int64_t step, Operand working) {
  update(range, begin, end, params, grads, working, lr, grad_scale, step, nullptr, false);
}

void Optimizer::update(int range, int64_t begin, int64_t end, float* master, ConstOperand grads,
                       Operand working, float lr, float grad_scale, int64_t step,
                       float* const* state, bool host) {
  // Elements [lo, hi) of the range (relative to its start) copied into `working` as they are:
  // padding between and after tensors, which no update touches (everything, after SGD).
  auto copy_unchanged = [&](int64_t lo, int64_t hi) {
    if (working && lo < hi)
      kernels_.cast(working.at(lo - begin).data, working.dtype, master + (lo - begin), DType::kF32,
                    hi - lo);
  };
  // State tensor k at element lo of the range, whoever holds it.
  const size_t kinds = state_names().size();
  auto state_at = [&](size_t k, int64_t lo) -> float* {
    if (k >= kinds) return nullptr;
    if (state) return state[k] + (lo - begin);
    float* own = (k == 0 ? first_ : second_)[range].as<float>();
    return own ? own + lo : nullptr;
  };
  if (options_.type == OptimizerOptions::Type::kSgd) {
    for (const DecayRange& r : ranges_[range]) {
      const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
      if (lo >= hi) continue;
      const float wd = r.decay == Decay::kYes ? options_.weight_decay : 0.0f;
      kernels_.sgd(master + (lo - begin), grads.at(lo - begin), state_at(0, lo), hi - lo,
                   SgdArgs{lr, options_.momentum, wd, grad_scale});
    }
    copy_unchanged(begin, end);
    return;
  }
  int64_t done = begin;  // elements before it are in `working`
  for (const DecayRange& r : ranges_[range]) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo >= hi) continue;
    copy_unchanged(done, lo);
    float* p = master + (lo - begin);
    const ConstOperand g = grads.at(lo - begin);
    const Operand w = working ? working.at(lo - begin) : Operand();
    const AdamWArgs args = adam_args(r, lr, grad_scale, step);
    if (host)
      cpu_adam_.step(p, g, state_at(0, lo), state_at(1, lo), w, hi - lo, args);
    else
      kernels_.adamw(p, g, state_at(0, lo), state_at(1, lo), hi - lo, args, w);
    done = hi;
  }
  copy_unchanged(done, end);
}

std::vector<float*> Optimizer::state(int range) {
  std::vector<float*> out;
  if (first_[range]) out.push_back(first_[range].as<float>());
  if (second_[range]) out.push_back(second_[range].as<float>());
  return out;
}

}  // namespace zt
