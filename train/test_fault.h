// Test-only fault injection for zt-train, read from the environment only tests set:
//   ZT_TEST_FAULT="point=P,rank=R[,step=S][,unit=U]"
// makes rank R throw a zt::Error (kSystem, "injected fault ...") at point P of step S (default 1):
//   forward, backward, optimizer  inside that training step (Engine's fault hook; backward fires
//                                 after the unit's reduction was launched, so with
//                                 zero_optimization.overlap_comm it is still in flight)
//   evaluation                    in the evaluation after step S (0: the one before training)
//   save                          in the weights save at the end, before that rank's part of
//                                 gathering unit U (step ignored)
//   checkpoint                    in the checkpoint save after step S, before that rank writes
//                                 unit U's records into its shard file (the file half written)
//   commit                        in the checkpoint save after step S, once every rank's shard
//                                 file is complete, before rank R (0: it commits) goes on
// at unit U (default: the first unit the point reaches). With ",action=kill" the rank kills
// itself with SIGKILL there instead of throwing (tests/e2e/checkpoint_resume.sh: a save that
// dies at any point leaves the previous checkpoint as the latest). tests/e2e/fault_injection.sh
// drives it to show that an error on one rank at any point ends every rank within seconds.
//   ZT_TEST_WRITE_LIMIT=BYTES
// makes metrics.jsonl fail with ENOSPC after BYTES bytes, for machines where a small tmpfs cannot
// be mounted (tests/e2e/disk_full.sh). Nothing here is read unless the variable is set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "zero/engine.h"

namespace zt {

struct TestFault {
  enum class Point { kForward, kBackward, kOptimizer, kEvaluation, kSave, kCheckpoint, kCommit };
  enum class Action { kThrow, kKill };
  Point point = Point::kForward;
  int rank = 0;
  int64_t step = 1;
  int unit = -1;  // -1: any
  Action action = Action::kThrow;

  // The ZT_TEST_FAULT of this process, or none when unset. A malformed value is kInput naming
  // the variable.
  static std::optional<TestFault> from_environment();

  // True when this rank's fault is due at (point, step, unit).
  bool due(Point at, int my_rank, int64_t at_step, int at_unit) const;
  // Throws the injected error, naming the point, unit, step and rank (kKill: SIGKILL, no return).
  [[noreturn]] void fire(const std::string& unit_name, int64_t at_step, int my_rank) const;
};

const char* test_fault_point_name(TestFault::Point point);  // "forward", ..., "save"

// ZT_TEST_WRITE_LIMIT, or -1 when unset. A malformed value is kInput.
int64_t test_write_limit_from_environment();

}  // namespace zt
