// MemoryModel: model states per tier and category, the activation replay, the communication
// count and DeepSpeed's estimator formulas.
#include "zero/memory_model.h"

#include <algorithm>
#include <cmath>

#include "runtime/flat_layout.h"
#include "runtime/status.h"
#include "zero/engine.h"
#include "zero/swapped_state.h"

namespace zt {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kNvme: return "nvme";
  }
  return "?";
}

int64_t TierBytes::model_states(Tier t) const {
  return get(t, MemCategory::kParams) + get(t, MemCategory::kGrads) +
         get(t, MemCategory::kOptimizer);
}

int64_t TierBytes::total(Tier t) const {
  int64_t sum = 0;
  for (int64_t b : bytes[static_cast<size_t>(t)]) sum += b;
  return sum;
}

StateOptions state_options(const EngineOptions& engine, OffloadDevice offload, int world,
                           OffloadDevice offload_param) {
  StateOptions o;
  o.policy = engine.policy;
  o.precision = engine.precision;
  o.optimizer = engine.optimizer;
  o.persistence_threshold = engine.persistence_threshold;
  o.offload_optimizer = offload;
  o.offload_param = offload_param;
  o.param_buffers = engine.param_buffers;
  o.world = world;
  return o;
}

std::string state_options_problem(const StateOptions& o) {
  if (o.offload_param != OffloadDevice::kNone) {
    if (!o.policy.shard_params) return "offload_param needs stage 3";
    if (o.offload_optimizer == OffloadDevice::kNone) return "offload_param needs offload_optimizer";
  }
  if (o.offload_optimizer == OffloadDevice::kNone) return {};
  if (!o.policy.shard_optimizer) return "offload_optimizer needs stage >= 1";
  if (o.precision.mixed() && !o.precision.has_master())
    return "offload_optimizer needs an fp32 master (not pure 16-bit)";
  return {};
}

std::vector<int64_t> unit_numels(Model& model) {
  std::vector<int64_t> out;
  for (Unit* u : model.units()) out.push_back(u->layout().numel());
  return out;
}

std::vector<int64_t> synthetic_unit_numels(int64_t params, int units) {
  ZT_ASSERT(params > 0 && units > 0, "params {} units {}", params, units);
  std::vector<int64_t> out;
  for (int u = 0; u < units; ++u) {
    // Parts differ by at most one element; each is one tensor in its own flat buffer.
    const int64_t n = params / units + (u < params % units ? 1 : 0);
    ParamSpec spec;
    spec.name = "p" + std::to_string(u);
    spec.shape = {n};
    out.push_back(FlatLayout({spec}).numel());
  }
  return out;
}

namespace {

int64_t bytes_of(int64_t elements, DType dtype) {
  return elements * static_cast<int64_t>(dtype_size(dtype));
}

// One unit's buffers on this rank, as ParamGroup's constructor and the engine's Optimizer
// allocate them (zero/param_group.h lists the buffers).
void add_unit_state_bytes(const ShardLayout& shard, const StateOptions& o, int state_tensors,
                          TierBytes& out) {
  const Precision& p = o.precision;
  const bool persistent = shard.numel <= o.persistence_threshold;
  const bool params_sharded = o.policy.shard_params && !persistent;
  const int64_t working = params_sharded ? shard.shard : shard.padded;
  const int64_t master = o.policy.shard_optimizer ? shard.shard : shard.padded;
  const int64_t grads = o.policy.shard_grads ? shard.shard : shard.padded;
  const DType grad_dtype = p.mixed() ? p.grad_accum : DType::kF32;

  // offload_param moves a sharded unit's working-parameter shard off the device (its pool of
  // NVMe buffers is added once, in model_state_bytes).
  const Tier params_tier = !params_sharded || o.offload_param == OffloadDevice::kNone
                               ? Tier::kDevice
                               : o.offload_param == OffloadDevice::kCpu ? Tier::kHost
                                                                        : Tier::kNvme;
  out.at(params_tier, MemCategory::kParams) += bytes_of(working, p.compute);
  out.at(Tier::kDevice, MemCategory::kGrads) += bytes_of(grads, grad_dtype);
  if (o.offload_optimizer == OffloadDevice::kCpu) {  // the pipelined step's per-unit buffers
    out.at(Tier::kHost, MemCategory::kGrads) += bytes_of(master, grad_dtype);
    if (p.compute != DType::kF32)
      out.at(Tier::kHost, MemCategory::kWorkspace) += bytes_of(master, p.compute);
  }

  // The fp32 state per master element: the optimizer's tensors, and a master of its own when
  // mixed precision has one or the optimizer is offloaded (fp32 training otherwise updates the
  // working params in place: they are the master).
  switch (o.offload_optimizer) {
    case OffloadDevice::kNone: {
      const int copies = state_tensors + (p.has_master() ? 1 : 0);
      out.at(Tier::kDevice, MemCategory::kOptimizer) += bytes_of(master * copies, DType::kF32);
      break;
    }
    case OffloadDevice::kCpu:
      out.at(Tier::kHost, MemCategory::kOptimizer) +=
          bytes_of(master * (state_tensors + 1), DType::kF32);
      break;
    case OffloadDevice::kNvme:  // SwappedState::bytes(): the master and the state, every precision
      out.at(Tier::kNvme, MemCategory::kOptimizer) +=
          bytes_of(master * (state_tensors + 1), DType::kF32);
      break;
  }
}

}  // namespace

