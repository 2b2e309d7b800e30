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
                     std::vector<std::vector<DecayRange>> ranges,
                     std::vector<int64_t> range_sizes, bool state_elsewhere)
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
  return AdamWArgs{lr, options_.beta1, options_.beta2, options_.eps, wd, step, grad_scale,
                   options_.type == OptimizerOptions::Type::kAdamW};
}

void Optimizer::step_part_host(int range, int64_t begin, int64_t end, float* master,
                               ConstOperand grads, Operand working, float lr, float grad_scale,
                               int64_t step, float* const* state) {
  // Elements [lo, hi) of the range (relative to its start) copied into `working` as they are:
  // padding between and after tensors, which no update touches.
  auto copy_unchanged = [&](int64_t lo, int64_t hi) {
    if (working && lo < hi)
      kernels_.cast(working.at(lo - begin).data, working.dtype, master + (lo - begin),
                    DType::kF32, hi - lo);
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
    cpu_adam_.step(master + (lo - begin), grads.at(lo - begin), state_at(0, lo), state_at(1, lo),
                   working ? working.at(lo - begin) : Operand(), hi - lo,
                   adam_args(r, lr, grad_scale, step));
    done = hi;
  }
  copy_unchanged(done, end);
}


void Optimizer::step_part(int range, int64_t begin, int64_t end, float* params,
                          ConstOperand grads, float lr, float grad_scale, int64_t step,
                          Operand working) {
  Kernels& k = kernels_;
  float* m = first_[range].as<float>();
  float* v = second_[range].as<float>();
  const bool sgd = options_.type == OptimizerOptions::Type::kSgd;
  // Elements [lo, hi) (relative to the range's start) copied into `working` as they are: what
  // no update writes (padding between and after tensors; everything after SGD).
  auto cast_unchanged = [&](int64_t lo, int64_t hi) {
    if (working && lo < hi)
      k.cast(working.at(lo - begin).data, working.dtype, params + (lo - begin), DType::kF32,
             hi - lo);
  };
  int64_t done = begin;  // elements before it are in `working`
  for (const DecayRange& r : ranges_[range]) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo >= hi) continue;
    const int64_t n = hi - lo;
    float* p = params + (lo - begin);
    const ConstOperand g = grads.at(lo - begin);
    if (sgd) {
      const float wd = r.decay == Decay::kYes ? options_.weight_decay : 0.0f;
      k.sgd(p, g, m ? m + lo : nullptr, n, SgdArgs{lr, options_.momentum, wd, grad_scale});
    } else {
      cast_unchanged(done, lo);
      k.adamw(p, g, m + lo, v + lo, n, adam_args(r, lr, grad_scale, step),
              working ? working.at(lo - begin) : Operand());
      done = hi;
    }
  }
  cast_unchanged(sgd ? begin : done, end);
}

std::vector<float*> Optimizer::state(int range) {
  std::vector<float*> out;
  if (first_[range]) out.push_back(first_[range].as<float>());
  if (second_[range]) out.push_back(second_[range].as<float>());
  return out;
}

}  // namespace zt
