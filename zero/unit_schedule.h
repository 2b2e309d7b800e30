// UnitSchedule: the order in which one pass uses the units (training: every layer forward, then
// every layer backward in reverse, down to the first layer that trains a unit; evaluation:
// forward only) and ZeRO-3's answers about it:
// which units to gather ahead of a step (stage3_prefetch_bucket_size, bounded by
// stage3_max_live_parameters) and whether a unit stays gathered after a step because it is
// used again soon (stage3_max_reuse_distance). Pure arithmetic over the model's layer -> unit
// table and the units' sizes: no memory, no communication; the engine acts on the answers.
// A layer that computes with several units (a LoRA block: its frozen base and its adapters) is
// one step per unit, in Layer::unit_indices() order, consecutive: the engine makes each of them
// full before the layer computes and ends their use after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "runtime/model.h"

namespace zt {

// What a pass computes: training runs forward then backward (the loss layer produces its
// gradient in forward); evaluation runs forward only and touches no gradient.
enum class PassMode { kTraining, kEvaluation };

// Element counts, as DeepSpeed's stage3_* keys.
struct GatherLimits {
  int64_t prefetch_elements = 50'000'000;  // gathered ahead of use, beyond the unit in use
  // Gathered at once, at most: prefetches and kept units are admitted only below it. The unit
  // in use is always gathered, even alone above it.
  int64_t max_live_elements = std::numeric_limits<int64_t>::max();
  // A unit stays gathered after a step when the other units gathered before its next use total
  // at most this many elements. 0: released after every use (unless the next step uses it).
  int64_t max_reuse_distance = 0;
};

class UnitSchedule {
 public:
  struct Step {
    size_t layer;
    bool backward;
    int unit;
  };
  // The steps [begin, end) of one layer's forward or backward.
  struct Steps {
    size_t begin = 0, end = 0;
  };
  static constexpr size_t kNever = std::numeric_limits<size_t>::max();

  // gathered_elements[u]: what gathering unit u brings (its padded size), 0 when u is never
  // gathered (parameters not sharded, or persistent). Layers below first_backward_layer run no
  // backward (nothing below them trains: first_backward_layer() below).
  UnitSchedule(std::span<Layer* const> layers, PassMode mode,
               std::vector<int64_t> gathered_elements, GatherLimits limits,
               size_t first_backward_layer = 0);

  size_t size() const { return steps_.size(); }
  const Step& operator[](size_t i) const { return steps_[i]; }
  Steps forward_steps(size_t layer) const { return forward_[layer]; }
  // Empty for a layer below first_backward_layer.
  Steps backward_steps(size_t layer) const { return backward_[layer]; }
  size_t first_backward_layer() const { return first_backward_; }
  // The first step of step i's layer group (i itself for a layer of one unit).
  size_t group_begin(size_t i) const { return group_begin_[i]; }
  // The next step after i that uses step i's unit, or kNever.
  size_t next_use(size_t i) const { return next_use_[i]; }
  // The first step at or after `from` that uses `unit`, or kNever.
  size_t next_use_of(int unit, size_t from) const;
  int64_t gathered_elements(int unit) const { return gathered_elements_[unit]; }
  size_t units() const { return gathered_elements_.size(); }
  const GatherLimits& limits() const { return limits_; }

  // Units to start gathering before step i computes, in order of use: the next distinct
  // gathered units after step i's own while they fit in prefetch_elements (units `held` now,
  // gathered or in flight, count against it but are not returned) and `live` (elements held
  // now, step i's unit included) plus what is returned stays within max_live_elements.
  std::vector<int> prefetch(size_t i, int64_t live, const std::function<bool(int)>& held) const;
  // After step i: whether its unit stays gathered. True when the next step uses it; else when
  // it is used again within max_reuse_distance and `live` is within max_live_elements.
  bool keep_after(size_t i, int64_t live) const;
  // The most gathered elements the engine holds at once under these limits when no unit is
  // larger than `largest`: the unit in use plus min(prefetch, max_live) without reuse, plus
  // max_live with it.
  int64_t live_bound(int64_t largest) const;

 private:
  size_t first_backward_;
  std::vector<Step> steps_;
  std::vector<Steps> forward_, backward_;  // per layer
  std::vector<size_t> group_begin_;        // per step: the first step of its layer's group
  std::vector<size_t> next_use_;
  std::vector<int64_t> reuse_distance_;  // per step: other units' elements until next use
  std::vector<int64_t> gathered_elements_;
  GatherLimits limits_;
};

// The first layer whose backward a training pass needs: the first that computes with a unit that
// is not frozen (its gradient, and every later layer's input gradient, is needed); layers before
// it run forward only. layers.size() when every unit is frozen.
size_t first_backward_layer(Model& model);

}  // namespace zt
