// Stage 3's residency decisions (unit_residency.h).
#include "zero/unit_residency.h"

namespace zt {

void residency_before_step(const UnitSchedule& schedule, size_t at, UnitResidency& units) {
  const int u = schedule[at].unit;
  const int count = static_cast<int>(schedule.units());
  if (units.sharded(u) && units.state(u) == ParamState::kSharded) {
    // Room under max_live for this unit: release kept units, the one used last first.
    const int64_t need = schedule.gathered_elements(u);
    while (units.live_elements() > schedule.limits().max_live_elements - need) {
      int victim = -1;
      size_t victim_next = 0;
      for (int v = 0; v < count; ++v) {
        if (v == u || units.state(v) != ParamState::kFull || !units.sharded(v)) continue;
        bool in_use = false;  // by this step's layer, made full by an earlier step of its group
        for (size_t j = schedule.group_begin(at); j < at; ++j) in_use |= schedule[j].unit == v;
        if (in_use) continue;
        const size_t next = schedule.next_use_of(v, at);
        if (victim < 0 || next > victim_next) victim = v, victim_next = next;
      }
      if (victim < 0) break;  // only gathers in flight: they finish into use soon
      units.release(victim);
    }
  }
  units.use(u);
  const auto held = [&](int v) { return units.state(v) != ParamState::kSharded; };
  for (int v : schedule.prefetch(at, units.live_elements(), held)) units.begin_gather(v);
}

void residency_after_step(const UnitSchedule& schedule, size_t at, UnitResidency& units) {
  // The next step computes with the same unit: nothing to drop.
  if (schedule.next_use(at) == at + 1) return;
  const int u = schedule[at].unit;
  units.done(u, units.sharded(u) && schedule.keep_after(at, units.live_elements()));
}

}  // namespace zt
