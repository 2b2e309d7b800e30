// zt-plot's work, as a library call (tests/tools/metrics_plot_test.cpp drives it in process): a
// run's metrics.jsonl (train/metrics_writer.h's rows) drawn as one PNG of six panels against the
// step: training and validation loss, learning rate, gradient norm, tokens/s, and peak device
// memory per category (MiB). gnuplot draws it from a script that holds the data inline
// (<out without .png>.gp, kept beside the picture so it can be edited and drawn again); the PNG
// is written to a temporary name and renamed, so a failed plot leaves no partial file.
// Errors: kInput naming the file (missing, a row that is not JSON, no step rows); kSystem when
// gnuplot is not on PATH or fails (its last line of stderr quoted).
#pragma once

#include <string>

namespace zt {

struct MetricsPlot {
  std::string png;      // the picture written
  std::string script;   // the gnuplot script beside it
  int steps = 0;        // step rows drawn
  int evaluations = 0;  // rows with a validation loss
};

// `run`: a run directory (zt.output_dir, holding metrics.jsonl) or a metrics.jsonl file. `out`:
// the PNG to write; empty: <run directory>/metrics.png.
MetricsPlot plot_metrics(const std::string& run, const std::string& out);

}  // namespace zt
