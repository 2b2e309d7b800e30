// Optimizer: dispatch of Kernels::adamw / sgd over decay runs.
#include "zero/optimizer.h"

#include <algorithm>

#include "runtime/status.h"

namespace zt {

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
                     std::vector<int64_t> range_sizes)
    : device_(device), kernels_(kernels), options_(options), ranges_(std::move(ranges)) {
  ZT_ASSERT(ranges_.size() == range_sizes.size(), "{} vs {}", ranges_.size(), range_sizes.size());
  const bool adam = options_.type != OptimizerOptions::Type::kSgd;
  const bool momentum = !adam && options_.momentum != 0.0f;
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
                               int64_t step) {
  // Elements [lo, hi) of the range (relative to its start) copied into `working` as they are:
  // padding between and after tensors, which no update touches.
  auto copy_unchanged = [&](int64_t lo, int64_t hi) {
    if (working && lo < hi)
      kernels_.cast(working.at(lo - begin).data, working.dtype, master + (lo - begin),
                    DType::kF32, hi - lo);
  };
  if (options_.type == OptimizerOptions::Type::kSgd) {
    step_part(range, begin, end, master, grads, lr, grad_scale, step);
    copy_unchanged(begin, end);
    return;
  }
  float* m = first_[range].as<float>();
  float* v = second_[range].as<float>();
  int64_t done = begin;  // elements before it are in `working`
  for (const DecayRange& r : ranges_[range]) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo >= hi) continue;
    copy_unchanged(done, lo);
    cpu_adam_.step(master + (lo - begin), grads.at(lo - begin), m + lo, v + lo,
                   working ? working.at(lo - begin) : Operand(), hi - lo,
                   adam_args(r, lr, grad_scale, step));
    done = hi;
  }
  copy_unchanged(done, end);
}

void Optimizer::step_part(int range, int64_t begin, int64_t end, float* params,
                          ConstOperand grads, float lr, float grad_scale, int64_t step) {
  Kernels& k = kernels_;
  float* m = first_[range].as<float>();
  float* v = second_[range].as<float>();
  for (const DecayRange& r : ranges_[range]) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo >= hi) continue;
    const int64_t n = hi - lo;
    float* p = params + (lo - begin);
    const ConstOperand g = grads.at(lo - begin);
    const float wd = r.decay == Decay::kYes ? options_.weight_decay : 0.0f;
    if (options_.type == OptimizerOptions::Type::kSgd) {
      SgdArgs a{lr, options_.momentum, wd, grad_scale};
      k.sgd(p, g, m ? m + lo : nullptr, n, a);
    } else {
      k.adamw(p, g, m + lo, v + lo, n, adam_args(r, lr, grad_scale, step));
    }
  }
}

std::vector<float*> Optimizer::state(int range) {
  std::vector<float*> out;
  if (first_[range]) out.push_back(first_[range].as<float>());
  if (second_[range]) out.push_back(second_[range].as<float>());
  return out;
}

}  // namespace zt
