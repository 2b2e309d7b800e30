// train/gemm_choice.h: zt.cpu_gemm and ZT_CPU_GEMM read; rank 0's decision from the cache, a
// timer and a resumed checkpoint's table (the checkpoint's paths kept, and a note when this
// machine would choose otherwise); a pinned path that cannot run here is one input error; a
// checkpoint's trainer_state table read back.
#include "train/gemm_choice.h"

#include <cstdlib>
#include <map>

#include <gtest/gtest.h>

#include "runtime/status.h"

namespace zt {
namespace {

const GemmKey kA{GemmProduct::kForward, 256,          768,         2304,
                 WeightLayout::kInOut,  DType::kBF16, DType::kBF16};
const GemmKey kB{GemmProduct::kDweight, 256,          768,         2304,
                 WeightLayout::kInOut,  DType::kBF16, DType::kBF16};
const GemmKey kHalf{GemmProduct::kForward, 256,         768,        768,
                    WeightLayout::kInOut,  DType::kF16, DType::kF16};
const GemmAbilities kNative{.native_bf16 = true};

// Prefers `fastest` for every key; counts the keys it timed.
class FakeTimer final : public GemmTimer {
 public:
  explicit FakeTimer(GemmPath fastest) : fastest_(fastest) {}
  std::map<GemmKey, int> timed;
  double seconds(const GemmKey& key, GemmPath path, const std::function<void()>&) override {
    ++timed[key];
    return path == fastest_ ? 1e-3 : 2e-3;
  }

