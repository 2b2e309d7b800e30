// Engine: the optimizer half of the training step: each unit's update on the device, on the host
// tier (offload_optimizer: staged in chunks, or streamed from NVMe swap files), or pipelined on
// the host thread as each unit's reduced gradient arrives (gradient_ready), then the refresh
// that all-gathers the updated working parameters.
#include <algorithm>
#include <cstring>

#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

void Engine::gradient_ready(ParamGroup& g) {
  const int u = static_cast<int>(
      std::find_if(groups_.begin(), groups_.end(), [&](const auto& p) { return p.get() == &g; }) -
      groups_.begin());
  ZT_ASSERT(u < num_units(), "unit {} is not the engine's", g.name());
  const size_t bytes = static_cast<size_t>(g.master_size()) * dtype_size(g.grad_dtype());
  device_.copy_to_host(host_grads_[u].data(), g.grad_master(), bytes);
  if (early_) {
    ZT_ASSERT(early_->step == step_ + 1, "early update for step {} at step {}", early_->step,
              step_ + 1);
    fault_point(EnginePoint::kOptimizer, u);
    submit_host_update(u, early_->lr, 1.0f, early_->step);  // no clipping, no loss scale
  }
  collect_host_updates(false);
}

void Engine::submit_host_update(int u, float lr, float grad_scale, int64_t step) {
  ParamGroup& g = *groups_[u];
  HostUpdate& h = host_updates_[u];
  ZT_ASSERT(!h.submitted, "unit {}: update submitted twice", g.name());
  float* master = g.master();  // host memory
  const int64_t n = g.master_size();
  const ConstOperand grads(host_grads_[u].data(), g.grad_dtype());
  const DType dtype = options_.precision.compute;
  const Operand working =
      dtype == DType::kF32 ? Operand() : Operand(host_working_[u].data(), dtype);
  Optimizer& optimizer = *optimizer_;
  h.ticket = host_worker_->submit([&optimizer, u, n, master, grads, working, lr, grad_scale, step] {
    optimizer.step_part_host(u, 0, n, master, grads, working, lr, grad_scale, step);
  });
  h.submitted = true;
  host_update_order_.push_back(u);
}

void Engine::write_back(int u) {
  ParamGroup& g = *groups_[u];
  const DType dtype = options_.precision.compute;
  // fp32: the updated master is the working parameters' bits.
  const void* updated =
      dtype == DType::kF32 ? static_cast<const void*>(g.master()) : host_working_[u].data();
  const size_t bytes = static_cast<size_t>(g.master_size()) * dtype_size(dtype);
  if (g.params_offloaded()) {
    std::memcpy(g.begin_working_update(), updated, bytes);
    g.finish_working_update();
  } else {
    device_.copy_from_host(g.working_master_range(), updated, bytes);
  }
}

void Engine::collect_host_updates(bool all) {
  for (int u : host_update_order_) {
    HostUpdate& h = host_updates_[u];
    if (h.written_back || (!all && !host_worker_->done(h.ticket))) continue;
    host_worker_->wait(h.ticket);
    write_back(u);
    h.written_back = true;
  }
}

void Engine::refresh_params() {
  // Launched unit after unit; once allgather_bucket_size elements are in flight they are
  // finished before more launch.
  std::vector<CommHandle> in_flight;
  int64_t in_flight_elements = 0;
  for (auto& g : groups_) {
    CommHandle h = g->begin_refresh(*gather_queue_);
    if (h.done()) continue;  // nothing to refresh for this unit
    const int64_t elements = g->shard().padded;
    if (!in_flight.empty() && in_flight_elements + elements > options_.allgather_bucket_size) {
      for (auto& pending : in_flight) pending.wait();
      in_flight.clear();
      in_flight_elements = 0;
    }
    in_flight.push_back(std::move(h));
    in_flight_elements += elements;
  }
  for (auto& h : in_flight) h.wait();
}

