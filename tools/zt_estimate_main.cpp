// zt-estimate: the memory a training job needs per rank, before any training (train/
// memory_plan.h): every ZeRO stage with and without offload_optimizer, model states per tier
// and category as the engine holds them, activations, communication per step, DeepSpeed's
// estimates beside, and with --device-memory the choices that fit, cheapest first. A LoRA run
// (--lora-r, or a config's zt.lora / zt.freeze) is planned with its frozen units beside the full
// fine-tune of the same model.
//   zt-estimate --model gpt2-124M --ranks 8 --micro-batch 4 --seq-len 1024
//   zt-estimate --model llama-3.2-1B --ranks 8 --lora-r 16 [--lora-targets q_proj,v_proj]
//   zt-estimate --config configs/x.json --ranks 4 [--set key.path=value]...
//   zt-estimate --params 7.5e9 --ranks 64
// Runs on one process; allocates no tensor memory.
#include <boost/program_options.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launch/tool_frame.h"
#include "model_zoo/model_spec.h"
#include "runtime/byte_count.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace po = boost::program_options;

namespace {

struct CommandLine {
  std::string model, config_path, params, precision = "bf16", optimizer = "adamw";
  std::string device_memory, json_path, lora_targets = "all-linear";
  std::vector<std::string> overrides;
  int ranks = 1, nodes = 1, units = 1, lora_r = 0;
  int64_t micro_batch = 0, seq_len = 0, persistence_threshold = 100'000;
  bool checkpoint = false, help = false;
  po::variables_map vm;
};

CommandLine parse_command_line(int argc, char** argv, std::string* help_text) {
  CommandLine cl;
  po::options_description desc(
      "usage: zt-estimate (--model NAME | --config FILE | --params N) [options]\n"
      "Memory per rank for ZeRO stages 0-3 with and without offload_optimizer. Options");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&cl.model),
      "a zoo model: gpt2-tiny, gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M, llama-tiny, "
      "llama-3.2-1B, qwen2-0.5B, qwen3-0.6B, mistral-7B-v0.1, phi3-mini-4k, ...")(
      "config", po::value(&cl.config_path),
      "a zt-train job config (its model, batch, precision, "
      "optimizer, checkpointing, stage and zt.device_memory_limit)")(
      "set", po::value(&cl.overrides)->composing(), "override a config key (with --config)")(
      "params", po::value(&cl.params), "a raw parameter count, e.g. 7.5e9 (model states only)")(
      "units", po::value(&cl.units), "with --params: units it is split into (default 1)")(
      "ranks", po::value(&cl.ranks), "ranks in all (data-parallel world size; default 1)")(
      "nodes", po::value(&cl.nodes),
      "nodes the ranks are on (DeepSpeed's CPU figures are per node)")(
      "micro-batch", po::value(&cl.micro_batch),
      "micro-batch per rank (default: the config's, or 1)")(
      "seq-len", po::value(&cl.seq_len), "sequence length (default: the config's, or n_positions)")(
      "precision", po::value(&cl.precision),
      "fp32, fp16 or bf16 (mixed, fp32 master; default bf16)")(
      "optimizer", po::value(&cl.optimizer),
      "adamw, adam (2 state tensors), sgd-momentum (1) or sgd (0)")(
      "checkpoint", po::bool_switch(&cl.checkpoint), "activation checkpointing of every block")(
      "persistence-threshold", po::value(&cl.persistence_threshold),
      "stage 3: units this small stay gathered (default 100000)")(
      "device-memory", po::value(&cl.device_memory),
      "device memory per rank, e.g. 6GB or 80GiB: "
      "list the choices that fit, cheapest first (default: the config's zt.device_memory_limit)")(
      "lora-r", po::value(&cl.lora_r),
      "with --model: also plan LoRA adapters of rank R, the base frozen, beside the full "
      "fine-tune (a config's LoRA is its zt.lora)")(
      "lora-targets", po::value(&cl.lora_targets),
      "with --lora-r: the modules adapted, comma-separated (q_proj,v_proj) or all-linear "
      "(default)")("json", po::value(&cl.json_path), "also write the plan as JSON to this file");
  try {
    po::store(po::parse_command_line(argc, argv, desc), cl.vm);
    po::notify(cl.vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-estimate --help)", e.what()));
  }
  std::ostringstream text;
  text << desc;
  *help_text = text.str();
  cl.help = cl.vm.count("help") > 0;
  if (cl.help) return cl;
  const int sources = !cl.model.empty() + !cl.config_path.empty() + !cl.params.empty();
  if (sources != 1)
    zt::throw_input("give exactly one of --model, --config and --params (see zt-estimate --help)");
  if (cl.ranks < 1 || cl.nodes < 1 || cl.ranks % cl.nodes != 0)
    zt::throw_input(fmt::format("--ranks ({}) must be a positive multiple of --nodes ({})",
                                cl.ranks, cl.nodes));
  if (cl.units < 1) zt::throw_input(fmt::format("--units must be >= 1; got {}", cl.units));
  if (!cl.overrides.empty() && cl.config_path.empty())
    zt::throw_input("--set applies to --config only");
  if (cl.vm.count("lora-r") && cl.model.empty())
    zt::throw_input(
        "--lora-r applies to --model only (a config's LoRA is its zt.lora: --set zt.lora.r=16)");
  if (cl.vm.count("lora-r") && cl.lora_r < 1)
    zt::throw_input(fmt::format("--lora-r must be >= 1; got {}", cl.lora_r));
  if (cl.vm.count("lora-targets") && !cl.vm.count("lora-r"))
    zt::throw_input("--lora-targets applies with --lora-r");
  return cl;
}

