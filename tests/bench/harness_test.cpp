// bench/harness.h: order statistics are measured values at the nearest rank, paired ratios are
// per round, rounds interleave their entries and drop the warm-up, tables render as aligned text
// and Markdown, and the report files appear whole or a write error names the file.
#include "bench/harness.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace zt::bench {
namespace {

namespace fs = std::filesystem;

TEST(Harness, SummaryIsMeasuredValuesAtTheNearestRank) {
  const Summary odd = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.q1, 2);
  EXPECT_EQ(odd.q3, 4);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_EQ(odd.n, 5);
  // An even count: the upper middle value, never the mean of two (2.5 was not measured).
  const Summary even = summarize({4, 1, 3, 2});
  EXPECT_EQ(even.median, 3);
  EXPECT_EQ(even.q1, 2);  // index round(0.75) = 1
  EXPECT_EQ(even.q3, 3);  // index round(2.25) = 2
  EXPECT_EQ(summarize({}).n, 0);
  EXPECT_EQ(quartile_cell(odd, 2), "3.00 (2.00-4.00)");
}

TEST(Harness, PairedRatioIsTakenPerRound) {
  // Round 3 is slow for both: its ratio stays 2, where a ratio of medians would not see pairs.
  const Summary r = paired_ratio({2, 4, 40, 6}, {1, 2, 20, 3});
  EXPECT_EQ(r.median, 2);
  EXPECT_EQ(r.q1, 2);
  EXPECT_EQ(r.q3, 2);
  EXPECT_THROW(paired_ratio({1, 2}, {1}), Error);
}

TEST(Harness, RoundsInterleaveEntriesAndDropTheWarmUp) {
  std::vector<std::string> calls;
  Rounds rounds(2, 3);
  rounds.add("a", [&](int round) {
    calls.push_back("a" + std::to_string(round));
    return 10.0 * round;
  });
  rounds.add("b", [&](int round) {
    calls.push_back("b" + std::to_string(round));
    return 1.0 * round;
  });
  rounds.run();
  EXPECT_EQ(calls,
            (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"}));
  EXPECT_EQ(rounds.figures("a"), (std::vector<double>{20, 30, 40}));
  EXPECT_EQ(rounds.figures("b"), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(rounds.summary("a").median, 30);
  EXPECT_THROW(rounds.figures("c"), Error);

  calls.clear();
  Rounds alternating(0, 3, Rounds::Order::kAlternate);
  for (const char* name : {"a", "b"})
    alternating.add(name, [&calls, name](int round) {
      calls.push_back(name + std::to_string(round));
      return 0.0;
    });
  alternating.run();
  EXPECT_EQ(calls, (std::vector<std::string>{"a0", "b0", "b1", "a1", "a2", "b2"}));
}

TEST(Harness, TablesRenderAsMarkdown) {
  Table t("Step", {"", "ms", "x ref"});
  t.add_row({"fused", "1.5", "0.80"});
  t.add_row({"two passes", "a|b"});
  t.add_note("ratios per round");
  EXPECT_EQ(t.markdown(),
            "### Step\n\n|  | ms | x ref |\n|---|--:|--:|\n| fused | 1.5 | 0.80 |\n"
            "| two passes | a\\|b |  |\n\nratios per round\n");
}

TEST(Harness, ReportWritesBothFilesOrNamesTheOneItCannot) {
  const fs::path dir = fs::temp_directory_path() / ("zt_harness_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Logger log;
  Report report("unit", log);
  report.json()["figure"] = 1.5;
  report.add_reference({"peak", "GB/s", 10.0});
  Table t("T", {"", "x"});
  t.add_row({"row", "1"});
  report.add_table(t);
  report.write((dir / "r.json").string(), (dir / "r.md").string());
  std::ifstream json_in(dir / "r.json"), md_in(dir / "r.md");
  const nlohmann::json j = nlohmann::json::parse(json_in);
  EXPECT_EQ(j.at("bench"), "unit");
  EXPECT_EQ(j.at("figure"), 1.5);
  EXPECT_EQ(j.at("references").at(0).at("unit"), "GB/s");
  EXPECT_FALSE(j.at("cpu").get<std::string>().empty());
  const std::string md(std::istreambuf_iterator<char>(md_in), {});
  EXPECT_NE(md.find("## zt-bench unit"), std::string::npos) << md;
  EXPECT_NE(md.find("Reference: peak = 10 GB/s"), std::string::npos) << md;
  EXPECT_NE(md.find("| row | 1 |"), std::string::npos) << md;
  // A directory that does not exist: an error naming the file, and nothing left behind.
  try {
    report.write((dir / "missing" / "r.json").string(), "");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("missing/r.json"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(fs::exists(dir / "missing"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt::bench
