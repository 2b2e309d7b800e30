// zt-bench: benchmarks. `zt-bench train [options]`; every subcommand takes --json PATH.
#include <boost/program_options.hpp>
#include <iostream>

#include "launch/bench.h"
#include "launch/tool_frame.h"
#include "runtime/status.h"

namespace po = boost::program_options;

namespace {

int bench_main(int argc, char** argv) {
  const std::string usage = "usage: zt-bench train [options]   (zt-bench train --help)";
  if (argc < 2) zt::throw_input(usage);
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h") {
    std::cout << usage << "\n";
    return 0;
  }
  if (sub != "train") zt::throw_input(fmt::format("unknown subcommand '{}'; {}", sub, usage));

  zt::BenchTrainOptions o;
  po::options_description desc("zt-bench train: GPT-2 training step vs measured sgemm rate");
  desc.add_options()("help,h", "show this help")
      ("model", po::value(&o.model)->default_value(o.model), "model zoo name")
      ("batch,B", po::value(&o.batch)->default_value(o.batch), "micro-batch size")
      ("seq-len,T", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length")
      ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps")
      ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")
      ("checkpoint", po::bool_switch(&o.checkpoint), "activation checkpointing of every block")
      ("json", po::value(&o.json_path), "also write the figures to this JSON file");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc - 1, argv + 1, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-bench train --help)", e.what()));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (o.batch <= 0 || o.seq_len <= 0 || o.steps <= 0 || o.warmup < 0)
    zt::throw_input("--batch, --seq-len and --steps must be > 0, --warmup >= 0");
  return zt::bench_train(o);
}

}  // namespace

int main(int argc, char** argv) {
  zt::ensure_thread_environment(argc, argv);
  return zt::run_tool("zt-bench", [&] { return bench_main(argc, argv); });
}
