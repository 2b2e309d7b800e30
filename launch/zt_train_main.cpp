// zt-train: trains a model from a JSON job config. `zt-train --config FILE [--set k.p=v]...`
#include <boost/program_options.hpp>
#include <iostream>

#include "launch/logger.h"
#include "launch/tool_frame.h"
#include "launch/trainer.h"
#include "runtime/status.h"

namespace po = boost::program_options;

namespace {

int train_main(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides;
  po::options_description desc("usage: zt-train --config FILE [--set key.path=value]...");
  desc.add_options()("help,h", "show this help")
      ("config,c", po::value(&config_path), "job config (JSON, DeepSpeed key names + zt block)")
      ("set", po::value(&overrides)->composing(),
       "override a config key, e.g. --set zt.steps=100 (repeatable; value parsed as JSON)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-train --help)", e.what()));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (config_path.empty()) zt::throw_input("--config FILE is required (see zt-train --help)");
  zt::Logger log;
  zt::Config config = zt::load_config(config_path, overrides, /*world_size=*/1);
  zt::train(config, log);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zt::ensure_thread_environment(argc, argv);
  return zt::run_tool("zt-train", [&] { return train_main(argc, argv); });
}
