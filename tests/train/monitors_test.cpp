// DeepSpeed's monitors (train/monitors.h) behind the MetricsWriter: step rows written to
// metrics.jsonl come back from the TensorBoard event file, decoded here by a reader of this
// test's own written from the published format (TFRecord lengths and masked CRC32C computed
// bit by bit, protobuf's wire format for Event/Summary/Value), and from DeepSpeed's CSV
// files, every scalar equal to the row's (float for TensorBoard, as it stores them); the x axis
// is step x train_batch_size. A resumed writer keeps what comes through its step and appends
// with no step twice; a full disk ends with the file named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/status.h"
#include "train/metrics_writer.h"
#include "train/monitors.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("zt_monitors_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ---- an event-file reader of the test's own -------------------------------------------------

uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t masked(const std::string& s) {
  const uint32_t c = crc32c_bitwise(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

uint64_t varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<uint8_t>(s.at(i++));
    v |= uint64_t(b & 0x7F) << shift;
    if (b < 0x80) return v;
  }
}

// Calls f(field, wire type, varint value, bytes) for each field of a message.
template <class F>
void fields(const std::string& m, F f) {
  for (size_t i = 0; i < m.size();) {
    const uint64_t key = varint(m, i);
    const int wire = int(key & 7), field = int(key >> 3);
    if (wire == 0) {
      f(field, wire, varint(m, i), std::string());
    } else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      f(field, wire, 0, m.substr(i, n));
      i += n;
    } else {
      ASSERT_EQ(wire, 2);
      const size_t n = varint(m, i);
      f(field, wire, 0, m.substr(i, n));
      i += n;
    }
  }
}

std::vector<Event> read_events(const fs::path& file) {
  const std::string b = bytes_of(file);
  std::vector<Event> events;
  for (size_t at = 0; at < b.size();) {
    uint64_t n = 0;
    uint32_t crc_len = 0, crc_data = 0;
    std::memcpy(&n, &b[at], 8);
    std::memcpy(&crc_len, &b[at + 8], 4);
    EXPECT_EQ(crc_len, masked(b.substr(at, 8))) << file << " at " << at;
    const std::string record = b.substr(at + 12, n);
    std::memcpy(&crc_data, &b[at + 12 + n], 4);
    EXPECT_EQ(crc_data, masked(record)) << file << " at " << at;
    at += 16 + n;
    Event e;
    fields(record, [&](int field, int, uint64_t v, const std::string& bytes) {
      if (field == 1) std::memcpy(&e.wall_time, bytes.data(), 8);
      if (field == 2) e.step = int64_t(v);
      if (field == 3) e.file_version = bytes;
      if (field == 5)
        fields(bytes, [&](int, int, uint64_t, const std::string& value) {
          std::pair<std::string, float> tv;
          fields(value, [&](int f, int, uint64_t, const std::string& x) {
            if (f == 1) tv.first = x;
            if (f == 2) std::memcpy(&tv.second, x.data(), 4);
          });
          e.values.push_back(tv);
        });
    });
    events.push_back(e);
  }
  return events;
}

std::vector<Event> all_events(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<Event> out;
  for (const fs::path& f : files) {
    EXPECT_NE(f.filename().string().find("tfevents"), std::string::npos);
    const std::vector<Event> events = read_events(f);
    EXPECT_FALSE(events.empty());
    EXPECT_EQ(events.front().file_version, "brain.Event:2") << f;
    out.insert(out.end(), events.begin() + 1, events.end());
  }
  return out;
}

// ---- the run ---------------------------------------------------------------------------------

Config monitored(const fs::path& dir) {
  Config c;
  c.train_batch_size = 16;
  c.zt.output_dir = dir.string();
  c.tensorboard.enabled = c.csv_monitor.enabled = true;
  c.tensorboard.job_name = "tb";
  c.csv_monitor.output_path = (dir / "csvs").string();
  c.csv_monitor.job_name = "job";
  return c;
}

nlohmann::ordered_json step_row(int64_t step) {
  nlohmann::ordered_json row = {{"step", step},
                                {"loss", 10.0 / double(step) + 0.123456789},
                                {"lr", 1e-3 * double(step)},
                                {"grad_norm", 0.5 + double(step)},
                                {"ms", 12.5},
                                {"tokens_per_s", 1000.0 + double(step)},
                                {"peak_bytes", {{"params", 4096}, {"activations", 8192 + step}}}};
  if (step % 2 == 0) row["val_loss"] = 3.0 + 1.0 / double(step);
  return row;
}

