// The offload set-up of a run: the OffloadPlan (zero/offload_plan.h) that
// zero_optimization.offload_optimizer and offload_param describe, with the tiers it names (the
// host tier, a CpuDevice; the NVMe swap stores) made here, each announced in one line.
// What it does not do: check which combinations the stage and precision allow (the config
// reader names the key and file; offload_problem is the engine's and the planner's one rule),
// move any bytes.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "offload/swap_store.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_device.h"
#include "zero/offload_plan.h"

namespace zt {

// What offload needs beyond the engine: declared before it, so that it outlives it.
struct OffloadStores {
  std::optional<CpuDevice> host;  // the host tier of offload_optimizer (and offload_param)
  // The NVMe swap files of offload_optimizer and of offload_param (unset when the parameters
  // share the optimizer's nvme_path): removed when a store goes, after the engine.
  std::optional<SwapStore> optimizer_swap, param_swap;
};

// Lines for rank 0 only, and lines every rank prints (zt-train: Logger::rank0 and ::all).
struct OffloadPrinters {
  std::function<void(const std::string&)> rank0, all;
};

// The plan of `config`, its tiers made in `stores`; pin_memory applied to the host tier where
// `device` copies through pinned memory. The swap stores' notices go to `print.all`.
OffloadPlan set_up_offload(const Config& config, Device& device, int rank,
                           const OffloadPrinters& print, OffloadStores& stores);

}  // namespace zt
