// zt-bench: benchmarks. `zt-bench train|adam|offload|checkpoint|scale [options]`,
// `mpirun -np N zt-bench comm|zero [options]`; every subcommand takes --json PATH. This file only
// parses options; bench/bench_*.cpp measure.
#include <boost/program_options.hpp>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "bench/bench.h"
#include "launch/tool_frame.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"

namespace po = boost::program_options;

namespace {

// Parses argv (from the subcommand on) into vm; false when --help was printed instead.
bool parse_options(int argc, char** argv, const po::options_description& desc,
                   const char* subcommand, po::variables_map& vm) {
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-bench {} --help)", e.what(), subcommand));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return false;
  }
  return true;
}

int train_main(int argc, char** argv) {
  zt::BenchTrainOptions o;
  po::options_description desc("zt-bench train: GPT-2 training step vs the measured peak FMA rate");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&o.model)->default_value(o.model), "model zoo name")(
      "batch,B", po::value(&o.batch)->default_value(o.batch), "micro-batch size")(
      "seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length")(
      "steps", po::value(&o.steps)->default_value(o.steps), "timed steps")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")(
      "checkpoint", po::bool_switch(&o.checkpoint), "activation checkpointing of every block")(
      "precision", po::value<std::string>()->default_value("fp32"),
      "comma-separated list, every row built first and stepping in turn: fp32, bf16, fp16 "
      "(mixed, fp32 master), bf16-pure, fp16-pure (no master), or all")(
      "device", po::value(&o.device)->default_value(o.device), "cpu or cuda (GPU 0)")(
      "peak-tflops", po::value(&o.peak_tflops)->default_value(o.peak_tflops),
      "cuda: the GPU's dense 16-bit peak, for MFU")("allow-tf32", po::bool_switch(&o.allow_tf32),
                                                    "cuda: fp32 GEMMs may use TF32")(
      "profile", po::bool_switch(&o.profile),
      "time per Kernels entry per step, one table per precision")(
      "json", po::value(&o.json_path), "also write the figures to this JSON file")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "train", vm)) return 0;
  zt::parse_device_kind(o.device, "--device");
  o.precisions.clear();
  std::string list = vm["precision"].as<std::string>();
  if (list == "all") list = "fp32,bf16,fp16,bf16-pure,fp16-pure";
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, comma - at);
    if (name != "fp32" && name != "bf16" && name != "fp16" && name != "bf16-pure" &&
        name != "fp16-pure")
      zt::throw_input(
          fmt::format("--precision: unknown '{}'; use fp32, bf16, fp16, bf16-pure, "
                      "fp16-pure or all",
                      name));
    o.precisions.push_back(name);
    at = comma + 1;
  }
  if (o.batch <= 0 || o.seq_len <= 0 || o.steps <= 0 || o.warmup < 0)
    zt::throw_input("--batch, --seq-len and --steps must be > 0, --warmup >= 0");
  return zt::bench_train(o);
}

// "a,b,c" -> {"a", "b", "c"}; an empty entry is an error naming the option.
std::vector<std::string> split_words(const std::string& text, const char* option) {
  std::vector<std::string> words;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    words.push_back(text.substr(at, comma - at));
    if (words.back().empty())
      zt::throw_input(
          fmt::format("{}: empty entry in '{}' (a comma-separated list)", option, text));
    at = comma + 1;
  }
  return words;
}

int comm_main(int argc, char** argv) {
  zt::BenchCommOptions o;
  std::string min_bytes = "1K", max_bytes = "256M", chunk_bytes = "0";
  po::options_description desc(
      "zt-bench comm (under mpirun): MpiCommunicator's collectives vs raw MPI, nccl-tests style");
  desc.add_options()("help,h", "show this help")(
      "min-bytes,b", po::value(&min_bytes)->default_value(min_bytes), "smallest buffer (K/M/G)")(
      "max-bytes,e", po::value(&max_bytes)->default_value(max_bytes), "largest buffer (K/M/G)")(
      "iters,n", po::value(&o.iters)->default_value(o.iters),
      "timed calls per round (two rounds per size and implementation)")(
      "warmup,w", po::value(&o.warmup)->default_value(o.warmup), "untimed calls first")(
      "budget", po::value(&o.budget_seconds)->default_value(o.budget_seconds, "0.4"),
      "seconds of timed calls per size and implementation (fewer --iters, at least 2 per "
      "round, when calls are slow); 0: no cap")(
      "dtype,d", po::value(&o.dtype)->default_value(o.dtype), "fp32, fp16 or bf16")(
      "op", po::value(&o.ops)->multitoken(),
      "collectives to run (all_reduce reduce_scatter all_gather broadcast); default all")(
      "chunk-bytes", po::value(&chunk_bytes)->default_value(chunk_bytes),
      "reduce-scatter pipeline chunk (K/M); 0: the communicator's default")(
      "json", po::value(&o.json_path), "also write the rows to this JSON file (rank 0)")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "comm", vm)) return 0;
  o.min_bytes = zt::parse_byte_size(min_bytes);
  o.max_bytes = zt::parse_byte_size(max_bytes);
  o.chunk_bytes = static_cast<size_t>(zt::parse_byte_size(chunk_bytes));
  return zt::bench_comm(o);
}