void run(const Config& c, std::optional<int64_t> kept_through, int64_t first, int64_t last) {
  MetricsWriter metrics(fs::path(c.zt.output_dir) / "metrics.jsonl", 0, kept_through);
  metrics.add_monitors(std::make_unique<Monitors>(c, 0, kept_through));
  metrics.write({{"event", "restart"}, {"restart", 1}});  // no step: not monitored
  for (int64_t s = first; s <= last; ++s) metrics.write(step_row(s));
  metrics.write({{"summary", {{"ranks", 1}}}});
  metrics.close();
}

// The scalars of metrics.jsonl's step rows by (tag, samples), as the monitors should have them.
std::map<std::pair<std::string, int64_t>, double> expected(const fs::path& metrics) {
  std::map<std::pair<std::string, int64_t>, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (!row.contains("step")) continue;
    const int64_t samples = row["step"].get<int64_t>() * 16;
    for (const auto& [key, tag] :
         std::map<std::string, std::string>{{"loss", "train_loss"},
                                            {"lr", "lr"},
                                            {"grad_norm", "grad_norm"},
                                            {"tokens_per_s", "tokens_per_s"},
                                            {"val_loss", "val_loss"}})
      if (row.contains(key)) out[{"Train/Samples/" + tag, samples}] = row[key].get<double>();
    for (const auto& [category, bytes] : row["peak_bytes"].items())
      out[{"Train/Samples/peak_bytes_" + category, samples}] = bytes.get<double>();
  }
  return out;
}

void check_against_metrics(const fs::path& dir, int64_t steps) {
  const auto want = expected(dir / "metrics.jsonl");
  // TensorBoard: every scalar once, as a float.
  std::map<std::pair<std::string, int64_t>, float> tb;
  for (const Event& e : all_events(dir / "tb"))
    for (const auto& [tag, value] : e.values)
      EXPECT_TRUE(tb.emplace(std::pair(tag, e.step), value).second)
          << tag << " @" << e.step << " twice";
  EXPECT_EQ(tb.size(), want.size());
  for (const auto& [key, value] : want) {
    ASSERT_TRUE(tb.count(key)) << key.first << " @" << key.second;
    EXPECT_EQ(tb[key], static_cast<float>(value)) << key.first << " @" << key.second;
  }
  // CSV: DeepSpeed's file per tag, its header, each value in full precision, once.
  std::istringstream loss(bytes_of(dir / "csvs" / "job" / "Train_Samples_train_loss.csv"));
  std::string line;
  std::getline(loss, line);
  EXPECT_EQ(line, "step,train_loss");
  int64_t rows = 0;
  while (std::getline(loss, line)) {
    const int64_t samples = std::stoll(line.substr(0, line.find(',')));
    EXPECT_EQ(std::stod(line.substr(line.find(',') + 1)),
              want.at({"Train/Samples/train_loss", samples}));
    EXPECT_EQ(samples, 16 * ++rows) << "steps in order, once";
  }
  EXPECT_EQ(rows, steps);
  EXPECT_TRUE(fs::exists(dir / "csvs" / "job" / "Train_Samples_peak_bytes_activations.csv"));
}

TEST(MonitorsTest, TensorBoardAndCsvHoldTheMetricsRows) {
  TempDir dir;
  run(monitored(dir.path), std::nullopt, 1, 8);
  check_against_metrics(dir.path, 8);
}

TEST(MonitorsTest, AResumedRunAppendsWithoutRepeatingSteps) {
  TempDir dir;
  const Config c = monitored(dir.path);
  run(c, std::nullopt, 1, 8);  // a run that got to step 8 ...
  run(c, int64_t{5}, 6, 10);   // ... resumed from its step-5 checkpoint, to step 10
  check_against_metrics(dir.path, 10);
  run(c, std::nullopt, 1, 3);  // a fresh run replaces them
  check_against_metrics(dir.path, 3);
}

TEST(MonitorsTest, AFullDiskNamesTheFile) {
  TempDir dir;
  Config c = monitored(dir.path);
  c.tensorboard.enabled = false;
  Monitors monitors(c, 0, std::nullopt, 40);
  try {
    for (int64_t s = 1; s <= 10; ++s) monitors.write(step_row(s));
    FAIL() << "no error past the write limit";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("Train_Samples"), std::string::npos) << e.message();
  }
}

TEST(MonitorsTest, OtherRanksWriteNothing) {
  TempDir dir;
  Monitors monitors(monitored(dir.path), 1, std::nullopt);
  monitors.write(step_row(1));
  monitors.close();
  EXPECT_FALSE(fs::exists(dir.path / "tb"));
  EXPECT_FALSE(fs::exists(dir.path / "csvs"));
}

}  // namespace
}  // namespace zt