 private:
  GemmPath fastest_;
};

GemmSetting setting(const char* value) {
  setenv("ZT_CPU_GEMM", value, 1);
  GemmSetting s = gemm_setting("auto");
  unsetenv("ZT_CPU_GEMM");
  return s;
}

TEST(GemmChoiceTest, TheEnvironmentOverridesTheConfigAndBadValuesAreOneLine) {
  unsetenv("ZT_CPU_GEMM");
  EXPECT_EQ(gemm_setting("flags").mode, GemmSetting::Mode::kFlags);
  const GemmSetting pinned = setting("widened");
  EXPECT_EQ(pinned.mode, GemmSetting::Mode::kFixed);
  EXPECT_EQ(pinned.fixed, GemmPath::kWidened);
  EXPECT_EQ(pinned.source, "ZT_CPU_GEMM");
  try {
    setting("fastest");
    ADD_FAILURE() << "accepted ZT_CPU_GEMM=fastest";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(std::string(e.what()).find("ZT_CPU_GEMM is 'fastest'"), std::string::npos);
  }
  unsetenv("ZT_CPU_GEMM");
}

TEST(GemmChoiceTest, AutoUsesTheCacheAndMeasuresOnlyWhatItLacks) {
  const std::vector<GemmKey> keys{kA, kB};
  const std::vector<GemmMeasurement> cached{{kA, {}, GemmPath::kPacked}};
  FakeTimer timer(GemmPath::kWidened);
  const GemmDecision d = decide_gemm_paths(keys, setting("auto"), kNative, cached, nullptr, timer);
  EXPECT_EQ(d.paths.find(kA), GemmPath::kPacked);   // the cache's
  EXPECT_EQ(d.paths.find(kB), GemmPath::kWidened);  // measured
  EXPECT_EQ(timer.timed.size(), 1u);  // kB alone, each of its 3 candidates in every round
  EXPECT_EQ(timer.timed.count(kB), 1u);
  ASSERT_EQ(d.measured.size(), 1u);
  EXPECT_EQ(d.shown.size(), 2u);
  // measure: every key again, the cache ignored.
  FakeTimer again(GemmPath::kNative);
  const GemmDecision m =
      decide_gemm_paths(keys, setting("measure"), kNative, cached, nullptr, again);
  EXPECT_EQ(m.paths.find(kA), GemmPath::kNative);
  EXPECT_EQ(again.timed.size(), 2u);
}

TEST(GemmChoiceTest, AResumeKeepsTheCheckpointsPathsAndSaysWhereTheyDiffer) {
  const std::vector<GemmKey> keys{kA, kB};
  const std::vector<GemmMeasurement> cached{{kA, {}, GemmPath::kNative},
                                            {kB, {}, GemmPath::kPacked}};
  GemmPaths checkpoint;
  checkpoint.set(kA, GemmPath::kWidened);
  checkpoint.set(kB, GemmPath::kPacked);
  FakeTimer timer(GemmPath::kNative);
  const GemmDecision d =
      decide_gemm_paths(keys, setting("auto"), kNative, cached, &checkpoint, timer);
  EXPECT_EQ(d.paths, checkpoint);
  EXPECT_TRUE(timer.timed.empty());
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("using the checkpoint's GEMM paths"), std::string::npos);
  EXPECT_NE(d.notes[0].find("1 of them"), std::string::npos) << d.notes[0];
  // A checkpoint's native path on a CPU without native bf16: this machine's choice, and a note.
  GemmPaths native;
  native.set(kA, GemmPath::kNative);
  const GemmDecision here =
      decide_gemm_paths(std::vector{kA}, setting("auto"), {}, {}, &native, timer);
  EXPECT_EQ(here.paths.find(kA), GemmPath::kPacked);  // the fake prefers native: not a candidate
  EXPECT_NE(here.notes.at(0).find("cannot run"), std::string::npos);
}

TEST(GemmChoiceTest, PinnedPathsApplyToEveryKeyOrAreRefused) {
  FakeTimer timer(GemmPath::kNative);
  const std::vector<GemmKey> keys{kA, kHalf};
  const GemmDecision flags = decide_gemm_paths(keys, setting("flags"), kNative, {}, nullptr, timer);
  EXPECT_EQ(flags.paths.find(kA), GemmPath::kNative);
  EXPECT_EQ(flags.paths.find(kHalf), GemmPath::kPacked);
  const GemmDecision widened =
      decide_gemm_paths(keys, setting("widened"), kNative, {}, nullptr, timer);
  EXPECT_EQ(widened.paths.find(kHalf), GemmPath::kWidened);
  // packed_b where it is a candidate (a forward over a (K,N) weight), packed elsewhere.
  const std::vector<GemmKey> with_dw{kA, kB};
  const GemmDecision pb =
      decide_gemm_paths(with_dw, setting("packed_b"), kNative, {}, nullptr, timer);
  EXPECT_EQ(pb.paths.find(kA), GemmPath::kPackedB);
  EXPECT_EQ(pb.paths.find(kB), GemmPath::kPacked);
  EXPECT_TRUE(timer.timed.empty());
  try {
    decide_gemm_paths(keys, setting("native"), kNative, {}, nullptr, timer);
    ADD_FAILURE() << "native accepted for an fp16 product";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(std::string(e.what()).find("fwd 256x768x768 io fp16/fp16"), std::string::npos);
  }
}

TEST(GemmChoiceTest, ACheckpointsTableIsReadBackFromItsTrainerState) {
  GemmPaths paths;
  paths.set(kA, GemmPath::kWidened);
  const nlohmann::json state = {{"step", 3}, {"cpu_gemm", paths.serialize()}};
  EXPECT_EQ(checkpoint_gemm_paths(state, "m.json"), paths);
  EXPECT_EQ(checkpoint_gemm_paths({{"step", 3}}, "m.json"), std::nullopt);
  EXPECT_THROW(checkpoint_gemm_paths({{"cpu_gemm", 7}}, "m.json"), Error);
  EXPECT_THROW(checkpoint_gemm_paths({{"cpu_gemm", "fwd 1x1x1 io bf16/bf16=fast"}}, "m.json"),
               Error);
}

}  // namespace
}  // namespace zt
