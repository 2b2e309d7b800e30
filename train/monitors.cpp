// DeepSpeed's CSV and TensorBoard monitors (monitors.h).
#include "train/monitors.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/status.h"
#include "train/tfevents.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

fs::path monitor_dir(const MonitorConfig& m, const Config& config) {
  return fs::path(m.output_path.empty() ? config.zt.output_dir : m.output_path) / m.job_name;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void replace_file(const fs::path& path, const std::string& bytes) {
  AtomicFile f(path.string());
  f.write(bytes);
  f.commit();
}

// A step row's values by tag, in a fixed order: DeepSpeed's first, then ours.
std::vector<std::pair<std::string, double>> tagged_values(const nlohmann::ordered_json& row) {
  std::vector<std::pair<std::string, double>> out;
  auto add = [&](const char* key, const std::string& tag) {
    const auto it = row.find(key);
    if (it != row.end() && it->is_number())
      out.emplace_back("Train/Samples/" + tag, it->get<double>());
  };
  add("loss", "train_loss");
  add("lr", "lr");
  add("loss_scale", "loss_scale");
  add("grad_norm", "grad_norm");
  add("tokens_per_s", "tokens_per_s");
  add("val_loss", "val_loss");
  if (const auto peak = row.find("peak_bytes"); peak != row.end() && peak->is_object())
    for (const auto& [category, bytes] : peak->items())
      if (bytes.is_number())
        out.emplace_back("Train/Samples/peak_bytes_" + category, bytes.get<double>());
  return out;
}

}  // namespace

// One CSV file per tag, opened on its first value.
struct Monitors::Csv {
  fs::path dir;
  std::map<std::string, CheckedFile> files;  // by tag

  // The tag's file, ready to append: created with its header, or, kept through `limit`
  // samples (resume), its rows past that dropped; nullopt limit: a fresh file.
  CheckedFile& file(const std::string& tag, std::optional<int64_t> limit, int64_t write_limit) {
    auto it = files.find(tag);
    if (it != files.end()) return it->second;
    std::string name = tag;
    for (char& c : name)
      if (c == '/' || c == ' ') c = '_';
    const fs::path path = dir / (name + ".csv");
    const std::string header = "step," + tag.substr(tag.rfind('/') + 1) + "\n";
    std::string kept = header;
    if (limit && fs::exists(path)) {
      std::istringstream in(file_text(path));
      std::string line;
      std::getline(in, line);  // its header
      while (std::getline(in, line)) {
        const int64_t step = std::strtoll(line.c_str(), nullptr, 10);
        if (step <= *limit) kept += line + "\n";
      }
    }
    replace_file(path, kept);
    CheckedFile& f = files[tag] = CheckedFile(path.string(), CheckedFile::Mode::kAppend);
    f.set_test_write_limit(write_limit);
    return f;
  }
};

// One event file of this run, after the earlier files were cut to what is kept.
struct Monitors::TensorBoard {
  CheckedFile file;

  TensorBoard(const fs::path& dir, std::optional<int64_t> limit, int64_t write_limit) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || !name.starts_with("events.out.tfevents.")) continue;
      if (!limit) {  // a fresh run: the run it replaces is gone, as its metrics.jsonl is
        fs::remove(entry.path());
        continue;
      }
      std::string why;
      const auto records = tfevents::records(file_text(entry.path()), &why);
      if (!records)
        throw_input(fmt::format("{}: not a TensorBoard event file this run can continue ({})",
                                entry.path().string(), why));
      std::string kept;
      for (const std::string& r : *records) {
        const std::optional<int64_t> step = tfevents::event_step(r);
        if (!step)
          throw_input(fmt::format("{}: an event that does not parse", entry.path().string()));
        if (*step <= *limit) kept += tfevents::frame(r);
      }
      replace_file(entry.path(), kept);
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const double now = wall_time();
    // <unix time>.<host>.<pid>, and a count when a file of that name is there already.
    const std::string stem =
        fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(now), host, ::getpid());
    fs::path path = dir / stem;
    for (int n = 1; fs::exists(path); ++n) path = dir / fmt::format("{}.{}", stem, n);
    file = CheckedFile(path.string(), CheckedFile::Mode::kTruncate);
    file.set_test_write_limit(write_limit);
    file.write(tfevents::frame(tfevents::version_event(now)));
  }
};

Monitors::Monitors(const Config& config, int rank, std::optional<int64_t> kept_through,
                   int64_t test_write_limit)
    : samples_per_step_(config.train_batch_size), test_write_limit_(test_write_limit) {
  if (rank != 0) return;
  if (kept_through) kept_through_ = std::max<int64_t>(-1, *kept_through) * samples_per_step_;
  auto make_dir = [](const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw_system(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    return dir;
  };
  if (config.csv_monitor.enabled) {
    csv_ = std::make_unique<Csv>();
    csv_->dir = make_dir(monitor_dir(config.csv_monitor, config));
  }
  if (config.tensorboard.enabled)
    tensorboard_ = std::make_unique<TensorBoard>(make_dir(monitor_dir(config.tensorboard, config)),
                                                 kept_through_, test_write_limit);
}

Monitors::~Monitors() = default;

void Monitors::write(const nlohmann::ordered_json& row) {
  if (!csv_ && !tensorboard_) return;
  const auto step = row.find("step");
  if (step == row.end() || !step->is_number_integer()) return;
  const int64_t samples = step->get<int64_t>() * samples_per_step_;
  const std::vector<std::pair<std::string, double>> values = tagged_values(row);
  if (values.empty()) return;
  if (csv_)
    for (const auto& [tag, value] : values)
      csv_->file(tag, kept_through_, test_write_limit_)
          .write(fmt::format("{},{:.17g}\n", samples, value));
  if (tensorboard_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (const auto& [tag, value] : values) scalars.emplace_back(tag, static_cast<float>(value));
    tensorboard_->file.write(
        tfevents::frame(tfevents::scalars_event(wall_time(), samples, scalars)));
  }
}

void Monitors::close() {
  if (csv_)
    for (auto& [tag, f] : csv_->files) f.close();
  if (tensorboard_) tensorboard_->file.close();
}

}  // namespace zt
