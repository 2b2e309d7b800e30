// zt-generate: what a model answers. Loads a Hugging Face model directory (--model) or a
// zt-train checkpoint (--checkpoint with its job's --config), applies the chat template with
// --chat, and generates greedily or by temperature / top-k / top-p sampling with a key/value
// cache (generate/generator.h), on the CPU or a GPU; under mpirun the parameters are sharded
// (ZeRO stage 3 by default) and every rank generates the same tokens, rank 0 printing them.
//   zt-generate --model DIR --prompt TEXT [--chat] [--max-new-tokens N] [--json PATH]
//   zt-generate --model DIR --prompts FILE.jsonl ...   (exact match against "completion"s)
//   zt-generate --config JOB.json --checkpoint [DIR] --tokenizer DIR --prompt TEXT
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "comm/communicator_factory.h"
#include "comm/process_group.h"
#include "generate/generator.h"
#include "generate/prompts.h"
#include "launch/tool_frame.h"
#include "model_zoo/hf_config.h"
#include "model_zoo/model_spec.h"
#include "pretrained/weights_io.h"
#include "runtime/config.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/device_factory.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "tools/checkpoint_tool.h"
#include "train/trainer.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

struct CommandLine {
  std::string model_dir, config_path, tokenizer_dir, prompts_file, json_path, system;
  std::vector<std::string> overrides, prompts, stops;
  std::optional<std::string> checkpoint;  // --checkpoint [DIR]: "" without DIR
  bool chat = false;
  std::string bos, device = "cpu", dtype = "fp32";
  int64_t max_new_tokens = 64, context = 0;
  int zero_stage = -1;  // -1: 0 on one process, 3 under mpirun
  zt::SamplingOptions sampling;
};

std::optional<CommandLine> parse_command_line(int argc, char** argv) {
  CommandLine cl;
  po::options_description desc(
      "usage: zt-generate (--model DIR | --config JOB --checkpoint [DIR]) (--prompt TEXT... | "
      "--prompts FILE.jsonl) [options]");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&cl.model_dir), "a Hugging Face model directory (config.json, weights)")(
      "config", po::value(&cl.config_path), "with --checkpoint: the job config that trained it")(
      "set", po::value(&cl.overrides)->composing(), "override a key of --config (repeatable)")(
      "checkpoint", po::value<std::string>()->implicit_value(""),
      "a zt-train checkpoint: DIR (a root or a step directory), or without DIR --config's "
      "zt.checkpoint.dir")(
      "tokenizer", po::value(&cl.tokenizer_dir),
      "the directory of tokenizer.json (default: --model, or --config's zt.init_from)")(
      "prompt", po::value(&cl.prompts)->composing(), "a prompt (repeatable)")(
      "prompts", po::value(&cl.prompts_file),
      "JSONL: {\"prompt\", \"completion\"?} or {\"messages\"} per line; completions are scored")(
      "chat", po::bool_switch(&cl.chat), "render prompts with the model's chat template")(
      "system", po::value(&cl.system), "with --chat: a system message before each prompt")(
      "bos", po::value(&cl.bos), "a token put before each plain prompt (as zt-prep --bos)")(
      "max-new-tokens", po::value(&cl.max_new_tokens)->default_value(64), "tokens to generate")(
      "context", po::value(&cl.context)->default_value(0),
      "the key/value cache's tokens (default: the longest prompt + max-new-tokens)")(
      "temperature", po::value(&cl.sampling.temperature)->default_value(0.0f),
      "0: greedy; > 0: sample")("top-p", po::value(&cl.sampling.top_p)->default_value(1.0f),
                                "nucleus sampling's probability mass")(
      "top-k", po::value(&cl.sampling.top_k)->default_value(0), "sample from the k likeliest")(
      "seed", po::value(&cl.sampling.seed)->default_value(0), "the sampling seed")(
      "stop", po::value(&cl.stops)->composing(),
      "a token that ends generation (repeatable; default: the model's eos_token_id)")(
      "device", po::value(&cl.device), "cpu (default) or cuda")(
      "dtype", po::value(&cl.dtype), "fp32 (default), bf16 or fp16: weights and activations")(
      "zero-stage", po::value(&cl.zero_stage), "0 or 3 (default: 0, or 3 under mpirun)")(
      "json", po::value(&cl.json_path), "write the prompts' ids, tokens and text as JSON");
  const std::vector<std::string> args = zt::attach_optional_value(argc, argv, "--checkpoint");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-generate --help)", e.what()));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  if (vm.count("checkpoint")) cl.checkpoint = vm["checkpoint"].as<std::string>();
  if (cl.model_dir.empty() == !cl.checkpoint)
    zt::throw_input("give exactly one of --model DIR and --checkpoint [DIR] (see --help)");
  if (cl.checkpoint && cl.config_path.empty())
    zt::throw_input("--checkpoint needs --config, the job config that trained it");
  if (cl.prompts.empty() == cl.prompts_file.empty())
    zt::throw_input("give --prompt TEXT (repeatable) or --prompts FILE.jsonl");
  if (cl.max_new_tokens < 1)
    zt::throw_input(fmt::format("--max-new-tokens must be >= 1; got {}", cl.max_new_tokens));
  if (cl.zero_stage != -1 && cl.zero_stage != 0 && cl.zero_stage != 3)
    zt::throw_input(fmt::format("--zero-stage must be 0 or 3; got {}", cl.zero_stage));
  if (!cl.system.empty() && !cl.chat) zt::throw_input("--system needs --chat");
  zt::validate_sampling(cl.sampling, "zt-generate");
  return cl;
}

