// MetricsWriter's resume and restart rules (train/metrics_writer.h): a resumed run keeps the rows
// through its step and every restart row; a run restarted from the start keeps only the restart
// rows; a fresh run keeps nothing. ZT_RESTART, the row zt-run hands a relaunched job, must be a
// restart's JSON object. The whole restart runs in tests/e2e/restart.sh.
#include "train/metrics_writer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// A metrics.jsonl of a run that saved at step 2, failed after step 3, restarted from step 2 and
// failed again after step 3.
const char* const kLog =
    "{\"step\":1,\"loss\":4.0}\n"
    "{\"step\":2,\"loss\":3.0}\n"
    "{\"checkpoint\":2,\"save_ms\":1.0}\n"
    "{\"step\":3,\"loss\":2.0}\n"
    "{\"event\":\"restart\",\"restart\":1,\"from_step\":2}\n"
    "{\"resumed_from\":\"c/step2\",\"at_step\":2}\n"
    "{\"step\":3,\"loss\":2.0}\n";

class MetricsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file = fs::temp_directory_path() / ("zt_metrics_" + std::to_string(::getpid()) + ".jsonl");
    AtomicFile log(file.string());
    log.write(kLog);
    log.commit();
  }
  void TearDown() override {
    fs::remove(file);
    ::unsetenv("ZT_RESTART");
  }
  std::string kept(std::optional<int64_t> through) {
    MetricsWriter writer(file, 0, through);
    writer.close();
    return read_file(file.string(), "metrics");
  }
  fs::path file;
};

TEST_F(MetricsWriterTest, ResumeKeepsTheRowsThroughItsStepAndEveryRestart) {
  EXPECT_EQ(kept(2),
            "{\"step\":1,\"loss\":4.0}\n"
            "{\"step\":2,\"loss\":3.0}\n"
            "{\"checkpoint\":2,\"save_ms\":1.0}\n"
            "{\"event\":\"restart\",\"restart\":1,\"from_step\":2}\n"
            "{\"resumed_from\":\"c/step2\",\"at_step\":2}\n");
}

TEST_F(MetricsWriterTest, RestartFromTheStartKeepsOnlyRestartRows) {
  EXPECT_EQ(kept(-1), "{\"event\":\"restart\",\"restart\":1,\"from_step\":2}\n");
  EXPECT_EQ(kept(std::nullopt), "");
}

TEST_F(MetricsWriterTest, RestartRowFromTheEnvironment) {
  ::unsetenv("ZT_RESTART");
  EXPECT_FALSE(restart_row_from_environment());
  ::setenv("ZT_RESTART", "{\"event\":\"restart\",\"restart\":2,\"from_step\":10}", 1);
  const auto row = restart_row_from_environment();
  ASSERT_TRUE(row);
  // zt-run's key order is kept.
  EXPECT_EQ(row->dump(), "{\"event\":\"restart\",\"restart\":2,\"from_step\":10}");
  for (const char* bad : {"{\"restart\":1}", "[1]", "not json"}) {
    ::setenv("ZT_RESTART", bad, 1);
    try {
      restart_row_from_environment();
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_NE(e.message().find("ZT_RESTART must be the JSON row of a restart"),
                std::string::npos);
    }
  }
}

}  // namespace
}  // namespace zt
