// The offload set-up of a run: the tiers that zero_optimization.offload_optimizer and
// offload_param name (the host tier, a CpuDevice; the NVMe swap stores), made from the config
// and set in the engine's options, each announced in one line. What it does not do: check
// which combinations are legal (the config reader and the engine do), move any bytes.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "offload/swap_store.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_device.h"
#include "zero/engine.h"

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

// The tiers of `config` made in `tiers` and set in `o` (offload_optimizer, optimizer_swap,
// offload_param, param_swap); pin_memory applied to the host tier where `device` copies through
// pinned memory. The swap stores' notices go to `print.all`.
void set_up_offload(const Config& config, Device& device, int rank, const OffloadPrinters& print,
                    OffloadStores& tiers, EngineOptions& o);

}  // namespace zt