int zero_main(int argc, char** argv) {
  zt::BenchZeroOptions o;
  po::options_description desc(
      "zt-bench zero (under mpirun): ZeRO stages 0-3 side by side, overlap_comm off and on");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&o.model)->default_value(o.model), "model zoo name")(
      "batch,B", po::value(&o.batch)->default_value(o.batch), "micro-batch size per rank")(
      "seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length")(
      "steps", po::value(&o.steps)->default_value(o.steps), "timed steps per configuration")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")(
      "json", po::value(&o.json_path), "also write the rows to this JSON file (rank 0)")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "zero", vm)) return 0;
  if (o.batch <= 0 || o.seq_len <= 0 || o.steps <= 0 || o.warmup < 0)
    zt::throw_input("--batch, --seq-len and --steps must be > 0, --warmup >= 0");
  return zt::bench_zero(o);
}

int adam_main(int argc, char** argv) {
  zt::BenchAdamOptions o;
  po::options_description desc(
      "zt-bench adam: the fused CPU Adam step (ZeRO-Offload's optimizer) vs STREAM triad");
  desc.add_options()("help,h", "show this help")(
      "params", po::value(&o.params)->default_value(o.params),
      "fp32 parameters in the shard (default: GPT-2 124M)")(
      "precision", po::value(&o.precision)->default_value(o.precision),
      "the working copy the step writes: none, bf16 or fp16")(
      "steps", po::value(&o.steps)->default_value(o.steps),
      "timed rounds (each: a triad, a fused step, a two-pass step)")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed rounds first")(
      "json", po::value(&o.json_path), "also write the figures to this JSON file")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "adam", vm)) return 0;
  if (o.precision != "none" && o.precision != "bf16" && o.precision != "fp16")
    zt::throw_input(fmt::format("--precision: unknown '{}'; use none, bf16 or fp16", o.precision));
  if (o.params <= 0 || o.steps <= 0 || o.warmup < 0)
    zt::throw_input("--params and --steps must be > 0, --warmup >= 0");
  return zt::bench_adam(o);
}

