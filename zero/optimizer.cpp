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
      AdamWArgs a{lr, options_.beta1, options_.beta2, options_.eps, wd, step, grad_scale,
                  options_.type == OptimizerOptions::Type::kAdamW};
      k.adamw(p, g, m + lo, v + lo, n, a);
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
