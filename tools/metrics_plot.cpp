// zt-plot's drawing (metrics_plot.h).
#include "tools/metrics_plot.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scale_support.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The step rows of a metrics.jsonl: what each panel reads.
struct StepRow {
  int64_t step = 0;
  std::optional<double> loss, val_loss, lr, grad_norm, tokens_per_s;
  std::map<std::string, double> peak_bytes;  // by category
};

std::optional<double> number(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::vector<StepRow> read_rows(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw_input(fmt::format("cannot open {}: no metrics.jsonl there", path.string()));
  std::vector<StepRow> rows;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw_input(fmt::format("{}:{}: not JSON: {}", path.string(), line, e.what()));
    }
    const std::optional<double> step = number(row, "step");
    if (!row.is_object() || !step) continue;  // checkpoint, resume, restart, summary rows
    StepRow r;
    r.step = static_cast<int64_t>(*step);
    r.loss = number(row, "loss");
    r.val_loss = number(row, "val_loss");
    r.lr = number(row, "lr");
    r.grad_norm = number(row, "grad_norm");
    r.tokens_per_s = number(row, "tokens_per_s");
    if (const auto peak = row.find("peak_bytes"); peak != row.end() && peak->is_object())
      for (const auto& [category, bytes] : peak->items())
        if (bytes.is_number()) r.peak_bytes[category] = bytes.get<double>();
    rows.push_back(std::move(r));
  }
  return rows;
}

// A gnuplot datablock ($NAME << EOD ... EOD) of (step, value) where the value is present.
std::string datablock(const std::string& name, const std::vector<StepRow>& rows,
                      const std::function<std::optional<double>(const StepRow&)>& value) {
  std::string block = "$" + name + " << EOD\n";
  for (const StepRow& r : rows)
    if (const std::optional<double> v = value(r)) block += fmt::format("{} {:.9g}\n", r.step, *v);
  return block + "EOD\n";
}

std::string gp_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

MetricsPlot plot_metrics(const std::string& run, const std::string& out) {
  const fs::path metrics = fs::is_directory(run) ? fs::path(run) / "metrics.jsonl" : fs::path(run);
  const std::vector<StepRow> rows = read_rows(metrics);
  MetricsPlot result;
  for (const StepRow& r : rows) {
    result.steps += r.loss ? 1 : 0;
    result.evaluations += r.val_loss ? 1 : 0;
  }
  if (result.steps == 0)
    throw_input(fmt::format("{}: no step rows with a loss to plot", metrics.string()));
  result.png = out.empty() ? (metrics.parent_path() / "metrics.png").string() : out;
  fs::path script = result.png;
  result.script = script.replace_extension(".gp").string();
  const std::string temp = result.png + ".tmp";

  std::string gp = fmt::format("# zt-plot: {} (gnuplot {})\n", metrics.string(),
                               fs::path(result.script).filename().string());
  gp += datablock("loss", rows, [](const StepRow& r) { return r.loss; });
  gp += datablock("val_loss", rows, [](const StepRow& r) { return r.val_loss; });
  gp += datablock("lr", rows, [](const StepRow& r) { return r.lr; });
  gp += datablock("grad_norm", rows, [](const StepRow& r) { return r.grad_norm; });
  gp += datablock("tokens", rows, [](const StepRow& r) { return r.tokens_per_s; });
  std::vector<std::string> categories;
  for (const StepRow& r : rows)
    for (const auto& [category, bytes] : r.peak_bytes)
      if (std::find(categories.begin(), categories.end(), category) == categories.end())
        categories.push_back(category);
  for (size_t c = 0; c < categories.size(); ++c)
    gp += datablock(fmt::format("peak{}", c), rows, [&](const StepRow& r) -> std::optional<double> {
      const auto it = r.peak_bytes.find(categories[c]);
      if (it == r.peak_bytes.end()) return std::nullopt;
      return it->second / 1048576.0;
    });
  gp += fmt::format(
      "set terminal pngcairo size 1200,900 font 'sans,10'\n"
      "set output {}\n"
      "set multiplot layout 3,2 title {}\n"
      "set grid\nset key top right\nset xlabel 'step'\n",
      gp_string(temp), gp_string("zt-train: " + metrics.parent_path().filename().string()));
  gp += "set title 'loss'\nplot $loss using 1:2 with lines lw 2 title 'training'";
  gp += result.evaluations > 0
            ? ", $val_loss using 1:2 with linespoints lw 2 pt 7 title 'validation'\n"
            : "\n";
  gp += "set title 'learning rate'\nplot $lr using 1:2 with lines lw 2 notitle\n";
  gp +=
      "set title 'gradient norm (before clipping)'\nplot $grad_norm using 1:2 with lines lw 2 "
      "notitle\n";
  gp += "set title 'tokens/s'\nplot $tokens using 1:2 with lines lw 2 notitle\n";
  gp += "set title 'peak device memory (MiB)'\nset key outside right top\n";
  if (categories.empty()) {
    gp += "set label 'no peak_bytes in the rows' at graph 0.3, 0.5\nplot NaN notitle\n";
  } else {
    for (size_t c = 0; c < categories.size(); ++c)
      gp += fmt::format("{}$peak{} using 1:2 with lines lw 2 dt {} title {}",
                        c == 0 ? "plot " : ", ", c, c % 5 + 1, gp_string(categories[c]));
    gp += "\n";
  }
  gp += "unset multiplot\n";
  {
    AtomicFile f(result.script);
    f.write(gp);
    f.commit();
  }
  if (!scale::on_path("gnuplot"))
    throw_system(
        "gnuplot is not on PATH (scripts/install_deps.sh installs gnuplot-nox); the "
        "script is " +
        result.script);
  const fs::path err = result.png + ".gnuplot.err";
  const int code = scale::run_process({"gnuplot", result.script}, "/dev/null", err);
  if (code != 0 || !fs::exists(temp)) {
    const std::string why = scale::failure_line(err);
    fs::remove(err);
    fs::remove(temp);
    throw_system(fmt::format("gnuplot {} failed (exit {}): {}", result.script, code, why));
  }
  fs::remove(err);
  std::error_code ec;
  fs::rename(temp, result.png, ec);
  if (ec) throw_system(fmt::format("cannot rename {} to {}: {}", temp, result.png, ec.message()));
  return result;
}

}  // namespace zt