int offload_main(int argc, char** argv) {
  zt::BenchOffloadOptions o;
  double gib = 1.0;
  std::string unit = "64M", block = "1M", raw_block = "16M";
  bool no_io = false, no_step = false;
  po::options_description desc(
      "zt-bench offload: the NVMe swap store against raw sequential O_DIRECT I/O, same "
      "directory; then GPT-2 ZeRO-2 step time with the optimizer offloaded and without");
  desc.add_options()("help,h", "show this help")("no-io", po::bool_switch(&no_io),
                                                 "skip the I/O section")(
      "no-step", po::bool_switch(&no_step), "skip the step-time section")(
      "path", po::value(&o.path)->default_value(o.path), "directory on the disk to measure")(
      "gib", po::value(&gib)->default_value(gib), "GiB written and read per repeat")(
      "unit-bytes", po::value(&unit)->default_value(unit), "bytes per swap key (K/M/G)")(
      "raw-block", po::value(&raw_block)->default_value(raw_block),
      "bytes per pwrite/pread of the raw reference (K/M/G)")(
      "repeats", po::value(&o.repeats)->default_value(o.repeats), "rounds of raw and swap")(
      "block-size", po::value(&block)->default_value(block), "aio.block_size (K/M)")(
      "queue-depth", po::value(&o.aio.queue_depth)->default_value(o.aio.queue_depth),
      "aio.queue_depth")(
      "intra-op-parallelism",
      po::value(&o.aio.intra_op_parallelism)->default_value(o.aio.intra_op_parallelism),
      "aio.intra_op_parallelism (worker threads)")(
      "backend", po::value(&o.backend),
      "io_uring, libaio or threads (default: ZT_AIO_BACKEND "
      "or the first that works here)")("model", po::value(&o.model)->default_value(o.model),
                                       "step time: model zoo name")(
      "batch,B", po::value(&o.batch)->default_value(o.batch), "step time: micro-batch size")(
      "seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "step time: sequence length")(
      "steps", po::value(&o.steps)->default_value(o.steps), "step time: timed steps per row")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "step time: untimed steps first")(
      "precision", po::value(&o.precision)->default_value(o.precision),
      "step time: fp32, bf16 or fp16 (mixed, fp32 master)")(
      "gradient-clipping", po::value(&o.gradient_clipping)->default_value(o.gradient_clipping),
      "step time: max global norm of every row; 0: off (the cpu row's updates then start in "
      "the backward)")("json", po::value(&o.json_path), "also write the figures to this JSON file")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "offload", vm)) return 0;
  o.io = !no_io;
  o.step = !no_step;
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16")
    zt::throw_input(
        fmt::format("--precision: unknown '{}'; use fp32, bf16 or fp16 (offload "
                    "needs an fp32 master)",
                    o.precision));
  if (o.batch <= 0 || o.seq_len <= 0 || o.steps <= 0 || o.warmup < 0)
    zt::throw_input("--batch, --seq-len and --steps must be > 0, --warmup >= 0");
  o.unit_bytes = zt::parse_byte_size(unit);
  o.raw_block = zt::parse_byte_size(raw_block);
  o.aio.block_size = zt::parse_byte_size(block);
  if (!(gib > 0) || o.repeats <= 0 || o.unit_bytes <= 0 || o.raw_block <= 0 ||
      o.raw_block % zt::kAioAlignment != 0)
    zt::throw_input(
        "--gib, --repeats and --unit-bytes must be > 0, --raw-block a positive "
        "multiple of 4096");
  o.bytes =
      static_cast<int64_t>(gib * double(int64_t(1) << 30)) / zt::kAioAlignment * zt::kAioAlignment;
  return zt::bench_offload(o);
}

int checkpoint_main(int argc, char** argv) {
  zt::BenchCheckpointOptions o;
  po::options_description desc(
      "zt-bench checkpoint: a synchronous and an asynchronous checkpoint save of GPT-2 per round, "
      "the time training is blocked by each");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&o.model)->default_value(o.model), "model zoo name")(
      "batch,B", po::value(&o.batch)->default_value(o.batch), "micro-batch size")(
      "seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length")(
      "precision", po::value(&o.precision)->default_value(o.precision),
      "fp32, bf16, fp16, bf16-pure or fp16-pure")(
      "repeats", po::value(&o.repeats)->default_value(o.repeats), "rounds")(
      "path", po::value(&o.path)->default_value(o.path), "directory the checkpoints go under")(
      "json", po::value(&o.json_path), "also write the figures to this JSON file")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "checkpoint", vm)) return 0;
  if (o.batch <= 0 || o.seq_len <= 0 || o.repeats <= 0)
    zt::throw_input("--batch, --seq-len and --repeats must be > 0");
  return zt::bench_checkpoint(o);
}

// "1,2,4" -> the numbers, each in [lowest, highest]; one line naming the option otherwise.
std::vector<int> int_list(const std::string& text, const char* option, int lowest, int highest) {
  std::vector<int> values;
  for (const std::string& word : split_words(text, option)) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < lowest || value > highest)
      zt::throw_input(
          fmt::format("{}: '{}' is not an integer in [{}, {}]", option, word, lowest, highest));
    values.push_back(value);
  }
  return values;
}

// "fp32,bf16" -> the words, each one of `allowed`.
std::vector<std::string> word_list(const std::string& text, const char* option,
                                   const std::vector<std::string>& allowed) {
  std::vector<std::string> words = split_words(text, option);
  for (const std::string& word : words)
    if (std::find(allowed.begin(), allowed.end(), word) == allowed.end()) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      zt::throw_input(
          fmt::format("{}: unknown '{}'; use a comma-separated list of {}", option, word, names));
    }
  return words;
}