zt::Precision precision_named(const std::string& name) {
  zt::Precision p;
  if (name == "fp32") return p;
  if (name != "fp16" && name != "bf16")
    zt::throw_input(fmt::format("--precision must be fp32, fp16 or bf16; got '{}'", name));
  // The config's defaults: gradients stored and reduced in the compute dtype, an fp32 master.
  p.compute = p.grad_accum = p.comm = name == "fp16" ? zt::DType::kF16 : zt::DType::kBF16;
  return p;
}

int64_t parse_count(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v >= 1) || v > 1e15 || v != std::floor(v))
    zt::throw_input(fmt::format("--params must be a whole count such as 7.5e9; got '{}'", text));
  return static_cast<int64_t>(v);
}

// --lora-targets as LoraConfig::target_modules: "all-linear" or comma-separated module names.
std::vector<std::string> split_targets(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string name; std::getline(in, name, ',');) {
    if (name.empty())
      zt::throw_input(fmt::format("--lora-targets '{}' has an empty module name", text));
    out.push_back(name);
  }
  if (out.empty()) zt::throw_input("--lora-targets is empty");
  return out;
}

int run(const CommandLine& cl) {
  std::optional<zt::Config> config;
  std::optional<zt::ModelSpec> shape;
  std::unique_ptr<zt::Model> model;  // tables only; no tensor memory
  zt::PlanRequest r;
  if (!cl.config_path.empty()) {
    config = zt::load_config(cl.config_path, cl.overrides, cl.ranks);
    shape = zt::resolve_model(*config);
    zt::resolve_auto_from_model(*config, shape->hidden_size());
    model = zt::build_model(*shape);
    r = zt::plan_request_from_config(*config, *shape, *model, cl.ranks, cl.nodes);
  } else {
    r.ranks = cl.ranks;
    r.nodes = cl.nodes;
    r.engine.precision = precision_named(cl.precision);
    r.engine.optimizer = zt::optimizer_named(cl.optimizer);
    r.engine.persistence_threshold = cl.persistence_threshold;
    r.micro_batch = 1;
    if (!cl.model.empty()) {
      shape = zt::zoo_model_spec(cl.model);
      if (cl.lora_r > 0) {
        zt::Tuning tuning;
        tuning.lora.enabled = true;
        tuning.lora.r = cl.lora_r;
        tuning.lora.target_modules = split_targets(cl.lora_targets);
        shape->tuning = zt::resolve_tuning(*shape, tuning);
      }
      model = zt::build_model(*shape);  // refuses LoRA on a model without it (GPT-2)
      r.what = cl.model;
      zt::set_plan_model(r, *model, shape->tuning);
      r.seq_len = shape->max_positions();
      if (cl.checkpoint)
        for (zt::Layer* l : model->layers()) r.engine.checkpoint.push_back(l->checkpointable());
    } else {
      r.params = parse_count(cl.params);
      r.what = fmt::format("{} parameters", cl.params);
      r.units = zt::synthetic_unit_sizes(r.params, cl.units);
      r.trained_params = r.params;
      r.largest_unit_params = (r.params + cl.units - 1) / cl.units;
    }
  }
  if (cl.vm.count("micro-batch")) r.micro_batch = cl.micro_batch;
  if (cl.vm.count("seq-len")) r.seq_len = cl.seq_len;
  if (r.micro_batch < 1 || r.seq_len < 1)
    zt::throw_input(fmt::format("--micro-batch and --seq-len must be >= 1; got {} and {}",
                                r.micro_batch, r.seq_len));
  if (model && r.seq_len > model->max_seq_len())
    zt::throw_input(fmt::format("--seq-len {} is above the model's n_positions {}", r.seq_len,
                                model->max_seq_len()));
  if (!cl.device_memory.empty()) {
    const zt::ParsedByteCount parsed = zt::parse_byte_count(cl.device_memory);
    if (!parsed.problem.empty())
      zt::throw_input(fmt::format("--device-memory '{}' {}", cl.device_memory, parsed.problem));
    r.device_memory = parsed.bytes;
  }
  const zt::PlanReport report = zt::plan_report(r, shape ? &*shape : nullptr);
  std::fputs(report.text.c_str(), stdout);
  if (!cl.json_path.empty()) {
    zt::AtomicFile json(cl.json_path);
    json.write(report.json.dump(2) + "\n");
    json.commit();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zt-estimate", [&] {
    std::string help_text;
    const CommandLine cl = parse_command_line(argc, argv, &help_text);
    if (cl.help) {
      std::cout << help_text << "\n";
      return 0;
    }
    return run(cl);
  });
}