TierBytes model_state_bytes(std::span<const int64_t> numels, const StateOptions& o) {
  o.policy.validate();
  if (const std::string problem = state_options_problem(o); !problem.empty())
    throw_input("the engine refuses this configuration: " + problem);
  const int state_tensors = static_cast<int>(optimizer_state_names(o.optimizer).size());
  TierBytes out;
  int64_t largest_master = 0, largest_param_shard = 0;
  for (int64_t numel : numels) {
    const ShardLayout shard(numel, o.world, 0);
    add_unit_state_bytes(shard, o, state_tensors, out);
    largest_master = std::max(largest_master, o.policy.shard_optimizer ? shard.shard : shard.padded);
    if (numel > o.persistence_threshold) largest_param_shard = std::max(largest_param_shard, shard.shard);
  }
  if (o.offload_param == OffloadDevice::kNvme) {  // OffloadedParams' pool, 4 KiB aligned
    const int64_t bytes = bytes_of(largest_param_shard, o.precision.compute);
    out.at(Tier::kHost, MemCategory::kParams) +=
        int64_t{o.param_buffers} * ((bytes + 4095) / 4096 * 4096 + 4096);
  }
  if (o.offload_optimizer == OffloadDevice::kNvme) {
    // The engine's host staging of the streamed NVMe step (offload_grads_, offload_working_),
    // one chunk; SwappedState::kChunk is the engine's kOffloadChunk (a static_assert there).
    const Precision& p = o.precision;
    const int64_t chunk = std::min(largest_master, SwappedState::kChunk);
    out.at(Tier::kHost, MemCategory::kGrads) +=
        bytes_of(chunk, p.mixed() ? p.grad_accum : DType::kF32);
    out.at(Tier::kHost, MemCategory::kWorkspace) += bytes_of(chunk, p.compute);
    // SwappedState's two staging sets
    out.at(Tier::kHost, MemCategory::kWorkspace) +=
        2 * (state_tensors + 1) * bytes_of(chunk, DType::kF32);
  }
  return out;
}

namespace {

// Current and peak bytes of the replay.
struct Tally {
  int64_t current = 0;
  int64_t peak = 0;
  void alloc(int64_t bytes) {
    current += bytes;
    peak = std::max(peak, current);
  }
  void free(int64_t bytes) { current -= bytes; }
};

// One layer's ActivationStore in the replay: the bytes each saved buffer holds now.
struct StoreReplay {
  const LayerActivations* declared = nullptr;
  std::vector<int64_t> held;

  void fill(Tally& t) {  // forward's allocations, fp32
    for (const ActivationBuffer& b : declared->saved) {
      held.push_back(4 * b.elements);
      t.alloc(held.back());
    }
  }
  // ActivationStore::pack / unpack: each buffer converted in turn, the new one allocated before
  // the old one is freed; stats and empty buffers stay.
  void convert(Tally& t, int64_t to_bytes_per_element) {
    for (size_t i = 0; i < held.size(); ++i) {
      const ActivationBuffer& b = declared->saved[i];
      if (b.stats || b.elements == 0) continue;
      t.alloc(to_bytes_per_element * b.elements);
      t.free(held[i]);
      held[i] = to_bytes_per_element * b.elements;
    }
  }
  void release(Tally& t) {
    for (int64_t h : held) t.free(h);
    held.clear();
  }
};

}  // namespace

