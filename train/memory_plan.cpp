// MemoryPlan: rows, fit list, table and JSON of zt-estimate.
#include "train/memory_plan.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/mpi_communicator.h"
#include "runtime/byte_count.h"
#include "runtime/data/token_data.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"
#include "train/trainer.h"

namespace zt {

const char* offload_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  return "?";
}

namespace {

constexpr std::array<OffloadDevice, 3> kOffloads = {OffloadDevice::kNone, OffloadDevice::kCpu,
                                                    OffloadDevice::kNvme};

// One decimal unit for a whole table, chosen by its largest figure.
struct Scale {
  double divisor;
  const char* name;
};
Scale scale_for(int64_t largest) {
  if (largest >= 1'000'000'000) return {1e9, "GB"};
  if (largest >= 1'000'000) return {1e6, "MB"};
  return {1e3, "kB"};
}

int offload_rank(OffloadDevice d) { return static_cast<int>(d); }  // none < cpu < nvme

// The offload column: the optimizer's tier, "+p" when the parameters are offloaded there too.
std::string choice_name(const PlanRow& row) {
  return std::string(offload_name(row.offload)) +
         (row.param_offload == OffloadDevice::kNone ? "" : "+p");
}

// The row of the configuration's own stage and offload choice (marked "*").
bool is_config_choice(const PlanRequest& r, const PlanRow& row) {
  return row.stage == r.config_stage && row.offload == r.config_offload &&
         row.param_offload == r.config_param_offload;
}

// A category's bytes summed over the device, host and NVMe tiers.
int64_t all_tiers(const TierBytes& b, MemCategory c) {
  return b.get(Tier::kDevice, c) + b.get(Tier::kHost, c) + b.get(Tier::kNvme, c);
}
int64_t all_tier_states(const TierBytes& b) {
  return b.model_states(Tier::kDevice) + b.model_states(Tier::kHost) + b.model_states(Tier::kNvme);
}

void check_same_choices(const std::vector<PlanRow>& full, const std::vector<PlanRow>& tuned) {
  ZT_ASSERT(full.size() == tuned.size(), "{} full rows against {} tuned", full.size(),
            tuned.size());
  for (size_t i = 0; i < full.size(); ++i)
    ZT_ASSERT(full[i].stage == tuned[i].stage && full[i].offload == tuned[i].offload &&
                  full[i].param_offload == tuned[i].param_offload,
              "row {} differs between the full and the tuned plan", i);
}

}  // namespace

int64_t communicator_staging_bytes(bool cuda, int ranks) {
  if (ranks <= 1) return 0;
  constexpr int kCommunicators = 2;
  if (cuda) return kCommunicators * (int64_t{64} << 10);
  return kCommunicators * static_cast<int64_t>(MpiCommunicator::staging_bytes(ranks));
}

ActivationOptions activation_options(int64_t B, int64_t T, const EngineOptions& engine, bool cuda,
                                     bool batch_positions) {
  ActivationOptions a;
  a.B = B;
  a.T = T;
  a.compute = engine.precision.compute;
  a.checkpoint = engine.checkpoint;
  a.tokens_on_device = cuda;
  a.batch_positions = batch_positions;
  if (cuda) {  // cuDNN's record where its rules take the shape (planned_attention_record)
    const DType act = a.compute;
    a.attention = [act](const AttentionHeads& heads, int64_t b, int64_t t, bool packed) {
      return planned_attention_record(DeviceKind::kCuda, act, heads, b, t, packed);
    };
  }
  return a;
}

int64_t logits_chunk_budget(const PlanRequest& r) {
  if (r.cuda && r.device_memory > 0)
    return gpu_chunk_budget_bytes(static_cast<int64_t>(r.device_memory));
  return Device::kCpuChunkBudgetBytes;
}

std::vector<PlanRow> plan_rows(const PlanRequest& r) {
  ZT_ASSERT(r.ranks > 0 && r.nodes > 0, "ranks {} nodes {}", r.ranks, r.nodes);
  std::optional<int64_t> activations;
  ActivationOptions a;
  if (r.model) {
    r.model->set_chunk_budget_bytes(logits_chunk_budget(r));
    a = activation_options(r.micro_batch, r.seq_len, r.engine, r.cuda, r.batch_positions);
    activations = activation_peak_bytes(*r.model, a);
  }
  const int per_node = std::max(1, r.ranks / r.nodes);
  std::vector<PlanRow> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    // Each optimizer tier without parameter offload; at stage 3 also the parameters offloaded
    // to the optimizer's tier.
    std::vector<std::pair<OffloadDevice, OffloadDevice>> choices;
    for (OffloadDevice offload : kOffloads) choices.emplace_back(offload, OffloadDevice::kNone);
    if (stage == 3)
      for (OffloadDevice offload : {OffloadDevice::kCpu, OffloadDevice::kNvme})
        choices.emplace_back(offload, offload);
    for (const auto& [offload, param_offload] : choices) {
      EngineOptions e = r.engine;
      e.policy = ZeroPolicy::for_stage(stage);
      const StateOptions o = state_options(e, offload, r.ranks, param_offload, r.param_buffers);
      if (!state_options_problem(o).empty()) continue;  // the engine refuses it
      PlanRow row;
      row.stage = stage;
      row.offload = offload;
      row.param_offload = param_offload;
      row.states = model_state_bytes(r.units, o);
      row.activations = activations;
      row.comm_elements = comm_elements_per_step(r.units, o);
      if (r.model) {
        row.device_peak = device_peak_bytes(*r.model, step_replay_options(e, o, a, r.comm_staging));
      }
      const bool cpu_offload = offload != OffloadDevice::kNone;
      row.deepspeed = stage < 3 ? deepspeed_zero2_estimate(r.params, per_node, r.nodes, cpu_offload)
                                : deepspeed_zero3_estimate(
                                      r.params, r.largest_unit_params, per_node, r.nodes,
                                      cpu_offload, param_offload != OffloadDevice::kNone, true);
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<const PlanRow*> cheapest_first(const std::vector<PlanRow>& rows) {
  std::vector<const PlanRow*> out;
  for (const PlanRow& row : rows) out.push_back(&row);
  std::stable_sort(out.begin(), out.end(), [](const PlanRow* a, const PlanRow* b) {
    const auto key = [](const PlanRow* x) {
      return std::array<int, 4>{x->stage == 3 ? 1 : 0, offload_rank(x->param_offload),
                                offload_rank(x->offload), x->stage};
    };
    return key(a) < key(b);
  });
  return out;
}

std::vector<const PlanRow*> fitting_rows(const PlanRequest& r, const std::vector<PlanRow>& rows) {
  std::vector<const PlanRow*> out;
  if (r.device_memory == 0) return out;
  for (const PlanRow* row : cheapest_first(rows))
    if (static_cast<uint64_t>(row->device_bytes()) <= r.device_memory) out.push_back(row);
  return out;
}

std::string format_plan(const PlanRequest& r, const std::vector<PlanRow>& rows) {
  int64_t largest = 0;
  for (const PlanRow& row : rows)
    for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kNvme})
      largest = std::max({largest, row.states.total(t) + row.activations.value_or(0),
                          row.deepspeed.gpu, row.deepspeed.cpu});
  const Scale s = scale_for(largest);
  auto fig = [&](int64_t bytes) { return fmt::format("{:.1f}", bytes / s.divisor); };
  const Precision& p = r.engine.precision;
  const int64_t frozen_units =
      std::count_if(r.units.begin(), r.units.end(), [](const UnitSize& u) { return u.frozen; });
  const std::string trained =
      r.tuning.empty()
          ? ""
          : fmt::format(", {:.3f}M trained ({}; {} frozen unit{})", r.trained_params / 1e6,
                        r.tuning, frozen_units, frozen_units == 1 ? "" : "s");
  std::string out = fmt::format(
      "zt-estimate: {} | {:.3f}M parameters in {} units{} | {} rank{} on {} node{} | {} | {} | "
      "{}{}\n",
      r.what, r.params / 1e6, r.units.size(), trained, r.ranks, r.ranks > 1 ? "s" : "", r.nodes,
      r.nodes > 1 ? "s" : "", precision_name(p),
      fmt::format("{} state tensor{}", optimizer_state_names(r.engine.optimizer).size(),
                  optimizer_state_names(r.engine.optimizer).size() == 1 ? "" : "s"),
      r.model ? fmt::format("B={} T={}", r.micro_batch, r.seq_len) : "no activations (no model)",
      std::any_of(r.engine.checkpoint.begin(), r.engine.checkpoint.end(), [](bool c) { return c; })
          ? " | activation checkpointing"
          : "");
  out += fmt::format(
      "per rank, {} (1 {} = {:.0e} bytes). Model states as the engine holds them between steps;\n"
      "activations: the peak of one micro-batch; device peak: the training step's whole peak on\n"
      "the device (states, activations, stage-3 gathers, gradient and reduction buffers,\n"
      "communicator staging, workspace), what the fit is judged on. offload: the optimizer's tier, "
      "+p\n"
      "when the stage-3 parameters are offloaded there too (host par, nvme: their bytes). host\n"
      "grads: the cpu step's gradient shards (nvme: its staging chunk). DeepSpeed: estimate_zero2\n"
      "(stages 0-2) / estimate_zero3 (stage 3, zero_init) model states, GPU per rank and CPU per\n"
      "node{}.\n",
      s.name, s.name, s.divisor,
      r.tuning.empty() ? "" : " (they count every parameter as trained: frozen units too)");
  if (r.model) {
    const int64_t budget = logits_chunk_budget(r);
    out += fmt::format("LM head: logits in chunks of rows whose fp32 logits fit in {} ({}).\n",
                       format_bytes(budget),
                       !r.cuda ? "the CPU's budget"
                       : r.device_memory > 0
                           ? "a GPU's budget, 1/32 of its memory, taken as the device memory"
                           : "the CPU's budget: a GPU's is 1/32 of its memory, not given "
                             "(--device-memory or zt.device_memory_limit), so its logits are "
                             "under-counted");
    if (r.cuda && r.engine.precision.compute != DType::kF32)
      out +=
          "Attention: what cuDNN's fused SDPA keeps (softmax statistics and the 16-bit output) "
          "where its\nrules take the shape, else the T x T probabilities; a shape the GPU's "
          "cuDNN then refuses\nkeeps the probabilities (its log names it), more than counted "
          "here.\n";
  }
  out += "\n";
  out += fmt::format(
      "{:>5} {:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>9} | {:>11} "
      "{:>12} | {:>12} | {:>9} {:>9}\n",
      "stage", "offload", "params", "grads", "optim", "host par", "host grad", "host optim",
      "host work", "nvme", "activations", "device peak", "comm elems", "ds gpu", "ds cpu");
  for (const PlanRow& row : rows) {
    const TierBytes& b = row.states;
    const bool mine = is_config_choice(r, row);
    out += fmt::format(
        "{:>4}{} {:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>9} | {:>11} {:>12} | "
        "{:>12} | {:>9} {:>9}\n",
        row.stage, mine ? "*" : " ", choice_name(row),
        fig(b.get(Tier::kDevice, MemCategory::kParams)),
        fig(b.get(Tier::kDevice, MemCategory::kGrads)),
        fig(b.get(Tier::kDevice, MemCategory::kOptimizer)),
        fig(b.get(Tier::kHost, MemCategory::kParams)), fig(b.get(Tier::kHost, MemCategory::kGrads)),
        fig(b.get(Tier::kHost, MemCategory::kOptimizer)),
        fig(b.get(Tier::kHost, MemCategory::kWorkspace)),
        fig(b.get(Tier::kNvme, MemCategory::kOptimizer) + b.get(Tier::kNvme, MemCategory::kParams)),
        row.activations ? fig(*row.activations) : std::string("n/a"),
        row.device_peak ? fig(row.device_bytes()) : fig(b.model_states(Tier::kDevice)) + "+",
        group_digits(static_cast<uint64_t>(row.comm_elements)), fig(row.deepspeed.gpu),
        fig(row.deepspeed.cpu));
  }
  if (r.config_stage >= 0) out += "(* the config's own choice)\n";
  if (r.device_memory > 0) {
    const std::vector<const PlanRow*> fit = fitting_rows(r, rows);
    out += fmt::format(
        "\nfits {} of device memory ({}), cheapest first:", format_bytes(r.device_memory),
        rows.empty() || rows[0].device_peak
            ? "the step's device peak"
            : "device states only: no model, no activations or buffers");
    if (fit.empty()) out += " none";
    for (const PlanRow* row : fit)
      out += fmt::format(" stage {}{}{}{};", row->stage,
                         row->offload == OffloadDevice::kNone ? "" : " + offload ",
                         row->offload == OffloadDevice::kNone ? "" : offload_name(row->offload),
                         row->param_offload == OffloadDevice::kNone ? "" : " (parameters too)");
    if (!fit.empty()) out.pop_back();
    out += "\n";
  }
  return out;
}

nlohmann::ordered_json plan_json(const PlanRequest& r, const std::vector<PlanRow>& rows) {
  nlohmann::ordered_json j;
  j["model"] = r.what;
  j["params"] = r.params;
  j["units"] = r.units.size();
  if (!r.tuning.empty()) {
    j["tuning"] = r.tuning;
    j["trained_params"] = r.trained_params;
    j["frozen_units"] =
        std::count_if(r.units.begin(), r.units.end(), [](const UnitSize& u) { return u.frozen; });
  }
  j["ranks"] = r.ranks;
  j["nodes"] = r.nodes;
  j["micro_batch"] = r.micro_batch;
  j["seq_len"] = r.seq_len;
  j["precision"] = precision_name(r.engine.precision);
  if (r.device_memory > 0) j["device_memory_bytes"] = r.device_memory;
  j["device"] = r.cuda ? "cuda" : "cpu";
  if (r.model) j["logits_chunk_budget_bytes"] = logits_chunk_budget(r);
  const std::vector<const PlanRow*> fit = fitting_rows(r, rows);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const PlanRow& row : rows) {
    nlohmann::ordered_json e;
    e["stage"] = row.stage;
    e["offload_optimizer"] = offload_name(row.offload);
    e["offload_param"] = offload_name(row.param_offload);
    nlohmann::ordered_json states, detail;
    for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kNvme}) {
      states[tier_name(t)] = row.states.model_states(t);
      nlohmann::ordered_json per;
      for (int c = 0; c < kNumMemCategories; ++c) {
        const auto cat = static_cast<MemCategory>(c);
        if (row.states.get(t, cat) != 0)
          per[std::string(mem_category_name(cat))] = row.states.get(t, cat);
      }
      detail[tier_name(t)] = per.is_null() ? nlohmann::ordered_json::object() : per;
    }
    e["model_states_bytes"] = states;
    e["activation_bytes"] = row.activations ? nlohmann::ordered_json(*row.activations)
                                            : nlohmann::ordered_json(nullptr);
    e["comm_elements_per_step"] = row.comm_elements;
    e["bytes_by_category"] = detail;
    e["device_bytes"] = row.device_bytes();
    if (row.device_peak) {
      nlohmann::ordered_json peak;
      for (int c = 0; c < kNumMemCategories; ++c)
        peak[std::string(mem_category_name(static_cast<MemCategory>(c)))] =
            row.device_peak->category[c];
      e["device_peak_bytes_by_category"] = peak;
    }
    e["deepspeed"] = {{"gpu_bytes", row.deepspeed.gpu}, {"cpu_bytes_per_node", row.deepspeed.cpu}};
    if (r.device_memory > 0) e["fits"] = std::find(fit.begin(), fit.end(), &row) != fit.end();
    list.push_back(e);
  }
  j["choices"] = list;
  if (r.device_memory > 0) {
    nlohmann::ordered_json order = nlohmann::ordered_json::array();
    for (const PlanRow* row : fit)
      order.push_back({{"stage", row->stage},
                       {"offload_optimizer", offload_name(row->offload)},
                       {"offload_param", offload_name(row->param_offload)}});
    j["fitting_cheapest_first"] = order;
  }
  // Every choice in that order, with its device bytes (and, given a device memory, whether it
  // fits): the ones before the first fitting one are those rejected.
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const PlanRow* row : cheapest_first(rows)) {
    nlohmann::ordered_json e = {{"stage", row->stage},
                                {"offload_optimizer", offload_name(row->offload)},
                                {"offload_param", offload_name(row->param_offload)},
                                {"device_bytes", row->device_bytes()}};
    if (r.device_memory > 0)
      e["fits"] = static_cast<uint64_t>(row->device_bytes()) <= r.device_memory;
    all.push_back(e);
  }
  j["cheapest_first"] = all;
  return j;
}