// The engine of a forward-only job: no optimizer state (plain SGD), pure 16-bit (no master)
// below fp32, the stage given.
zt::EngineOptions engine_options(const CommandLine& cl, int world) {
  zt::EngineOptions o;
  o.optimizer.type = zt::OptimizerOptions::Type::kSgd;
  const int stage = cl.zero_stage >= 0 ? cl.zero_stage : world > 1 ? 3 : 0;
  o.policy = zt::ZeroPolicy::for_stage(stage);
  if (cl.dtype != "fp32") {
    const zt::DType d =
        cl.dtype == "bf16" ? zt::DType::kBF16
        : cl.dtype == "fp16"
            ? zt::DType::kF16
            : (zt::throw_input(fmt::format("--dtype must be fp32, bf16 or fp16; got {}", cl.dtype)),
               zt::DType::kF32);
    o.precision.compute = o.precision.grad_accum = o.precision.comm = d;
    o.precision.master_weights = false;
  }
  return o;
}

struct Job {
  zt::ModelSpec spec;
  std::string weights;        // a model directory or a safetensors file
  std::string tokenizer_dir;  // tokenizer.json's, and the stop ids' model files
  std::string temp_weights;   // a consolidated checkpoint to remove afterwards
  // A run with frozen units: its base weights (zt.init_from), loaded before the checkpoint's
  // trained parameters.
  std::string base;
};

