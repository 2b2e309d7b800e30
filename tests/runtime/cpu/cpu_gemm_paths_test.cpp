// GEMM paths (runtime/cpu/cpu_gemm_paths.h, cpu_gemm_cache.h): the keys' and tables' text forms
// round trip; a measurement follows its timer's figures; the kernels compute each product on
// every candidate path within a 16-bit rounding of a double reference, and meet exactly the
// keys training_gemm_keys derives; the cache reads back what it wrote and ignores a corrupt or
// foreign file with one note.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_gemm_cache.h"
#include "runtime/cpu/cpu_gemm_paths.h"
#include "runtime/status.h"

namespace zt {
namespace {

const GemmKey kFwd{GemmProduct::kForward, 256,          768,         2304,
                   WeightLayout::kInOut,  DType::kBF16, DType::kBF16};
const GemmKey kHead{GemmProduct::kDinput, 64,          768,        50304,
                    WeightLayout::kOutIn, DType::kF16, DType::kF16};
const GemmKey kDw{GemmProduct::kDweight, 256,          3072,        768,
                  WeightLayout::kInOut,  DType::kBF16, DType::kBF16};

// Seconds by (key, path) from a table; counts its calls and never runs the product.
class FakeTimer final : public GemmTimer {
 public:
  std::map<std::pair<GemmKey, GemmPath>, double> figures;
  std::map<std::pair<GemmKey, GemmPath>, int> calls;
  double seconds(const GemmKey& key, GemmPath path, const std::function<void()>&) override {
    ++calls[{key, path}];
    return figures.at({key, path});
  }
};

TEST(GemmPathsTest, KeysAndTablesRoundTripThroughText) {
  for (const GemmKey& key : {kFwd, kHead, kDw}) EXPECT_EQ(parse_gemm_key(to_string(key), "t"), key);
  EXPECT_EQ(to_string(kFwd), "fwd 256x768x2304 io bf16/bf16");
  GemmPaths paths;
  paths.set(kFwd, GemmPath::kNative);
  paths.set(kHead, GemmPath::kWidened);
  paths.set(kDw, GemmPath::kPacked);
  const GemmPaths back = GemmPaths::parse(paths.serialize(), "t");
  EXPECT_EQ(back, paths);
  EXPECT_EQ(back.hash(), paths.hash());
  paths.set(kDw, GemmPath::kWidened);
  EXPECT_NE(back.hash(), paths.hash());
  EXPECT_TRUE(GemmPaths::parse("", "t").empty());
}

TEST(GemmPathsTest, BadTextIsOneInputError) {
  for (const char* text : {"fwd 256x768 io bf16/bf16=native", "fwd 256x768x2304 io bf16/bf16",
                           "fwd 256x768x2304 io bf16/bf16=fast", "up 1x1x1 io bf16/bf16=native",
                           "fwd 1x1x1 io bf16/bf16=native;fwd 1x1x1 io bf16/bf16=packed"}) {
    try {
      GemmPaths::parse(text, "cache.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput) << text;
      EXPECT_NE(std::string(e.what()).find("cache.json"), std::string::npos) << e.what();
    }
  }
}

TEST(GemmPathsTest, CandidatesFollowTheAbilities) {
  const GemmAbilities native{.native_bf16 = true}, none{.native_bf16 = false};
  // packed_b only where the packed GEMM would read the weight's rows in place (forward over a
  // (K,N) weight, dinput over an (N,K) one).
  EXPECT_EQ(gemm_candidates(kFwd, native), (std::vector{GemmPath::kNative, GemmPath::kPacked,
                                                        GemmPath::kWidened, GemmPath::kPackedB}));
  EXPECT_EQ(gemm_candidates(kFwd, none),
            (std::vector{GemmPath::kPacked, GemmPath::kWidened, GemmPath::kPackedB}));
  EXPECT_EQ(gemm_candidates(kHead, native),
            (std::vector{GemmPath::kPacked, GemmPath::kWidened, GemmPath::kPackedB}));
  EXPECT_EQ(gemm_candidates(kDw, native),
            (std::vector{GemmPath::kNative, GemmPath::kPacked, GemmPath::kWidened}));
  EXPECT_EQ(fallback_gemm_path(kFwd, native), GemmPath::kNative);
  EXPECT_EQ(fallback_gemm_path(kHead, native), GemmPath::kPacked);
}

TEST(GemmPathsTest, TheChoiceFollowsTheTimings) {
  const GemmAbilities native{.native_bf16 = true};
  FakeTimer timer;
  const std::vector<GemmKey> keys{kFwd, kHead};
  timer.figures = {{{kFwd, GemmPath::kNative}, 3e-3},  {{kFwd, GemmPath::kPacked}, 2e-3},
                   {{kFwd, GemmPath::kWidened}, 1e-3}, {{kFwd, GemmPath::kPackedB}, 1.5e-3},
                   {{kHead, GemmPath::kPacked}, 1e-3}, {{kHead, GemmPath::kWidened}, 4e-3},
                   {{kHead, GemmPath::kPackedB}, 2e-3}};
  std::vector<GemmMeasurement> m = measure_gemm_paths(keys, timer, native);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].chosen, GemmPath::kWidened);
  EXPECT_EQ(m[1].chosen, GemmPath::kPacked);
  // Every candidate timed in every round, at least 3; rounds continue while a key's total is
  // under 0.1 s, at most 16: kFwd's rounds take 7.5 ms (14 rounds), kHead's 7 ms (15).
  EXPECT_EQ(timer.calls.size(), 7u);
  for (const auto& [which, n] : timer.calls)
    EXPECT_EQ(n, which.first == kFwd ? 14 : 15) << to_string(which.first);
  EXPECT_NEAR(m[0].rates[0].gflops, 2.0 * 256 * 768 * 2304 / 3e-3 / 1e9, 1e-6);
  // Other figures, another choice; a tie keeps the earlier candidate (the fallback).
  timer.figures[{kFwd, GemmPath::kNative}] = 0.5e-3;
  timer.figures[{kHead, GemmPath::kWidened}] = 1e-3;
  timer.figures[{kHead, GemmPath::kPackedB}] = 1e-3;
  m = measure_gemm_paths(keys, timer, native);
  EXPECT_EQ(m[0].chosen, GemmPath::kNative);
  EXPECT_EQ(m[1].chosen, GemmPath::kPacked);
  EXPECT_EQ(paths_of(m).find(kFwd), GemmPath::kNative);
}

// The double-precision product each key names, from the same stored operands.
double reference(const GemmKey& k, const std::vector<float>& a, const std::vector<float>& d,
                 const std::vector<float>& w, int64_t i, int64_t j) {
  const bool io = k.layout == WeightLayout::kInOut;
  double s = 0;
  if (k.product == GemmProduct::kForward)  // out (M,N)
    for (int64_t q = 0; q < k.K; ++q)
      s += double(a[i * k.K + q]) * w[io ? q * k.N + j : j * k.K + q];
  else if (k.product == GemmProduct::kDinput)  // dinp (M,K)
    for (int64_t q = 0; q < k.N; ++q)
      s += double(d[i * k.N + q]) * w[io ? j * k.N + q : q * k.K + j];
  else  // dW (K,N) for kInOut, (N,K) for kOutIn: element (i, j)
    for (int64_t r = 0; r < k.M; ++r)
      s += io ? double(a[r * k.K + i]) * d[r * k.N + j] : double(d[r * k.N + i]) * a[r * k.K + j];
  return s;
}

TEST(GemmPathsTest, EveryCandidateComputesTheProductAndTheKernelsMeetTheDerivedKeys) {
  const int64_t M = 37, K = 70, N = 53;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const GemmKey fwd{GemmProduct::kForward, M, K, N, layout, dt, dt};
      const std::vector<GemmKey> keys = training_gemm_keys({fwd}, dt);
      ASSERT_EQ(keys.size(), 3u);
      std::vector<float> a(M * K), d(M * N), w(K * N);
      std::vector<uint16_t> w16(K * N);
      const auto round = [&](float v) {
        return dt == DType::kBF16 ? fp32_to_bf16(v) : fp32_to_fp16(v);
      };
      const auto widen = [&](uint16_t h) {
        return dt == DType::kBF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
      };
      for (int64_t i = 0; i < M * K; ++i) a[i] = widen(round(std::sin(0.37f * i)));
      for (int64_t i = 0; i < M * N; ++i) d[i] = widen(round(std::cos(0.29f * i)));
      for (int64_t i = 0; i < K * N; ++i) w[i] = widen(w16[i] = round(std::sin(0.11f * i + 1)));
      for (const GemmKey& key : keys)
        for (GemmPath path : gemm_candidates(key, cpu_gemm_abilities())) {
          GemmRouting routing;
          auto alone = std::make_shared<GemmPaths>();
          alone->set(key, path);
          routing.install(alone);
          const std::unique_ptr<Kernels> k = make_cpu_kernels(dt, &routing);
          const int64_t rows = key.product == GemmProduct::kForward  ? M
                               : key.product == GemmProduct::kDinput ? M
                               : layout == WeightLayout::kInOut      ? K
                                                                     : N;
          const int64_t cols = key.product == GemmProduct::kForward  ? N
                               : key.product == GemmProduct::kDinput ? K
                               : layout == WeightLayout::kInOut      ? N
                                                                     : K;
          std::vector<float> out(rows * cols);
          std::vector<uint16_t> dw(K * N, 0);
          routing.start_recording();
          if (key.product == GemmProduct::kForward)
            k->matmul_forward(out.data(), a.data(), {w16.data(), dt}, nullptr, M, K, N, layout);
          else if (key.product == GemmProduct::kDinput)
            k->matmul_backward(out.data(), {}, {}, d.data(), a.data(), {w16.data(), dt}, M, K, N,
                               layout, GradOutput::kWrite);
          else
            k->matmul_backward(nullptr, {dw.data(), dt, true}, {}, d.data(), a.data(), nullptr, M,
                               K, N, layout, GradOutput::kWrite);
          EXPECT_EQ(routing.stop_recording(), std::set<GemmKey>{key}) << to_string(key);
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
              const double want = reference(key, a, d, w, i, j);
              const double got = key.product == GemmProduct::kDweight ? widen(dw[i * cols + j])
                                                                      : out[i * cols + j];
              ASSERT_NEAR(got, want, 1e-2 * (1 + std::fabs(want)))
                  << to_string(key) << " on " << gemm_path_name(path) << " at " << i << "," << j;
            }
        }
    }
}

class GemmCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("zt_gemm_cache_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "sub" / "cache.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(GemmCacheTest, ReadsBackWhatItWroteAndIgnoresABadFileWithANote) {
  const GemmMeasurement m{
      kFwd, {{GemmPath::kNative, 138.5}, {GemmPath::kPacked, 201.25}}, GemmPath::kPacked};
  std::string note;
  EXPECT_TRUE(read_gemm_cache(path_, "sig", note).empty());  // no file yet: no note
  EXPECT_EQ(note, "");
  ASSERT_EQ(write_gemm_cache(path_, "sig", {m}), "");
  const std::vector<GemmMeasurement> back = read_gemm_cache(path_, "sig", note);
  EXPECT_EQ(note, "");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].key, kFwd);
  EXPECT_EQ(back[0].chosen, GemmPath::kPacked);
  ASSERT_EQ(back[0].rates.size(), 2u);
  EXPECT_EQ(back[0].rates[1].gflops, 201.25);
  EXPECT_TRUE(read_gemm_cache(path_, "another CPU", note).empty());
  EXPECT_NE(note.find("signature"), std::string::npos) << note;
  std::ofstream(path_) << "{\"format\": 1, \"signature\": \"sig\", \"measurements\": [{\"key\"";
  EXPECT_TRUE(read_gemm_cache(path_, "sig", note).empty());
  EXPECT_NE(note.find("ignored the GEMM path cache " + path_), std::string::npos) << note;
}

TEST(GemmCachePathTest, FollowsXdgCacheHomeAndTheSignature) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  const std::string a = gemm_cache_path(cpu_gemm_signature(2));
  EXPECT_EQ(a.rfind("/x/cache/zerotrain/cpu_gemm-", 0), 0u) << a;
  EXPECT_NE(a, gemm_cache_path(cpu_gemm_signature(3)));  // the thread count is in the key
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace zt