void Engine::offloaded_optimizer_step(int u, float lr, float grad_scale) {
  ParamGroup& g = *groups_[u];
  const int64_t n = g.master_size();
  const DType gdtype = g.grad_dtype(), dtype = options_.precision.compute;
  const size_t gsize = dtype_size(gdtype), wsize = dtype_size(dtype);
  const auto* grads = static_cast<const std::byte*>(g.grad_master());
  const bool fp32 = dtype == DType::kF32;
  // Where the updated working values go: the device, through the host staging, or (offloaded
  // parameters) straight into the parameter tier's host memory.
  std::byte* to_tier =
      g.params_offloaded() ? static_cast<std::byte*>(g.begin_working_update()) : nullptr;
  std::byte* to_device = to_tier ? nullptr : static_cast<std::byte*>(g.working_master_range());
  // Elements [begin, begin + count) of the master range: the gradients to the host, one pass
  // updating the master (and the state, when given: else the optimizer's own) and (16-bit)
  // rounding the working values, which then go where they live (fp32: the master's bits).
  auto update = [&](int64_t begin, int64_t count, float* master, float* const* state) {
    const size_t at = static_cast<size_t>(begin), count_bytes = static_cast<size_t>(count);
    device_.copy_to_host(offload_grads_.data(), grads + at * gsize, count_bytes * gsize);
    void* rounded = to_tier ? static_cast<void*>(to_tier + at * wsize) : offload_working_.data();
    optimizer_->step_part_host(
        u, begin, begin + count, master, ConstOperand(offload_grads_.data(), gdtype),
        fp32 ? Operand() : Operand(rounded, dtype), lr, grad_scale, step_, state);
    if (to_tier) {
      if (fp32) std::memcpy(to_tier + at * wsize, master, count_bytes * wsize);
      return;
    }
    const void* updated = fp32 ? static_cast<const void*>(master) : offload_working_.data();
    device_.copy_from_host(to_device + at * wsize, updated, count_bytes * wsize);
  };
  if (swapped_) {  // master and state streamed from NVMe, in the swap files' chunks
    static_assert(SwappedState::kChunk == kOffloadChunk, "one chunk size for the staging");
    swapped_->update(u, [&](int64_t begin, int64_t count, float* const* state) {
      update(begin, count, state[0], state + 1);
    });
  } else {
    float* master = g.master();  // host memory
    for (int64_t begin = 0; begin < n; begin += kOffloadChunk)
      update(begin, std::min(kOffloadChunk, n - begin), master + begin, nullptr);
  }
  if (to_tier) g.finish_working_update();
}

void Engine::optimizer_step(int u, float lr, float grad_scale) {
  fault_point(EnginePoint::kOptimizer, u);
  if (options_.offload.host()) return offloaded_optimizer_step(u, lr, grad_scale);
  ParamGroup& g = *groups_[u];
  const int64_t n = g.master_size();
  float* master = g.master();
  const DType dtype = options_.precision.compute;
  Kernels& k = kernels_;
  const ConstOperand grads(g.grad_master(), g.grad_dtype());  // widened by the kernels
  if (master) {
    // Mixed precision: the working copy is the master rounded, written in the update's own
    // pass (fp32: master and working parameters are one buffer).
    const Operand working =
        options_.precision.has_master() ? Operand(g.working_master_range(), dtype) : Operand();
    optimizer_->step_part(u, 0, n, master, grads, lr, grad_scale, step_, working);
  } else {
    // Pure 16-bit: the update computed in fp32 from the working values, a chunk at a time (the
    // update is element-wise, so the bits are those of one pass), and rounded back.
    for_each_fp32_chunk(g.working_master_range(), dtype, n,
                        [&](float* params, int64_t begin, int64_t count) {
                          void* working = static_cast<std::byte*>(g.working_master_range()) +
                                          static_cast<size_t>(begin) * dtype_size(dtype);
                          optimizer_->step_part(u, begin, begin + count, params, grads.at(begin),
                                                lr, grad_scale, step_);
                          k.cast(working, dtype, params, DType::kF32, count);
                        });
  }
}

}  // namespace zt