int scale_main(int argc, char** argv) {
  zt::BenchScaleOptions o;
  std::string stages = "0,1,2,3", ranks = "1,2,4", precision = "fp32", checkpointing = "off",
              offload = "none";
  po::options_description desc(
      "zt-bench scale (not under mpirun): a weak-scaling sweep of real zt-train runs, one "
      "zt-run per point of stages x ranks x precision x checkpointing x offload");
  desc.add_options()("help,h", "show this help")(
      "config", po::value(&o.config)->default_value(o.config), "the base config of every point")(
      "model", po::value(&o.model), "model zoo name (default: the config's zt.model)")(
      "batch,B", po::value(&o.batch), "micro-batch size per rank, fixed (default: the config's)")(
      "seq-len,T", po::value(&o.seq_len), "sequence length (default: the config's zt.seq_len)")(
      "steps", po::value(&o.steps)->default_value(o.steps), "zt.steps of every point")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup),
      "its first steps, not timed (median of the rest)")(
      "stages", po::value(&stages)->default_value(stages), "ZeRO stages, comma-separated")(
      "ranks", po::value(&ranks)->default_value(ranks), "ranks (-np), comma-separated")(
      "precision", po::value(&precision)->default_value(precision),
      "comma-separated: fp32, bf16, fp16 (mixed, fp32 master), bf16-pure, fp16-pure")(
      "checkpointing", po::value(&checkpointing)->default_value(checkpointing),
      "activation checkpointing of every block: off, on, or off,on")(
      "offload", po::value(&offload)->default_value(offload),
      "optimizer offload, comma-separated: none, cpu, nvme")(
      "hostfile", po::value(&o.hostfile), "Open MPI hostfile passed to zt-run (several nodes)")(
      "path", po::value(&o.path)->default_value(o.path), "nvme points: the swap files' directory")(
      "device", po::value(&o.device)->default_value(o.device), "cpu or cuda")(
      "peak-tflops", po::value(&o.peak_tflops),
      "cuda: one GPU's dense peak in TFLOP/s, for MFU (x ranks)")(
      "out", po::value(&o.out_dir)->default_value(o.out_dir),
      "directory of the table, plots and each point's run")(
      "json", po::value(&o.json_path), "the JSON file (default <out>/scale.json)")(
      "markdown", po::value(&o.markdown_path), "also write the tables as Markdown to this file");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, "scale", vm)) return 0;
  o.stages = int_list(stages, "--stages", 0, 3);
  o.ranks = int_list(ranks, "--ranks", 1, 4096);
  o.precisions =
      word_list(precision, "--precision", {"fp32", "bf16", "fp16", "bf16-pure", "fp16-pure"});
  o.checkpointing.clear();
  for (const std::string& w : word_list(checkpointing, "--checkpointing", {"off", "on"}))
    o.checkpointing.push_back(w == "on");
  o.offload = word_list(offload, "--offload", {"none", "cpu", "nvme"});
  zt::parse_device_kind(o.device, "--device");
  if (vm.count("batch") && o.batch <= 0) zt::throw_input("--batch must be > 0");
  if (vm.count("seq-len") && o.seq_len <= 0) zt::throw_input("--seq-len must be > 0");
  if (o.warmup < 0 || o.steps <= o.warmup)
    zt::throw_input(
        fmt::format("--steps ({}) must be more than --warmup ({}), which must be >= 0: "
                    "at least one step is timed",
                    o.steps, o.warmup));
  if (vm.count("peak-tflops") && !(o.peak_tflops > 0)) zt::throw_input("--peak-tflops must be > 0");
  if (vm.count("peak-tflops") && o.device != "cuda")
    zt::throw_input("--peak-tflops is for --device cuda; on the CPU the peak is measured");
  if (!o.hostfile.empty() && ::access(o.hostfile.c_str(), R_OK) != 0)
    zt::throw_input(fmt::format("--hostfile: cannot read {}", o.hostfile));
  if (o.out_dir.empty()) zt::throw_input("--out needs a directory");
  return zt::bench_scale(o);
}

int bench_main(int argc, char** argv) {
  const std::string usage =
      "usage: zt-bench train|adam|offload|checkpoint|scale [options] | mpirun -np N zt-bench "
      "comm|zero [options]   "
      "(zt-bench <subcommand> --help)";
  if (argc < 2) zt::throw_input(usage);
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h") {
    std::cout << usage << "\n";
    return 0;
  }
  if (sub == "train") return train_main(argc - 1, argv + 1);
  if (sub == "comm") return comm_main(argc - 1, argv + 1);
  if (sub == "zero") return zero_main(argc - 1, argv + 1);
  if (sub == "adam") return adam_main(argc - 1, argv + 1);
  if (sub == "offload") return offload_main(argc - 1, argv + 1);
  if (sub == "checkpoint") return checkpoint_main(argc - 1, argv + 1);
  if (sub == "scale") return scale_main(argc - 1, argv + 1);
  zt::throw_input(fmt::format("unknown subcommand '{}'; {}", sub, usage));
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zt-bench", [&] { return bench_main(argc, argv); });
}
