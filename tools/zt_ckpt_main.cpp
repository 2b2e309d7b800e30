// zt-ckpt: sharded checkpoints in and out (tools/checkpoint_tool.h).
//   zt-ckpt inspect DIR
//   zt-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16|fp16] [--model NAME | --config F]
//   zt-ckpt import IN.safetensors OUTDIR (--model NAME [--optimizer NAME] | --config F [--set ..])
// DIR is a checkpoint root (its `latest` is read) or one step directory. Runs on one process;
// memory stays near one unit's buffer. Exit 0, or 2 with one line naming the file for bad input,
// 1 for a failed write (tool_frame.h).
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launch/tool_frame.h"
#include "model_zoo/model_spec.h"
#include "runtime/status.h"
#include "tools/checkpoint_tool.h"
#include "train/trainer.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "usage: zt-ckpt inspect DIR\n"
    "       zt-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16|fp16] [--model NAME | "
    "--config FILE]\n"
    "       zt-ckpt import IN.safetensors OUTDIR (--model NAME [--optimizer NAME] | --config FILE "
    "[--set key=value]...)\n"
    "inspect:     the manifest, shard files and records of a checkpoint, every checksum verified\n"
    "consolidate: one safetensors file with Hugging Face GPT-2 names, streamed one unit at a time\n"
    "import:      a safetensors file to a step-0 checkpoint for zt-train --resume (fine-tuning)\n"
    "DIR is a checkpoint root (its `latest`) or a step directory. Options";

struct CommandLine {
  std::string command;
  std::vector<std::string> paths;
  std::string dtype = "fp32", model, config_path, optimizer = "adamw";
  std::vector<std::string> overrides;
  bool help = false;
  po::variables_map vm;
};

CommandLine parse_command_line(int argc, char** argv, std::string* help_text) {
  CommandLine cl;
  po::options_description desc(kUsage);
  desc.add_options()("help,h", "show this help")(
      "dtype", po::value(&cl.dtype), "consolidate: the file's dtype, fp32 (default), bf16 or fp16")(
      "model", po::value(&cl.model),
      "a zoo model: gpt2-tiny, gpt2-124M, gpt2-350M, gpt2-774M, "
      "gpt2-1558M (import: required unless --config; consolidate: checked against the "
      "checkpoint)")("config", po::value(&cl.config_path),
                     "a zt-train job config: its model, and for import "
                     "its optimizer, micro-batch, seq_len and seed (the fine-tuning run's)")(
      "set", po::value(&cl.overrides)->composing(), "override a config key (with --config)")(
      "optimizer", po::value(&cl.optimizer),
      "import with --model: the optimizer whose (zero) "
      "state to write: adamw or adam (exp_avg, exp_avg_sq), sgd-momentum (momentum), sgd (none)");
  po::options_description hidden;
  hidden.add_options()("command", po::value(&cl.command))("paths",
                                                          po::value(&cl.paths)->composing());
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("paths", -1);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), cl.vm);
    po::notify(cl.vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-ckpt --help)", e.what()));
  }
  std::ostringstream text;
  text << desc;
  *help_text = text.str();
  cl.help = cl.vm.count("help") > 0;
  if (cl.help) return cl;
  const size_t wanted = cl.command == "inspect" ? 1 : 2;
  if (cl.command != "inspect" && cl.command != "consolidate" && cl.command != "import")
    zt::throw_input(
        fmt::format("the command must be inspect, consolidate or import; got '{}' "
                    "(see zt-ckpt --help)",
                    cl.command));
  if (cl.paths.size() != wanted)
    zt::throw_input(fmt::format("zt-ckpt {} takes {} path{}; got {} (see zt-ckpt --help)",
                                cl.command, wanted, wanted == 1 ? "" : "s", cl.paths.size()));
  if (!cl.model.empty() && !cl.config_path.empty())
    zt::throw_input("give --model or --config, not both");
  if (!cl.overrides.empty() && cl.config_path.empty())
    zt::throw_input("--set applies to --config only");
  if (cl.command == "import" && cl.model.empty() && cl.config_path.empty())
    zt::throw_input("zt-ckpt import needs the model: --model NAME or --config FILE");
  if (cl.command == "inspect" && (!cl.model.empty() || !cl.config_path.empty()))
    zt::throw_input("zt-ckpt inspect takes no model");
  if (cl.command != "consolidate" && cl.vm.count("dtype"))
    zt::throw_input("--dtype applies to consolidate only");
  if ((cl.command != "import" || !cl.config_path.empty()) && cl.vm.count("optimizer"))
    zt::throw_input("--optimizer applies to import with --model only (a config names its own)");
  return cl;
}

zt::DType dtype_named(const std::string& name) {
  for (zt::DType t : {zt::DType::kF32, zt::DType::kBF16, zt::DType::kF16})
    if (name == zt::dtype_name(t)) return t;
  zt::throw_input(fmt::format("--dtype must be fp32, bf16 or fp16; got '{}'", name));
}

int run(const CommandLine& cl) {
  if (cl.command == "inspect") {
    std::fputs(zt::format_inspect_report(zt::inspect_checkpoint(cl.paths[0])).c_str(), stdout);
    return 0;
  }
  // The model, when given: a zoo name or a job config's.
  std::optional<zt::Config> config;
  std::unique_ptr<zt::Model> model;  // tables only; no tensor memory
  if (!cl.config_path.empty()) {
    config = zt::load_config(cl.config_path, cl.overrides, 1);
    model = zt::build_model(zt::resolve_model(*config));
  } else if (!cl.model.empty()) {
    model = zt::build_model(zt::zoo_model_spec(cl.model));
  }
  if (cl.command == "consolidate") {
    std::vector<zt::CheckpointUnit> units;
    if (model)
      for (zt::Unit* u : model->units())  // a frozen unit is the base's: not in checkpoints
        if (!u->frozen())
          units.push_back(zt::checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
    const zt::ConsolidateResult r = zt::consolidate_checkpoint(
        cl.paths[0], cl.paths[1], dtype_named(cl.dtype), model ? &units : nullptr);
    std::fputs(zt::format_consolidate_result(r, cl.paths[1]).c_str(), stdout);
    return 0;
  }
  zt::ImportOptions options;
  if (config) {
    options.optimizer = zt::engine_options(*config, *model).optimizer;
    options.micro_batch = config->train_micro_batch_size_per_gpu;
    options.seq_len = config->zt.seq_len;
    options.seed = config->zt.seed;
    options.config_source = config->source;
  } else {
    options.optimizer = zt::optimizer_named(cl.optimizer);
    options.seq_len = model->max_seq_len();
    options.config_source = "zt-ckpt import --model " + cl.model;
  }
  const zt::ImportResult r = zt::import_weights(cl.paths[0], cl.paths[1], *model, options);
  std::printf(
      "wrote %s: %.2fM parameters from %s, optimizer state [%s] zeros, step 0 (%.1f MiB; "
      "buffers held at most %.1f MiB, largest unit %.1f MiB)\n"
      "fine-tune with: zt-train --config CONFIG --resume %s\n",
      r.dir.c_str(), r.params / 1e6, cl.paths[0].c_str(),
      fmt::format("{}", fmt::join(r.optimizer_state, ", ")).c_str(), r.file_bytes / 1048576.0,
      r.buffer_peak_bytes / 1048576.0, r.largest_unit_bytes / 1048576.0, cl.paths[1].c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zt-ckpt", [&] {
    std::string help_text;
    const CommandLine cl = parse_command_line(argc, argv, &help_text);
    if (cl.help) {
      std::cout << help_text << "\n";
      return 0;
    }
    return run(cl);
  });
}
