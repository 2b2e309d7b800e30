// zt-bench scale's child processes and plots (bench/scale_support.h).
#include "bench/scale_support.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt::scale {

bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return true;
  }
  return false;
}

int run_process(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err,
                const fs::path& cwd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0)
    throw_system(fmt::format("cannot start {}: fork: {}", argv[0], std::strerror(errno)));
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0 || ::dup2(in, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0)
      ::_exit(127);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(args[0], args.data());
    const char* message = "zt-bench scale: cannot execute the program\n";
    (void)::write(2, message, std::strlen(message));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw_system(fmt::format("waitpid for {}: {}", argv[0], std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string failure_line(const fs::path& err) {
  std::ifstream in(err);
  std::string last, last_tool;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" -\t\r") == std::string::npos) continue;
    last = line;
    if (line.starts_with("zt-train: ")) last_tool = line;
  }
  return !last_tool.empty() ? last_tool : !last.empty() ? last : "(no output on stderr)";
}

namespace {

// The plots' lines: one per stage and combination of the other axes, ok points by ranks.
struct PlotLine {
  std::string title;
  int stage = 0, combination = 0;
  std::vector<const ScalePoint*> points;
};

std::vector<PlotLine> plot_lines(const BenchScaleOptions& o,
                                 const std::vector<ScalePoint>& points) {
  // The title names only the axes the sweep varies besides the stage.
  const bool many_precisions = o.precisions.size() > 1, many_ckpt = o.checkpointing.size() > 1,
             many_offload = o.offload.size() > 1;
  std::map<std::tuple<std::string, bool, std::string>, int> combinations;
  std::map<std::pair<int, int>, PlotLine> lines;  // (combination, stage)
  for (const ScalePoint& p : points) {
    if (p.status != ScalePoint::Status::kOk) continue;
    const auto key = std::make_tuple(p.precision, p.checkpointing, p.offload);
    const int c = combinations.emplace(key, static_cast<int>(combinations.size())).first->second;
    PlotLine& line = lines[{c, p.stage}];
    if (line.points.empty()) {
      line.stage = p.stage;
      line.combination = c;
      line.title = fmt::format("stage {}", p.stage);
      if (many_precisions) line.title += ", " + p.precision;
      if (many_ckpt) line.title += p.checkpointing ? ", ckpt on" : ", ckpt off";
      if (many_offload) line.title += ", offload " + p.offload;
    }
    line.points.push_back(&p);
  }
  std::vector<PlotLine> out;
  for (auto& [key, line] : lines) {
    std::sort(line.points.begin(), line.points.end(),
              [](const ScalePoint* a, const ScalePoint* b) { return a->ranks < b->ranks; });
    out.push_back(std::move(line));
  }
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  AtomicFile f(path.string());
  f.write(text);
  f.commit();
}

// <out>/NAME.dat (one block per line: ranks, value) and NAME.gp, and, with gnuplot on PATH,
// NAME.png. Returns false when gnuplot is missing.
bool plot(const fs::path& out, const std::string& name, const std::string& title,
          const std::string& ylabel, const std::vector<PlotLine>& lines,
          const std::vector<int>& ranks, double (*value)(const ScalePoint&)) {
  std::string dat;
  for (const PlotLine& line : lines) {
    dat += fmt::format("# {}\n", line.title);
    for (const ScalePoint* p : line.points) dat += fmt::format("{} {:.6g}\n", p->ranks, value(*p));
    dat += "\n\n";  // gnuplot's index separator
  }
  write_file(out / (name + ".dat"), dat);
  std::string xtics;
  for (int r : ranks) xtics += fmt::format("{}\"{}\" {}", xtics.empty() ? "" : ", ", r, r);
  const int max_ranks = *std::max_element(ranks.begin(), ranks.end());
  const int min_ranks = *std::min_element(ranks.begin(), ranks.end());
  std::string gp = fmt::format(
      "# zt-bench scale: {} (gnuplot {}.gp, in this directory)\n"
      "set terminal pngcairo size 960,{} font 'sans,11'\n"
      "set output '{}.png'\n"
      "set title \"{}\"\n"
      "set xlabel 'ranks (log_2 scale)'\n"
      "set ylabel '{}'\n"
      "set logscale x 2\n"
      "set xrange [{}:{}]\n"
      "set xtics ({})\n"
      "set yrange [0:*]\n"
      "set grid\n"
      "set key below\n",
      name, name, 560 + 20 * static_cast<int>((lines.size() + 2) / 3), name, title, ylabel,
      min_ranks / 1.25, max_ranks * 1.25, xtics);
  // A colour per stage; a dash type and point shape per combination of the other axes.
  static constexpr const char* kStageColour[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
  static constexpr int kPointType[] = {7, 5, 9, 11, 13, 15};
  std::string plots;
  for (size_t i = 0; i < lines.size(); ++i)
    plots += fmt::format(
        "{}'{}.dat' index {} using 1:2 with linespoints lw 2 pt {} ps 1.3 "
        "lc rgb '{}' dt {} title \"{}\"",
        i == 0 ? "plot " : ", \\\n     ", name, i, kPointType[lines[i].combination % 6],
        kStageColour[lines[i].stage % 4], lines[i].combination + 1, lines[i].title);
  gp += plots.empty() ? "set label 'no point succeeded' at graph 0.4, 0.5\nplot NaN notitle\n"
                      : plots + "\n";
  write_file(out / (name + ".gp"), gp);
  if (!on_path("gnuplot")) return false;
  const int code = run_process({"gnuplot", name + ".gp"}, out / (name + ".gnuplot.out"),
                               out / (name + ".gnuplot.err"), out);
  if (code != 0)
    throw_system(fmt::format("gnuplot {} failed (exit {}): {}", (out / (name + ".gp")).string(),
                             code, failure_line(out / (name + ".gnuplot.err"))));
  fs::remove(out / (name + ".gnuplot.out"));
  fs::remove(out / (name + ".gnuplot.err"));
  return true;
}

}  // namespace

bool draw_plots(const BenchScaleOptions& o, const fs::path& out, const std::string& subtitle,
                const std::vector<ScalePoint>& points) {
  const std::vector<PlotLine> lines = plot_lines(o, points);
  const bool drawn = plot(
      out, "throughput", "zt-bench scale: tokens/s, all ranks (" + subtitle + ")",
      "tokens/s (all ranks)", lines, o.ranks, [](const ScalePoint& p) { return p.tokens_per_s; });
  plot(out, "memory", "zt-bench scale: device peak memory per rank (" + subtitle + ")",
       "device peak MiB per rank (max over ranks)", lines, o.ranks,
       [](const ScalePoint& p) { return mib(p.device_bytes()); });
  return drawn;
}

}  // namespace zt::scale
