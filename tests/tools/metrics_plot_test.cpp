// zt-plot (tools/metrics_plot.h): a small metrics.jsonl (step rows with peak memory, evaluation
// rows, and the other rows it passes over) drawn as a PNG: the file starts with PNG's signature,
// its IHDR says 1200 x 900, it is not trivially small, and the gnuplot script beside it holds
// every step's loss. Bad input (no file, a row that is not JSON, no step rows) is kInput naming
// the file, and leaves no picture. Skips without gnuplot.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "bench/scale_support.h"
#include "runtime/status.h"
#include "tools/metrics_plot.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("zt_plot_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path / "run");
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint32_t big_endian(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

void write_metrics(const fs::path& path) {
  std::ofstream out(path);
  out << R"({"step": 0, "val_loss": 10.9})"
      << "\n";
  out << R"({"event": "restart", "restart": 1})"
      << "\n";
  for (int s = 1; s <= 40; ++s)
    out << fmt::format(
               R"({{"step": {}, "loss": {}, "lr": {}, "grad_norm": {}, "ms": 10, "tokens_per_s": {},)"
               R"( "peak_bytes": {{"params": 1048576, "activations": {}}}}})",
               s, 10.0 / s + 1.0, 1e-3 * s / 40.0, 2.0 / s, 1000 + s, 2097152 + 1000 * s)
        << "\n";
  out << R"({"step": 20, "val_loss": 1.7})"
      << "\n";
  out << R"({"checkpoint": "step20", "save_ms": 4})"
      << "\n";
  out << R"({"summary": {"ranks": 2}})"
      << "\n";
}

TEST(MetricsPlotTest, DrawsAPngOfTheRun) {
  if (!scale::on_path("gnuplot"))
    GTEST_SKIP() << "gnuplot is not on PATH (scripts/install_deps.sh)";
  TempDir dir;
  write_metrics(dir.path / "run" / "metrics.jsonl");
  const MetricsPlot plot = plot_metrics((dir.path / "run").string(), "");
  EXPECT_EQ(plot.png, (dir.path / "run" / "metrics.png").string());
  EXPECT_EQ(plot.steps, 40);
  EXPECT_EQ(plot.evaluations, 2);
  const std::string png = bytes_of(plot.png);
  ASSERT_GE(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(png, 16), 1200u);
  EXPECT_EQ(big_endian(png, 20), 900u);
  EXPECT_GT(png.size(), 20000u) << "six panels of curves are not a few bytes";
  const std::string script = bytes_of(plot.script);
  EXPECT_NE(script.find("40 1.25\n"), std::string::npos) << "step 40's loss in the data";
  EXPECT_NE(script.find("'activations'"), std::string::npos);
  EXPECT_FALSE(fs::exists(plot.png + ".tmp"));
}

TEST(MetricsPlotTest, RefusesWhatIsNotAMetricsFile) {
  TempDir dir;
  auto message = [&](const std::string& run) {
    try {
      plot_metrics(run, (dir.path / "x.png").string());
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message((dir.path / "none").string()).find("none"), std::string::npos);
  std::ofstream(dir.path / "bad.jsonl") << "{\"step\": 1, \"loss\": 2}\nnot json\n";
  EXPECT_NE(message((dir.path / "bad.jsonl").string()).find("bad.jsonl:2"), std::string::npos);
  std::ofstream(dir.path / "empty.jsonl") << "{\"summary\": {}}\n";
  EXPECT_NE(message((dir.path / "empty.jsonl").string()).find("no step rows"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "x.png"));
}

}  // namespace
}  // namespace zt
