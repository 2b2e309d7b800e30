// The offload set-up of a run (see offload_plan.h).
#include "train/offload_plan.h"

#include <fmt/format.h>

#include <utility>

#include "offload/async_io.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"

namespace zt {

namespace {

// The NVMe swap store of an offload block's device "nvme": its nvme_path, this rank, the aio
// block's settings; its notices (stale files of a killed run removed) logged by the rank.
SwapStoreOptions swap_options(const Config& config, const std::string& nvme_path, int rank,
                              const OffloadPrinters& print) {
  SwapStoreOptions o;
  o.nvme_path = nvme_path;
  o.rank = rank;
  o.aio.block_size = config.aio.block_size;
  o.aio.queue_depth = config.aio.queue_depth;
  o.aio.intra_op_parallelism = config.aio.thread_count;
  o.aio.single_submit = config.aio.single_submit;
  o.aio.overlap_events = config.aio.overlap_events;
  o.notice = print.all;
  return o;
}

}  // namespace

OffloadPlan set_up_offload(const Config& config, Device& device, int rank,
                           const OffloadPrinters& print, OffloadStores& stores) {
  const OffloadConfig& oo = config.zero_optimization.offload_optimizer;
  const OffloadConfig& op = config.zero_optimization.offload_param;
  OffloadPlan plan;
  if (oo.device == OffloadDevice::kNone) {
    // The config reader refuses offload_param without offload_optimizer (runtime/config).
    ZT_ASSERT(op.device == OffloadDevice::kNone, "offload_param without offload_optimizer");
    return plan;
  }
  // ZeRO-Offload: the master and the optimizer state in host memory, updated there; with
  // nvme (ZeRO-Infinity) they live in swap files and stream through host staging.
  CpuDevice& host = stores.host.emplace();
  // pin_memory (of either block: they share the host tier) page-locks its buffers for a
  // GPU's copies; the CPU device reads host memory directly, so there it has no effect.
  if (oo.pin_memory || op.pin_memory) {
    if (std::optional<HostPinning> pinning = host_pinning_for(device))
      host.set_pinning(std::move(*pinning));
    else
      print.rank0(
          fmt::format("note: pin_memory has no effect on zt.device {}: the device reads "
                      "host memory directly",
                      config.zt.device));
  }
  if (oo.device == OffloadDevice::kNvme) {
    SwapStore& swap =
        stores.optimizer_swap.emplace(swap_options(config, oo.nvme_path, rank, print));
    plan.optimizer.emplace(host, &swap);
    print.rank0(
        fmt::format("offload_optimizer: fp32 master and optimizer state in swap files "
                    "under {}, streamed through host memory; {}",
                    swap.directory(), default_aio_backend().describe));
  } else {
    plan.optimizer.emplace(host);
    print.rank0(
        "offload_optimizer: fp32 master and optimizer state in host memory, updated by "
        "the CPU kernels");
  }
  if (op.device == OffloadDevice::kNone) return plan;
  // ZeRO-Infinity's parameter tier (stage 3: checked by the config and the engine). One swap
  // store per directory: with the optimizer's nvme_path, the parameters share it.
  ParamOffload& params = plan.optimizer->params.emplace();
  params.buffers = op.buffer_count;
  if (op.device == OffloadDevice::kNvme) {
    const bool shared = stores.optimizer_swap && op.nvme_path == oo.nvme_path;
    params.swap = shared
                      ? &*stores.optimizer_swap
                      : &stores.param_swap.emplace(swap_options(config, op.nvme_path, rank, print));
    print.rank0(
        fmt::format("offload_param: stage-3 parameter shards in swap files under {}, "
                    "through {} host buffers that prefetch the next units' shards",
                    params.swap->directory(), op.buffer_count));
  } else {
    print.rank0(
        "offload_param: stage-3 parameter shards in host memory, copied in for each "
        "gather");
  }
  return plan;
}

}  // namespace zt
