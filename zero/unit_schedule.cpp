// UnitSchedule: steps, next uses and reuse distances computed once; prefetch and keep answers.
#include "zero/unit_schedule.h"

#include <algorithm>

#include "runtime/status.h"

namespace zt {

UnitSchedule::UnitSchedule(std::span<Layer* const> layers, PassMode mode,
                           std::vector<int64_t> gathered_elements, GatherLimits limits,
                           size_t first_backward_layer)
    : first_backward_(std::min(first_backward_layer, layers.size())), forward_(layers.size()),
      backward_(layers.size()), gathered_elements_(std::move(gathered_elements)), limits_(limits) {
  auto add_layer = [&](size_t l, bool backward) {
    Steps& group = (backward ? backward_ : forward_)[l];
    group.begin = steps_.size();
    const std::vector<int> units = layers[l]->unit_indices();
    ZT_ASSERT(!units.empty() && units.front() == layers[l]->unit_index(),
              "layer {}: unit_indices() must start with unit_index()", l);
    for (size_t i = 0; i < units.size(); ++i) {
      ZT_ASSERT(std::find(units.begin(), units.begin() + i, units[i]) == units.begin() + i,
                "layer {} names unit {} twice", l, units[i]);
      steps_.push_back({l, backward, units[i]});
      group_begin_.push_back(group.begin);
    }
    group.end = steps_.size();
  };
  for (size_t l = 0; l < layers.size(); ++l) add_layer(l, false);
  if (mode == PassMode::kTraining)
    for (size_t l = layers.size(); l-- > first_backward_;) add_layer(l, true);
  for (const Step& s : steps_)
    ZT_ASSERT(s.unit >= 0 && static_cast<size_t>(s.unit) < gathered_elements_.size(),
              "layer {} uses unit {} of {}", s.layer, s.unit, gathered_elements_.size());
  next_use_.assign(steps_.size(), kNever);
  reuse_distance_.assign(steps_.size(), 0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    std::vector<bool> counted(gathered_elements_.size(), false);
    int64_t distance = 0;
    for (size_t j = i + 1; j < steps_.size(); ++j) {
      const int u = steps_[j].unit;
      if (u == steps_[i].unit) {
        next_use_[i] = j;
        break;
      }
      if (!counted[u]) distance += gathered_elements_[u];
      counted[u] = true;
    }
    reuse_distance_[i] = distance;
  }
}

size_t first_backward_layer(Model& model) {
  auto layers = model.layers();
  auto units = model.units();
  for (size_t l = 0; l < layers.size(); ++l)
    for (int u : layers[l]->unit_indices())
      if (!units[static_cast<size_t>(u)]->frozen()) return l;
  return layers.size();
}

size_t UnitSchedule::next_use_of(int unit, size_t from) const {
  for (size_t j = from; j < steps_.size(); ++j)
    if (steps_[j].unit == unit) return j;
  return kNever;
}

std::vector<int> UnitSchedule::prefetch(size_t i, int64_t live,
                                        const std::function<bool(int)>& held) const {
  std::vector<int> start;
  int64_t budget = limits_.prefetch_elements;
  std::vector<bool> seen(gathered_elements_.size(), false);
  seen[steps_[i].unit] = true;
  for (size_t j = i + 1; j < steps_.size(); ++j) {
    const int u = steps_[j].unit;
    const int64_t n = gathered_elements_[u];
    if (seen[u] || n == 0) continue;
    seen[u] = true;
    if (n > budget) break;
    budget -= n;
    if (held(u)) continue;
    if (live > limits_.max_live_elements - n) break;
    live += n;
    start.push_back(u);
  }
  return start;
}

bool UnitSchedule::keep_after(size_t i, int64_t live) const {
  const size_t next = next_use_[i];
  if (next == kNever) return false;
  if (next == i + 1) return true;
  return reuse_distance_[i] <= limits_.max_reuse_distance && live <= limits_.max_live_elements;
}

int64_t UnitSchedule::live_bound(int64_t largest) const {
  // Besides the unit in use (at most `largest`), units are gathered only while the total stays
  // within max_live: prefetched ones within the prefetch window, kept ones (reuse) up to max_live.
  const int64_t others = limits_.max_reuse_distance > 0
                             ? limits_.max_live_elements
                             : std::min(limits_.prefetch_elements, limits_.max_live_elements);
  return others > std::numeric_limits<int64_t>::max() - largest
             ? std::numeric_limits<int64_t>::max()
             : largest + others;
}

}  // namespace zt