Job resolve_job(const CommandLine& cl, int rank, int world) {
  Job job;
  if (!cl.model_dir.empty()) {
    job.spec = zt::read_hf_config(cl.model_dir);
    job.weights = job.tokenizer_dir = cl.model_dir;
  } else {
    const zt::Config config = zt::load_config(cl.config_path, cl.overrides, world);
    job.spec = zt::resolve_model(config);
    std::string dir = *cl.checkpoint;
    if (dir.empty())
      dir = config.zt.checkpoint.dir.empty()
                ? (fs::path(config.zt.output_dir) / "checkpoints").string()
                : config.zt.checkpoint.dir;
    const std::unique_ptr<zt::Model> model = zt::build_model(job.spec);
    std::vector<zt::CheckpointUnit> units;
    for (zt::Unit* u : model->units()) {
      if (u->frozen()) continue;  // not in the checkpoint: the base of zt.init_from
      units.push_back(zt::checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
    }
    if (units.size() < model->units().size()) {
      if (config.zt.init_from.empty())
        zt::throw_input(fmt::format(
            "{}: the run froze parameters (zt.freeze, zt.lora) but names no zt.init_from: its "
            "checkpoint holds the trained parameters only, and the base is not known",
            config.source));
      job.base = config.zt.init_from;
    }
    job.temp_weights =
        (fs::temp_directory_path() / fmt::format("zt-generate-{}-{}.safetensors", ::getpid(), rank))
            .string();
    zt::consolidate_checkpoint(dir, job.temp_weights, zt::DType::kF32, &units);
    job.weights = job.temp_weights;
    if (zt::is_hf_model_dir(config.zt.init_from)) job.tokenizer_dir = config.zt.init_from;
  }
  if (!cl.tokenizer_dir.empty()) job.tokenizer_dir = cl.tokenizer_dir;
  if (job.tokenizer_dir.empty())
    zt::throw_input("no tokenizer: give --tokenizer DIR (the directory of tokenizer.json)");
  return job;
}

// The prompts, tokenised; the stop ids.
struct Work {
  std::vector<zt::Prompt> prompts;
  std::vector<int32_t> stop_ids;
};

Work prepare(const CommandLine& cl, const Job& job, zt::BpeTokenizer& tokenizer,
             std::optional<zt::ChatTemplate>& chat) {
  zt::PromptOptions options;
  if (cl.chat) {
    chat.emplace(zt::ChatTemplate::load(job.tokenizer_dir));
    options.chat = &*chat;
    options.system = cl.system;
  }
  auto token = [&](const std::string& content, const char* option) {
    const std::optional<int32_t> id = tokenizer.token_id(content);
    if (!id)
      zt::throw_input(fmt::format("{}: {} '{}' is not a token of {}", option, option, content,
                                  tokenizer.source()));
    return *id;
  };
  if (!cl.bos.empty()) options.bos_id = token(cl.bos, "--bos");
  Work w;
  if (!cl.prompts_file.empty()) w.prompts = zt::read_prompts(cl.prompts_file, tokenizer, options);
  for (size_t i = 0; i < cl.prompts.size(); ++i)
    w.prompts.push_back(zt::make_prompt({{"prompt", cl.prompts[i]}},
                                        fmt::format("--prompt {}", i + 1), tokenizer, options));
  for (const std::string& stop : cl.stops) w.stop_ids.push_back(token(stop, "--stop"));
  if (cl.stops.empty()) w.stop_ids = zt::default_stop_ids(job.tokenizer_dir, tokenizer);
  return w;
}

// Generates every prompt; rank 0 prints each answer and the summary, and writes --json.
void run(const CommandLine& cl, const Job& job, zt::Engine& engine, zt::BpeTokenizer& tokenizer,
         const Work& work, int rank) {
  size_t longest = 0;
  for (const zt::Prompt& p : work.prompts) longest = std::max(longest, p.ids.size());
  const int64_t context = cl.context > 0
                              ? cl.context
                              : std::min<int64_t>(static_cast<int64_t>(longest) + cl.max_new_tokens,
                                                  engine.model().max_seq_len());
  zt::Generator generator(engine, context);
  zt::GenerateOptions options{cl.max_new_tokens, work.stop_ids, cl.sampling};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  int64_t scored = 0, matched = 0, tokens = 0, stopped = 0;
  double prefill = 0.0, decode = 0.0;
  for (const zt::Prompt& p : work.prompts) {
    const zt::Generation g = generator.generate(p.ids, options);
    std::vector<int32_t> answer_ids = g.ids;
    if (g.stopped) answer_ids.pop_back();  // the stop token is not part of the answer
    const std::string answer =
        tokenizer.decode_for_display(answer_ids, zt::SkipSpecialTokens::kYes);
    tokens += static_cast<int64_t>(g.ids.size());
    stopped += g.stopped ? 1 : 0;
    prefill += g.prefill_seconds;
    decode += g.decode_seconds;
    nlohmann::ordered_json row = {
        {"where", p.where}, {"input", p.input}, {"prompt_text", p.text}, {"prompt_ids", p.ids},
        {"ids", g.ids},     {"text", answer},   {"stopped", g.stopped}};
    if (p.expected) {
      const bool match = zt::exact_match(answer, *p.expected);
      row["expected"] = *p.expected;
      row["exact_match"] = match;
      ++scored;
      matched += match ? 1 : 0;
    }
    if (rank == 0) std::cout << answer << "\n" << (work.prompts.size() > 1 ? "---\n" : "");
    rows.push_back(std::move(row));
  }
  if (rank != 0) return;
  std::string summary = fmt::format(
      "zt-generate: {} prompts, {} tokens, {} ended by a stop token; prefill {:.3f} s, decode "
      "{:.1f} tokens/s ({}, {})",
      work.prompts.size(), tokens, stopped, prefill,
      decode > 0 ? static_cast<double>(tokens - static_cast<int64_t>(work.prompts.size())) / decode
                 : 0.0,
      engine.device().name(), cl.dtype);
  if (scored > 0)
    summary += fmt::format("; exact match {}/{} ({:.1f}%)", matched, scored,
                           100.0 * static_cast<double>(matched) / static_cast<double>(scored));
  std::cerr << summary << "\n";
  if (!cl.json_path.empty()) {
    nlohmann::ordered_json j = {{"model", job.weights},
                                {"dtype", cl.dtype},
                                {"device", engine.device().name()},
                                {"stop_ids", work.stop_ids},
                                {"prompts", rows}};
    if (scored > 0) j["exact_match"] = {{"matched", matched}, {"scored", scored}};
    zt::AtomicFile out(cl.json_path);
    out.write(j.dump(2) + "\n");
    out.commit();
  }
}

}  // namespace

