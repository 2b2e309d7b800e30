// The one timing harness every zt-bench benchmark fills in (nccl-tests' src/common.cu is the
// peer: one loop, one statistics, one output, many measured bodies):
//   Rounds      warm-up rounds, then timed rounds; every round calls each entry once, in order,
//               so a neighbour's load falls on all of a round's entries alike
//   Summary     median and quartiles (each a measured value: the nearest rank), min, max, count
//   paired_ratio  the per-round ratio a[i] / b[i] of two entries, summarised: a noisy round moves
//               both sides of its ratio, so the ratio is steadier than a ratio of medians
//   Reference   the hardware's figure measured in the same run (the cores' peak FMA rate, STREAM,
//               raw MPI, raw O_DIRECT I/O, the GPU's dense peak), named beside every ratio to it
//   Table       one table, printed as aligned columns and written as Markdown
//   Report      the run's JSON (the machine, then each benchmark's sections) and Markdown files,
//               written whole or not at all (runtime/file_io.h's AtomicFile)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/logger.h"

namespace zt::bench {

using Clock = std::chrono::steady_clock;

// Milliseconds from `t0` to now, and the milliseconds `body` takes.
double ms_since(Clock::time_point t0);
double time_ms(const std::function<void()>& body);

// Median, quartiles, min and max of measured values. Each order statistic is a value that was
// measured, never an average of two: the value at index round(f * (n - 1)) of the sorted values
// (for the median of an even count, the upper of the two middle ones). All zero for none.
struct Summary {
  double median = 0.0, q1 = 0.0, q3 = 0.0, min = 0.0, max = 0.0;
  int n = 0;
};
Summary summarize(std::vector<double> values);
// {"median", "q1", "q3", "min", "max", "n"}.
nlohmann::ordered_json to_json(const Summary& s);
// "12.3 (12.1-12.9)": the median and the quartiles, `digits` after the point.
std::string quartile_cell(const Summary& s, int digits = 1);

// The per-round ratios a[i] / b[i], summarised. a and b must have the same length.
Summary paired_ratio(const std::vector<double>& a, const std::vector<double>& b);

// Warm-up rounds whose figures are dropped, then timed rounds. Each entry's body is called once
// per round, in the order added, and returns its figure for that round (milliseconds, or a rate
// such as GB/s: the body decides what it measures and times only that; time_ms helps).
// Order::kAlternate runs odd rounds in the reverse order (A B, B A, A B, ...), so that no entry
// gains from always going first or last.
class Rounds {
 public:
  enum class Order { kSame, kAlternate };
  Rounds(int warmup, int rounds, Order order = Order::kSame);
  // `body(round)`: round counts from 0 over warm-up and timed rounds together.
  void add(std::string name, std::function<double(int round)> body);
  void run();
  int rounds() const { return rounds_; }
  // The timed figures of the entry named `name`, one per timed round.
  const std::vector<double>& figures(const std::string& name) const;
  Summary summary(const std::string& name) const { return summarize(figures(name)); }

 private:
  struct Entry {
    std::string name;
    std::function<double(int)> body;
    std::vector<double> figures;
  };
  const Entry& entry(const std::string& name) const;
  int warmup_, rounds_;
  Order order_;
  std::vector<Entry> entries_;
};

// The hardware figure a benchmark's ratios are taken against, measured in the same run: what it
// is ("peak fp32 FMA, 2 threads"), its unit ("GFLOP/s", "GB/s", "ms"), and its value.
struct Reference {
  std::string name, unit;
  double value = 0.0;
};
nlohmann::ordered_json to_json(const Reference& r);

// One table: a title, a header and rows of cells, printed as aligned columns (first column left,
// the others right) and written as a Markdown table. A row with fewer cells is padded.
class Table {
 public:
  Table(std::string title, std::vector<std::string> header);
  void add_row(std::vector<std::string> cells);
  // Lines below the table (what the columns mean, what the ratio is against).
  void add_note(std::string note);
  void print(const Logger& log) const;
  std::string markdown() const;

 private:
  std::string title_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

// A benchmark's outputs: json() starts with {"bench": name, "cpu", "cpu_simd", "threads", "date"}
// and the benchmark adds its sections; tables added are printed at once and kept for the
// Markdown file. write() writes the JSON and Markdown files asked for (empty path: none), each
// through AtomicFile, and on rank 0 only. A file that cannot be written is kSystem naming it.
class Report {
 public:
  Report(std::string bench, const Logger& log);
  nlohmann::ordered_json& json() { return json_; }
  void add_reference(const Reference& reference);
  void add_table(const Table& table);
  void write(const std::string& json_path, const std::string& markdown_path) const;

 private:
  std::string bench_;
  const Logger& log_;
  nlohmann::ordered_json json_;
  std::vector<std::string> markdown_;
};

}  // namespace zt::bench