std::string tuning_name(const Tuning& tuning) {
  std::vector<std::string> parts;
  if (const LoraConfig& lora = tuning.lora; lora.enabled) {
    std::string part = fmt::format("LoRA r={} on {}", lora.r,
                                   lora.target_modules.empty()
                                       ? std::string("the default targets")
                                       : fmt::format("{}", fmt::join(lora.target_modules, ",")));
    if (!lora.modules_to_save.empty())
      part += fmt::format(", {} trained whole", fmt::join(lora.modules_to_save, ","));
    if (lora.bias != "none") part += ", biases " + lora.bias;
    parts.push_back(part);
  }
  if (!tuning.freeze.empty())
    parts.push_back(fmt::format("zt.freeze {}", fmt::join(tuning.freeze, ",")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

void set_plan_model(PlanRequest& r, Model& model, const Tuning& tuning) {
  r.units = unit_sizes(model);
  r.params = r.trained_params = r.largest_unit_params = 0;
  for (Unit* u : model.units()) {
    r.params += u->layout().param_count();
    if (!u->frozen()) r.trained_params += u->layout().param_count();
    r.largest_unit_params = std::max(r.largest_unit_params, u->layout().param_count());
  }
  r.tuning = tuning_name(tuning);
  r.model = &model;
}

PlanRequest plan_request_from_config(const Config& config, const ModelSpec& spec, Model& model,
                                     int ranks, int nodes) {
  PlanRequest r;
  r.what = config.source;
  set_plan_model(r, model, spec.tuning);
  r.engine = engine_options(config, model);
  r.ranks = ranks;
  r.nodes = nodes;
  r.micro_batch = config.train_micro_batch_size_per_gpu;
  r.seq_len = config.zt.seq_len;
  r.cuda = config.zt.device == "cuda";
  r.batch_positions = is_packed_token_file(config.zt.train_data);
  r.comm_staging = communicator_staging_bytes(r.cuda, ranks);
  r.device_memory = config.zt.device_memory_limit;
  r.config_stage = config.zero_optimization.stage;
  r.config_offload = config.zero_optimization.offload_optimizer.device;
  r.config_param_offload = config.zero_optimization.offload_param.device;
  r.param_buffers = config.zero_optimization.offload_param.buffer_count;
  return r;
}

std::string format_tuning_comparison(const PlanRequest& r, const std::vector<PlanRow>& full_rows,
                                     const std::vector<PlanRow>& tuned_rows) {
  check_same_choices(full_rows, tuned_rows);
  int64_t largest = 0;
  for (const PlanRow& row : full_rows) largest = std::max(largest, all_tier_states(row.states));
  const Scale s = scale_for(largest);
  auto fig = [&](int64_t bytes) { return fmt::format("{:.2f}", bytes / s.divisor); };
  auto share = [](int64_t part, int64_t whole) {
    return whole > 0 ? fmt::format("{:.2f}%",
                                   100.0 * static_cast<double>(part) / static_cast<double>(whole))
                     : std::string("-");
  };
  std::string out = fmt::format(
      "\n{} against the full fine-tune:\nmodel states per rank, {} (parameters, gradients and "
      "optimizer state, each summed over\nthe device, host and NVMe tiers), and tuned / full.\n\n",
      r.tuning, s.name);
  out +=
      fmt::format("{:>5} {:>7} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>8} {:>8}\n",
                  "stage", "offload", "full par", "grads", "optim", "states", "tuned par", "grads",
                  "optim", "states", "states", "optim");
  for (size_t i = 0; i < full_rows.size(); ++i) {
    const PlanRow& row = tuned_rows[i];
    const TierBytes& f = full_rows[i].states;
    const TierBytes& t = row.states;
    const bool mine = is_config_choice(r, row);
    out += fmt::format(
        "{:>4}{} {:>7} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>8} {:>8}\n",
        row.stage, mine ? "*" : " ", choice_name(row), fig(all_tiers(f, MemCategory::kParams)),
        fig(all_tiers(f, MemCategory::kGrads)), fig(all_tiers(f, MemCategory::kOptimizer)),
        fig(all_tier_states(f)), fig(all_tiers(t, MemCategory::kParams)),
        fig(all_tiers(t, MemCategory::kGrads)), fig(all_tiers(t, MemCategory::kOptimizer)),
        fig(all_tier_states(t)), share(all_tier_states(t), all_tier_states(f)),
        share(all_tiers(t, MemCategory::kOptimizer), all_tiers(f, MemCategory::kOptimizer)));
  }
  return out;
}

PlanReport plan_report(const PlanRequest& r, const ModelSpec* spec) {
  PlanReport out;
  const std::vector<PlanRow> rows = plan_rows(r);
  if (r.tuning.empty() || spec == nullptr) {
    out.text = format_plan(r, rows);
    out.json = plan_json(r, rows);
    return out;
  }
  // The same request over the model trained whole.
  ModelSpec whole = *spec;
  whole.tuning = Tuning{};
  const std::unique_ptr<Model> full_model = build_model(whole);
  PlanRequest full = r;
  set_plan_model(full, *full_model, whole.tuning);
  if (r.model == nullptr) full.model = nullptr;
  const std::vector<PlanRow> full_rows = plan_rows(full);
  out.text = "The full fine-tune:\n" + format_plan(full, full_rows) + "\n" + r.tuning + ":\n" +
             format_plan(r, rows) + format_tuning_comparison(r, full_rows, rows);
  out.json = plan_json(r, rows);
  out.json["full_fine_tune"] = plan_json(full, full_rows);
  nlohmann::ordered_json compared = nlohmann::ordered_json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const TierBytes& f = full_rows[i].states;
    const TierBytes& t = rows[i].states;
    compared.push_back({{"stage", rows[i].stage},
                        {"offload_optimizer", offload_name(rows[i].offload)},
                        {"offload_param", offload_name(rows[i].param_offload)},
                        {"full_model_states_bytes", all_tier_states(f)},
                        {"tuned_model_states_bytes", all_tier_states(t)},
                        {"full_optimizer_bytes", all_tiers(f, MemCategory::kOptimizer)},
                        {"tuned_optimizer_bytes", all_tiers(t, MemCategory::kOptimizer)}});
  }
  out.json["tuning_comparison"] = compared;
  return out;
}

}  // namespace zt