int main(int argc, char** argv) {
  zt::MpiSession mpi(&argc, &argv);
  const zt::ProcessGroup& group = mpi.group();
  std::optional<CommandLine> cl;
  Job job;
  std::optional<zt::BpeTokenizer> tokenizer;
  std::optional<zt::ChatTemplate> chat;
  Work work;
  std::unique_ptr<zt::Device> device;
  bool help = false;
  const int setup_code = zt::agree_on_exit_code("zt-generate", group.rank, group.world, [&] {
    cl = parse_command_line(argc, argv);
    if (!cl) return help = true, 0;
    job = resolve_job(*cl, group.rank, group.world);
    tokenizer.emplace(zt::load_tokenizer_json(job.tokenizer_dir));
    work = prepare(*cl, job, *tokenizer, chat);
    const zt::DeviceKind kind = zt::parse_device_kind(cl->device, "--device");
    device = zt::make_device(kind, kind == zt::DeviceKind::kCuda
                                       ? group.local_rank % std::max(1, zt::cuda_device_count())
                                       : 0);
    return 0;
  });
  if (setup_code != 0 || help) return setup_code;
  const int code = zt::run_tool(
      "zt-generate",
      [&] {
        const std::unique_ptr<zt::Communicator> comm =
            zt::make_communicator("auto", *device, 600.0);
        const std::unique_ptr<zt::Model> model = zt::build_model(job.spec);
        zt::Engine engine(*device, *comm, *model, engine_options(*cl, group.world));
        if (job.base.empty()) {
          zt::load_weights(engine, job.weights);
        } else {
          zt::load_weights(engine, job.base);
          zt::load_trainable_weights(engine, job.weights);
        }
        run(*cl, job, engine, *tokenizer, work, group.rank);
        return 0;
      },
      group.world > 1 ? group.rank : -1);
  if (!job.temp_weights.empty()) fs::remove(job.temp_weights);
  if (code != 0 && group.world > 1) mpi.abort(code);
  return code;
}
