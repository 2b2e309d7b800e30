// The timing harness of bench/harness.h: rounds, order statistics, tables and the report files.
#include "bench/harness.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "runtime/cpu/cpu_peak.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt::bench {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double time_ms(const std::function<void()>& body) {
  const Clock::time_point t0 = Clock::now();
  body();
  return ms_since(t0);
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto at = [&](double f) {
    return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1) + 0.5)];
  };
  s.median = at(0.5);
  s.q1 = at(0.25);
  s.q3 = at(0.75);
  s.min = v.front();
  s.max = v.back();
  s.n = static_cast<int>(v.size());
  return s;
}

nlohmann::ordered_json to_json(const Summary& s) {
  return {{"median", s.median}, {"q1", s.q1},   {"q3", s.q3},
          {"min", s.min},       {"max", s.max}, {"n", s.n}};
}

std::string quartile_cell(const Summary& s, int digits) {
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f})", s.median, digits, s.q1, digits, s.q3, digits);
}

Summary paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  ZT_ASSERT(a.size() == b.size(), "paired_ratio of {} and {} figures", a.size(), b.size());
  std::vector<double> ratios(a.size());
  for (size_t i = 0; i < a.size(); ++i) ratios[i] = a[i] / b[i];
  return summarize(std::move(ratios));
}

Rounds::Rounds(int warmup, int rounds, Order order)
    : warmup_(warmup), rounds_(rounds), order_(order) {
  ZT_ASSERT(warmup >= 0 && rounds > 0, "Rounds({}, {})", warmup, rounds);
}

void Rounds::add(std::string name, std::function<double(int round)> body) {
  entries_.push_back(Entry{std::move(name), std::move(body), {}});
}

void Rounds::run() {
  const size_t n = entries_.size();
  for (int round = 0; round < warmup_ + rounds_; ++round)
    for (size_t k = 0; k < n; ++k) {
      Entry& e = entries_[order_ == Order::kAlternate && round % 2 == 1 ? n - 1 - k : k];
      const double figure = e.body(round);
      if (round >= warmup_) e.figures.push_back(figure);
    }
}

const Rounds::Entry& Rounds::entry(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return e;
  throw_internal(fmt::format("Rounds: no entry named '{}'", name));
}

const std::vector<double>& Rounds::figures(const std::string& name) const {
  return entry(name).figures;
}

nlohmann::ordered_json to_json(const Reference& r) {
  return {{"name", r.name}, {"unit", r.unit}, {"value", r.value}};
}

Table::Table(std::string title, std::vector<std::string> header)
    : title_(std::move(title)), header_(std::move(header)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(std::max(cells.size(), header_.size()));
  rows_.push_back(std::move(cells));
}

void Table::add_note(std::string note) { notes_.push_back(std::move(note)); }

void Table::print(const Logger& log) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < header_.size(); ++c)
      out += c == 0 ? fmt::format("{:<{}}", cells[c], width[c])
                    : fmt::format("  {:>{}}", cells[c], width[c]);
    return out;
  };
  if (!title_.empty()) log.rank0("{}", title_);
  log.rank0("{}", line(header_));
  for (const auto& row : rows_) log.rank0("{}", line(row));
  for (const std::string& note : notes_) log.rank0("{}", note);
}

std::string Table::markdown() const {
  const auto line = [](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (const std::string& c : cells) {
      out += " ";
      for (char ch : c)
        out += ch == '|' ? std::string("\\|") : std::string(1, ch);  // a bare '|' ends a cell
      out += " |";
    }
    return out + "\n";
  };
  std::string out = title_.empty() ? "" : "### " + title_ + "\n\n";
  out += line(header_);
  out += "|---";
  for (size_t c = 1; c < header_.size(); ++c) out += "|--:";
  out += "|\n";
  for (const auto& row : rows_) out += line(row);
  if (!notes_.empty()) out += "\n";
  for (const std::string& note : notes_) out += note + "\n";
  return out;
}

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

Report::Report(std::string bench, const Logger& log) : bench_(std::move(bench)), log_(log) {
  json_ = {{"bench", bench_},
           {"cpu", cpu_model_name()},
           {"cpu_simd", cpu_simd_features()},
           {"threads", omp_get_max_threads()},
           {"date", utc_now()}};
}

void Report::add_reference(const Reference& reference) {
  json_["references"].push_back(to_json(reference));
  log_.rank0("reference: {} = {:.4g} {} (measured in this run)", reference.name, reference.value,
             reference.unit);
  markdown_.push_back(fmt::format("Reference: {} = {:.4g} {}, measured in this run.\n",
                                  reference.name, reference.value, reference.unit));
}

void Report::add_table(const Table& table) {
  table.print(log_);
  markdown_.push_back(table.markdown());
}

void Report::write(const std::string& json_path, const std::string& markdown_path) const {
  if (log_.rank() != 0) return;
  if (!json_path.empty()) {
    AtomicFile f(json_path);
    f.write(json_.dump(2) + "\n");
    f.commit();
  }
  if (!markdown_path.empty()) {
    std::string text = fmt::format("## zt-bench {}\n\n", bench_);
    text += fmt::format("{}, {} threads ({}), {}.\n\n", json_.at("cpu").get<std::string>(),
                        json_.at("threads").get<int>(), json_.at("cpu_simd").get<std::string>(),
                        json_.at("date").get<std::string>());
    for (const std::string& part : markdown_) text += part + "\n";
    AtomicFile f(markdown_path);
    f.write(text);
    f.commit();
  }
}

}  // namespace zt::bench
