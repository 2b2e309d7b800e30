// zt-plot: a run's metrics.jsonl as one PNG (tools/metrics_plot.h):
//   zt-plot RUN_DIR [--out FILE.png]     (RUN_DIR: zt.output_dir, or a metrics.jsonl)
// Prints the picture's path. Exit 2, one line: a missing or malformed metrics.jsonl, or one
// without step rows; exit 1: gnuplot missing or failing.
#include <boost/program_options.hpp>
#include <iostream>

#include "launch/tool_frame.h"
#include "runtime/status.h"
#include "tools/metrics_plot.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return zt::run_tool("zt-plot", [&] {
    std::string run, out;
    po::options_description desc("usage: zt-plot RUN_DIR [--out FILE.png]");
    desc.add_options()("help,h", "show this help")(
        "run", po::value(&run), "a run directory (zt.output_dir) or its metrics.jsonl")(
        "out", po::value(&out), "the PNG to write (default: RUN_DIR/metrics.png)");
    po::positional_options_description positional;
    positional.add("run", 1);
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(argc, argv).options(desc).positional(positional).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      zt::throw_input(fmt::format("{} (see zt-plot --help)", e.what()));
    }
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (run.empty()) zt::throw_input("give the run directory (see zt-plot --help)");
    const zt::MetricsPlot plot = zt::plot_metrics(run, out);
    std::cout << fmt::format("zt-plot: wrote {} ({} steps, {} evaluations; gnuplot script {})\n",
                             plot.png, plot.steps, plot.evaluations, plot.script);
    return 0;
  });
}
