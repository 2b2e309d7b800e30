// Stage 3's parameter residency, decided once: before a step of a UnitSchedule, which kept units
// are released to make room under stage3_max_live_parameters, the step's unit made full and
// which units start gathering ahead of use; after the step, whether its unit stays gathered.
// The engine (zero/engine.cpp) applies the decisions to its ParamGroups; the memory planner
// (zero/memory_model.cpp) applies the same decisions to its replay of them, which is why the
// planner's byte counts equal the tracker's. Decisions only: what a release, use or gather does
// is the UnitResidency implementation's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zero/param_group.h"
#include "zero/unit_schedule.h"

namespace zt {

// The units as the decisions see them, indexed as the schedule's units.
class UnitResidency {
 public:
  virtual ParamState state(int unit) const = 0;
  // Its parameters are sharded and gathered for use (else always kFull).
  virtual bool sharded(int unit) const = 0;
  // Gathered and gathering elements held now, over all units.
  virtual int64_t live_elements() const = 0;
  virtual void release(int unit) = 0;       // kFull -> kSharded (a sharded unit)
  virtual void begin_gather(int unit) = 0;  // kSharded -> kGathering
  virtual void use(int unit) = 0;           // -> kFull, bound for compute
  // Done with the unit for now: released unless `keep_gathered`.
  virtual void done(int unit, bool keep_gathered) = 0;

 protected:
  ~UnitResidency() = default;
};

// Before step `at` computes: while the live elements leave no room for the step's unit under
// max_live_elements, the kept (full, sharded) unit whose next use is furthest away is released
// (gathers in flight are never released: they finish into use soon, nor units an earlier step of
// the same layer made full: the layer computes with them); the unit is used; then the
// schedule's prefetches for the step begin gathering.
void residency_before_step(const UnitSchedule& schedule, size_t at, UnitResidency& units);
// After step `at`: nothing when the next step uses the same unit; else the unit is done, kept
// gathered when sharded and the schedule keeps it (keep_after).
void residency_after_step(const UnitSchedule& schedule, size_t at, UnitResidency& units);

}  // namespace zt
