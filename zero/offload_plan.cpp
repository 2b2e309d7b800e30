// The one rule on offload combinations (see offload_plan.h).
#include "zero/offload_plan.h"

namespace zt {

OffloadProblem offload_problem(bool optimizer_offloaded, bool params_offloaded,
                               const ZeroPolicy& policy, const Precision& precision) {
  if (optimizer_offloaded && !policy.shard_optimizer) return OffloadProblem::kOptimizerNeedsStage1;
  if (optimizer_offloaded && precision.mixed() && !precision.has_master())
    return OffloadProblem::kOptimizerNeedsMaster;
  if (params_offloaded && !policy.shard_params) return OffloadProblem::kParamsNeedStage3;
  return OffloadProblem::kNone;
}

}  // namespace zt
