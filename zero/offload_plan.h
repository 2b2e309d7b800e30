// OffloadPlan: where a run's optimizer state and stage-3 parameter shards live, as one value
// (DeepSpeed's zero_optimization.offload_optimizer and offload_param). The combinations no run
// may have cannot be written: the parameters' tier exists only inside an offloaded optimizer
// (offload_param needs offload_optimizer: the optimizer writes the updated parameters where it
// runs, on the host), and each store is named by the tier that uses it. The rules that depend
// on the rest of a run (its stage, its precision) are offload_problem's: the one check that the
// engine and the memory model both call. train/offload_plan.cpp builds the plan from a config.
//
// What it does not do: own the host tier or the swap stores (the caller keeps them alive for
// the engine's lifetime), move any bytes, read a config.
#pragma once

#include <optional>

#include "offload/swap_store.h"
#include "runtime/device.h"
#include "zero/precision.h"
#include "zero/zero_policy.h"

namespace zt {

// offload_param: the sharded working parameters of stage 3 live off the device, in the host
// tier's memory, or in `swap`'s files (one per unit) through a pool of `buffers` host buffers
// that also holds the shards fetched ahead (zero/offloaded_params.h). `swap` may be the
// optimizer's store (one store per nvme_path).
struct ParamOffload {
  SwapStore* swap = nullptr;  // null: host memory
  int buffers = 5;            // offload_param.buffer_count
};

// offload_optimizer (ZeRO-Offload): the fp32 master and the optimizer state live on `host` (a
// CpuDevice: the host tier, whose kernels run the update), or, with `swap` (ZeRO-Infinity), in
// that store's swap files, streamed through the host tier a chunk at a time.
struct OptimizerOffload {
  explicit OptimizerOffload(Device& host_tier, SwapStore* state_swap = nullptr)
      : host(&host_tier), swap(state_swap) {}
  Device* host;                        // never null
  SwapStore* swap = nullptr;           // null: host memory
  std::optional<ParamOffload> params;  // offload_param: only with the optimizer offloaded
};

struct OffloadPlan {
  std::optional<OptimizerOffload> optimizer;  // unset: nothing is offloaded

  Device* host() const { return optimizer ? optimizer->host : nullptr; }
  SwapStore* optimizer_swap() const { return optimizer ? optimizer->swap : nullptr; }
  const ParamOffload* params() const {
    return optimizer && optimizer->params ? &*optimizer->params : nullptr;
  }
};

// What the rest of a run's options forbid of an offload plan: the optimizer offloaded needs the
// optimizer state sharded (stage >= 1) and an fp32 master (not pure 16-bit); the parameters
// offloaded need them sharded (stage 3).
enum class OffloadProblem {
  kNone,
  kOptimizerNeedsStage1,
  kOptimizerNeedsMaster,
  kParamsNeedStage3
};
OffloadProblem offload_problem(bool optimizer_offloaded, bool params_offloaded,
                               const ZeroPolicy& policy, const Precision& precision);

}  // namespace zt
