// MemoryPlan: zt-estimate's table (and zt-train --dry-run's). For one model (its units, or a raw
// parameter count split into units) and one rank count, every ZeRO stage crossed with every
// offload_optimizer choice the engine accepts, and at stage 3 the offload_param choices (with
// the optimizer offloaded to the same tier): the model states per tier and category from
// zero/memory_model.h, the activation peak, the communication volume, DeepSpeed's estimates for
// the same case beside them and, given a device memory size, the choices that fit, cheapest
// first. A tuned run (LoRA, zt.freeze) is planned with its frozen units, beside the full
// fine-tune of the same model. Text and JSON out; the figures all come from zero/memory_model.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_zoo/model_spec.h"
#include "runtime/config.h"
#include "runtime/model.h"
#include "runtime/tuning.h"
#include "zero/deepspeed_estimate.h"
#include "zero/engine.h"
#include "zero/memory_model.h"

namespace zt {

struct PlanRequest {
  std::string what;                 // the model, as the table's title names it
  std::vector<UnitSize> units;      // FlatLayout::numel() and Unit::frozen per unit
  int64_t params = 0;               // real parameters (padding excluded): DeepSpeed's Ψ
  int64_t trained_params = 0;       // of them, those in units that train
  int64_t largest_unit_params = 0;  // DeepSpeed's largest_layer_params
  std::string tuning;               // what trains, when not everything does (tuning_name)
  Model* model = nullptr;           // for activations; null: not estimated
  // Precision, optimizer, persistence threshold and checkpoint mask (the policy and offload
  // tiers are each row's own).
  EngineOptions engine;
  int ranks = 1;
  int nodes = 1;
  int64_t micro_batch = 1;
  int64_t seq_len = 1;
  bool cuda = false;             // a GPU job (zt.device "cuda"): the token ids are copied to it
  bool batch_positions = false;  // packed instruction data: document positions copied too
  // Bytes the communicators allocate on the device once (communicator_staging_bytes).
  int64_t comm_staging = 0;
  uint64_t device_memory = 0;  // 0: no fit list
  // The configuration's own choice, marked in the table (stage -1: none).
  int config_stage = -1;
  OffloadDevice config_offload = OffloadDevice::kNone;
  OffloadDevice config_param_offload = OffloadDevice::kNone;
  int param_buffers = 5;  // offload_param.buffer_count: the rows with parameters in swap files
};

struct PlanRow {
  int stage = 0;
  OffloadDevice offload = OffloadDevice::kNone;
  OffloadDevice param_offload = OffloadDevice::kNone;  // offload_param (stage 3)
  TierBytes states;                                    // model_state_bytes (and the host staging)
  std::optional<int64_t> activations;                  // activation_peak_bytes
  int64_t comm_elements = 0;
  DeepSpeedEstimate deepspeed;  // zero2 for stages 0-2, zero3 for stage 3
  // The device's whole peak over a training step (device_peak_bytes: states, activations,
  // communication buffers, workspace); unset without a model.
  std::optional<DevicePeak> device_peak;
  // What the fit is judged on: the device peak; without a model, the device model states.
  int64_t device_bytes() const {
    return device_peak ? device_peak->total : states.model_states(Tier::kDevice);
  }
};

// The device bytes the communicators of a run on `ranks` ranks allocate once: the engine's
// communicator and its gather duplicate. On the CPU each is an MpiCommunicator whose
// reduce-scatter staging is kRecvDepth x (ranks - 1) x chunk_bytes; on a GPU (cuda) each NCCL
// communicator keeps NcclCommunicator's 64 KiB host-gather buffer, and MPI's staging would be
// host memory.
int64_t communicator_staging_bytes(bool cuda, int ranks);
// The activation replay's options for a micro-batch of (B, T) under `engine` (precision,
// checkpointing) on a GPU (`cuda`: the token ids copied to it, attention as
// planned_attention_record says) or the CPU; batch_positions: packed documents.
ActivationOptions activation_options(int64_t B, int64_t T, const EngineOptions& engine, bool cuda,
                                     bool batch_positions);

const char* offload_name(OffloadDevice d);  // "none", "cpu", "nvme"

// What a tuned run trains, for titles: "LoRA r=16 on all-linear", "LoRA r=8 on q_proj,v_proj,
// biases all", "zt.freeze model.layers.0.*", joined by "; "; empty when everything trains.
std::string tuning_name(const Tuning& tuning);

// Fills the request's model fields from `model` (its units, parameter counts; activations
// estimated over it) and `tuning`, what it was built with.
void set_plan_model(PlanRequest& request, Model& model, const Tuning& tuning);

// The budget of one chunk of the LM head's logits the activations are counted with: the
// device's Device::chunk_budget_bytes as a run would set it. A GPU's is gpu_chunk_budget_bytes
// of its memory, taken as request.device_memory; without one, the CPU's (which under-counts a
// GPU's head: format_plan says so).
int64_t logits_chunk_budget(const PlanRequest& request);

// Sets request.model's logits chunk budget (logits_chunk_budget) before it replays the step.
std::vector<PlanRow> plan_rows(const PlanRequest& request);
// Every row, cheapest first: DeepSpeed's order of speed (stage 0 > 1 > 2 > 1-2 + offload > 3 >
// 3 + offload > 3 + parameter offload; NVMe after the CPU).
std::vector<const PlanRow*> cheapest_first(const std::vector<PlanRow>& rows);
// The rows whose device_bytes() fit request.device_memory, in cheapest_first's order.
std::vector<const PlanRow*> fitting_rows(const PlanRequest& request,
                                         const std::vector<PlanRow>& rows);
// The human table, the DeepSpeed rows and the fit list.
std::string format_plan(const PlanRequest& request, const std::vector<PlanRow>& rows);
// Per stage and offload choice: model_states_bytes (per tier), activation_bytes,
// comm_elements_per_step, and the detail per category and DeepSpeed's figures.
nlohmann::ordered_json plan_json(const PlanRequest& request, const std::vector<PlanRow>& rows);

// The request zt-train's config describes (zt.model, batch, seq_len, precision, optimizer,
// checkpointing, zt.device_memory_limit, stage and offload) on `ranks` ranks over `nodes` nodes;
// `model` is build_model(spec), spec from resolve_model(config) (zt.freeze, zt.lora in it).
PlanRequest plan_request_from_config(const Config& config, const ModelSpec& spec, Model& model,
                                     int ranks, int nodes);

// What zt-estimate and zt-train --dry-run print and write. A request whose model trains
// everything: its plan. A tuned one (request.tuning; `spec` its model's spec, built again
// without spec.tuning for the full fine-tune): the full fine-tune's plan, the tuned plan, and
// the two compared row by row (format_tuning_comparison); the JSON is the tuned plan's with
// "full_fine_tune" (that plan's JSON) and "tuning_comparison".
struct PlanReport {
  std::string text;
  nlohmann::ordered_json json;
};
PlanReport plan_report(const PlanRequest& request, const ModelSpec* spec);

// Per stage and offload choice, the model states per rank (every tier) of the full fine-tune
// and of the tuned run, per category, and tuned / full in total and for the optimizer state.
// full_rows and tuned_rows are plan_rows of the same request over the two models.
std::string format_tuning_comparison(const PlanRequest& tuned,
                                     const std::vector<PlanRow>& full_rows,
                                     const std::vector<PlanRow>& tuned_rows);

}  // namespace zt