std::optional<int64_t> activation_peak_bytes(Model& model, const ActivationOptions& o) {
  auto layers = model.layers();
  const size_t L = layers.size();
  ZT_ASSERT(o.checkpoint.empty() || o.checkpoint.size() == L, "checkpoint mask has {} of {} layers",
            o.checkpoint.size(), L);
  std::vector<LayerActivations> declared;
  for (Layer* layer : layers) {
    std::optional<LayerActivations> a = layer->activations(o.B, o.T, true);
    if (!a) return std::nullopt;
    declared.push_back(std::move(*a));
  }
  const auto checkpointed = [&](size_t l) { return !o.checkpoint.empty() && o.checkpoint[l]; };
  const int64_t N = o.B * o.T, C = model.hidden_size();
  const int64_t hidden_fp32 = 4 * N * C;
  const bool pack = o.compute != DType::kF32;  // 16-bit activations computed in fp32
  const int64_t packed = static_cast<int64_t>(dtype_size(o.compute));

  // The engine's run_pass in training mode: DeviceBatch, then PassState (hidden states in the
  // compute dtype, losses, two fp32 hidden gradients), then the layers.
  Tally t;
  if (o.tokens_on_device) t.alloc(2 * N * 4);
  t.alloc(static_cast<int64_t>(L - 1) * N * C * packed);
  t.alloc(4 * N);
  t.alloc(2 * hidden_fp32);
  // Under 16-bit activations a layer reads and writes fp32 copies of the hidden states.
  const auto copies = [&](size_t l, bool computes_output) {
    int64_t bytes = 0;
    if (pack && l > 0) bytes += hidden_fp32;
    if (pack && computes_output && l + 1 < L) bytes += hidden_fp32;
    return bytes;
  };
  std::vector<StoreReplay> stores(L);
  for (size_t l = 0; l < L; ++l) stores[l].declared = &declared[l];
  const auto forward = [&](size_t l) {
    stores[l].fill(t);
    t.alloc(4 * declared[l].transient);
    t.free(4 * declared[l].transient);
  };
  for (size_t l = 0; l < L; ++l) {
    const int64_t c = copies(l, true);
    t.alloc(c);
    forward(l);
    if (checkpointed(l))
      stores[l].release(t);
    else if (pack)
      stores[l].convert(t, packed);
    t.free(c);
  }
  for (size_t l = L; l-- > 0;) {
    const int64_t c = copies(l, checkpointed(l));
    t.alloc(c);
    if (checkpointed(l))
      forward(l);  // the recompute keeps fp32 buffers
    else if (pack)
      stores[l].convert(t, 4);
    t.alloc(4 * declared[l].scratch);
    stores[l].release(t);
    t.free(c);
    t.free(4 * declared[l].scratch);
  }
  return t.peak;
}

int64_t comm_elements_per_step(std::span<const int64_t> numels, const StateOptions& o) {
  int64_t elements = 0;
  for (int64_t numel : numels) {
    const ShardLayout shard(numel, o.world, 0);
    const bool gathered = o.policy.shard_params && numel > o.persistence_threshold;
    elements += (gathered ? 3 : 2) * shard.padded;
  }
  return elements;
}

// DeepSpeed's estimators, from their published definitions (deepspeed/runtime/zero/
// stage_1_and_2.py and stage3.py), with N = gpus_per_node * nodes, Ψ = params,
// f = buffer_factor (additional_buffer_factor, 1.5 by default):
//   zero2, cpu_offload:     gpu = 2Ψ                    cpu = Ψ * max(4N, 16) * f
//   zero2, no offload:      gpu = 4Ψ + int(16Ψ / N)     cpu = 4Ψ * gpus_per_node * f
DeepSpeedEstimate deepspeed_zero2_estimate(int64_t params, int gpus_per_node, int nodes,
                                           bool cpu_offload, double f) {
  const double psi = static_cast<double>(params);
  const int64_t gpus = static_cast<int64_t>(gpus_per_node) * nodes;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    e.gpu = 2 * params;
    e.cpu = static_cast<int64_t>(psi * static_cast<double>(std::max<int64_t>(4 * gpus, 16)) * f);
  } else {
    e.gpu = 4 * params + static_cast<int64_t>(16.0 * psi / static_cast<double>(gpus));
    e.cpu = static_cast<int64_t>(psi * 4.0 * gpus_per_node * f);
  }
  return e;
}

// With L = 4 * largest_layer_params (its fp32 gather), g = 1 / nodes:
//   offload optimizer and params: gpu = L
//                                 cpu = zero_init ? 18Ψg f : Ψ max(4 gpus_per_node, 18g) f
//   offload optimizer only:       gpu = L + int(2Ψ / N)
//                                 cpu = zero_init ? 16Ψg f : Ψ max(4 gpus_per_node, 16g) f
//   no offload:                   gpu = L + int(18Ψ / N)
//                                 cpu = zero_init ? 4 largest gpus_per_node f : 4Ψ gpus_per_node f
DeepSpeedEstimate deepspeed_zero3_estimate(int64_t params, int64_t largest_layer_params,
                                           int gpus_per_node, int nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init, double f) {
  const double psi = static_cast<double>(params), g = 1.0 / nodes;
  const double per_node = static_cast<double>(gpus_per_node);
  const double gpus = per_node * nodes;
  const int64_t largest = 4 * largest_layer_params;
  DeepSpeedEstimate e;
  if (cpu_offload && cpu_offload_params) {
    e.gpu = largest;
    e.cpu = static_cast<int64_t>(zero_init ? psi * 18.0 * g * f
                                           : psi * std::max(4.0 * per_node, 18.0 * g) * f);
  } else if (cpu_offload) {
    e.gpu = largest + static_cast<int64_t>(2.0 * psi / gpus);
    e.cpu = static_cast<int64_t>(zero_init ? psi * 16.0 * g * f
                                           : psi * std::max(4.0 * per_node, 16.0 * g) * f);
  } else {
    e.gpu = largest + static_cast<int64_t>(18.0 * psi / gpus);
    e.cpu = static_cast<int64_t>(zero_init
                                     ? static_cast<double>(largest_layer_params) * 4.0 * per_node * f
                                     : psi * 4.0 * per_node * f);
  }
  return e;
}

}  // namespace zt
