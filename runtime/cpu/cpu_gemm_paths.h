// Which code computes each 16-bit GEMM of the CPU back end: the products a matmul with a 16-bit
// operand makes (forward, dinput, dweight), each keyed by its shape, its operand dtypes and its
// weight layout (GemmKey), and the paths that can compute one (GemmPath). The candidates sum in
// different orders, so the path is part of a run's identity: a GemmPaths table (one path per
// key) is measured once per machine and model shape (measure_gemm_paths, through a GemmTimer a
// test can fake), agreed by the ranks above runtime (train/gemm_choice.h), installed into a
// CpuDevice's kernels (GemmRouting), and written with the run's metrics and checkpoints. The
// kernels only look paths up; a key the table lacks takes the feature-flag rule
// (fallback_gemm_path). fp32 products are not keyed: they are always dnnl_sgemm.
// What it does not do: time anything on its own, read or write files (cpu_gemm_cache.h), or talk
// to other ranks.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

namespace zt {

// One of a matmul's products: out = inp · W (forward), dinp = dout · Wᵀ (dinput), the weight's
// gradient (dweight).
enum class GemmProduct : uint8_t { kForward, kDinput, kDweight };

// The code that computes a 16-bit product (each sums in fp32 and rounds what it stores once):
//   kNative   oneDNN's native 16-bit matmul (bf16 on AVX512_BF16 or AMX-BF16), the activation
//             operand narrowed to 16 bits (exact: it holds 16-bit values);
//   kPacked   our packed GEMM (cpu_gemm.cpp), 16-bit operands widened in registers;
//   kWidened  oneDNN's sgemm on the 16-bit operand widened to fp32 a block at a time;
//   kPackedB  our packed GEMM with a weight whose rows it could read in place (forward with
//             kInOut, dinput with kOutIn) widened into packed panels instead: the same products
//             in the same order, so the same bits as kPacked; faster where many row strips
//             would each widen the weight again (measured, not assumed).
enum class GemmPath : uint8_t { kNative, kPacked, kWidened, kPackedB };
inline constexpr GemmPath kAllGemmPaths[] = {GemmPath::kNative, GemmPath::kPacked,
                                             GemmPath::kWidened, GemmPath::kPackedB};

std::string_view gemm_path_name(GemmPath path);  // "native", "packed", "widened", "packed_b"
// kInput naming `what` (a config key, a file) unless `name` is one of the names above.
GemmPath parse_gemm_path(std::string_view name, std::string_view what);

// A product as the kernels meet it: M, K, N and the layout are matmul's (kernels.h); `operand`
// is the 16-bit operand's dtype (the weight's, or the weight gradient's for kDweight); `act`
// the table's activation dtype.
struct GemmKey {
  GemmProduct product = GemmProduct::kForward;
  int64_t M = 0, K = 0, N = 0;
  WeightLayout layout = WeightLayout::kInOut;
  DType operand = DType::kBF16;
  DType act = DType::kBF16;
  auto operator<=>(const GemmKey&) const = default;
};

// "fwd 256x768x2304 io bf16/bf16": product, M x K x N, layout (io: kInOut, oi: kOutIn), the
// operand's dtype / the activations'. parse_gemm_key inverts it (kInput naming `what`).
std::string to_string(const GemmKey& key);
GemmKey parse_gemm_key(std::string_view text, std::string_view what);

// The products a training step makes for the matmuls whose forward keys are `forwards`: each
// forward, its dinput and (a 16-bit weight gradient, `grad` not fp32) its dweight.
std::vector<GemmKey> training_gemm_keys(const std::set<GemmKey>& forwards, DType grad);

// The CPU's abilities the paths depend on (CpuKernels' own, so a test can state another CPU).
struct GemmAbilities {
  bool native_bf16 = false;  // native_bf16_gemm() under the table's instruction set
};
// The abilities of this CPU under ZT_CPU_SIMD and DNNL_MAX_CPU_ISA.
GemmAbilities cpu_gemm_abilities();
// The paths that can compute `key` on a CPU with `abilities`, in a fixed order (the fallback
// first): ties in measure_gemm_paths go to the earlier.
std::vector<GemmPath> gemm_candidates(const GemmKey& key, const GemmAbilities& abilities);
// The rule before paths were measured: native for bf16 where the CPU has it, else packed.
GemmPath fallback_gemm_path(const GemmKey& key, const GemmAbilities& abilities);

// One path per key: what the kernels compute each product with.
class GemmPaths {
 public:
  void set(const GemmKey& key, GemmPath path) { paths_[key] = path; }
  std::optional<GemmPath> find(const GemmKey& key) const;
  const std::map<GemmKey, GemmPath>& entries() const { return paths_; }
  bool empty() const { return paths_.empty(); }
  bool operator==(const GemmPaths&) const = default;

  // "fwd 256x768x2304 io bf16/bf16=native;..." in key order; parse() inverts it and throws
  // kInput naming `what` and the first bad entry. An empty table is "".
  std::string serialize() const;
  static GemmPaths parse(std::string_view text, std::string_view what);
  // 16 hex digits of FNV-1a 64 over serialize(): a short name for the table in logs.
  std::string hash() const;

 private:
  std::map<GemmKey, GemmPath> paths_;
};

// A path's measured rate on one key (GFLOP/s, 2·M·K·N per product).
struct GemmRate {
  GemmPath path;
  double gflops = 0.0;
};
// One key's measurement: every candidate's rate and the one chosen (the fastest).
struct GemmMeasurement {
  GemmKey key;
  std::vector<GemmRate> rates;
  GemmPath chosen = GemmPath::kPacked;
};

// How a measurement times a candidate: `run` computes the product once on scratch buffers;
// warm_up runs it untimed (oneDNN creates its primitive, the scratch grows), seconds returns the
// seconds of one run. measure_gemm_paths alternates a key's candidates over rounds and keeps
// each one's best. WallClockGemmTimer runs the product; a test's fake returns its own figures by
// key and path without running anything.
class GemmTimer {
 public:
  virtual ~GemmTimer() = default;
  virtual void warm_up(const GemmKey&, GemmPath, const std::function<void()>&) {}
  virtual double seconds(const GemmKey& key, GemmPath path, const std::function<void()>& run) = 0;
};

// The steady clock around one run.
class WallClockGemmTimer final : public GemmTimer {
 public:
  void warm_up(const GemmKey&, GemmPath, const std::function<void()>& run) override { run(); }
  double seconds(const GemmKey& key, GemmPath path, const std::function<void()>& run) override;
};

// Every key's candidates on this CPU timed through `timer` on scratch buffers (cpu_gemm_measure
// .cpp: a CpuKernels under the current instruction set, each candidate installed alone), the
// fastest chosen. Each candidate is warmed up, then timed once per round, the candidates'
// order reversed every other round, so a neighbour's burst of load on a shared machine falls on
// all alike; at least 3 rounds, more (at most 16) while the key's timed total is under 0.1 s;
// a candidate's figure is its best round. Deterministic given the timer's figures. `abilities`
// names the candidates: a test's fake timer may state another CPU's; a timer that runs the products
// needs this CPU's.
std::vector<GemmMeasurement> measure_gemm_paths(
    std::span<const GemmKey> keys, GemmTimer& timer,
    const GemmAbilities& abilities = cpu_gemm_abilities());
// The same choice from figures given per key and path (what measure_gemm_paths does after
// timing; `abilities` names the candidates).
GemmMeasurement choose_gemm_path(const GemmKey& key, const GemmAbilities& abilities,
                                 const std::function<double(GemmPath)>& seconds);
GemmPaths paths_of(std::span<const GemmMeasurement> measurements);

// What a CpuDevice's kernel tables share: the installed paths, and (while `recording`) the
// 16-bit products' keys they computed, for the set-up pass that finds a model's shapes.
class GemmRouting {
 public:
  void install(std::shared_ptr<const GemmPaths> paths);
  std::shared_ptr<const GemmPaths> installed() const;
  // The path for `key`: the installed table's, else the fallback rule. Notes the key while
  // recording.
  GemmPath path_for(const GemmKey& key, const GemmAbilities& abilities);
  void start_recording();
  // The keys computed since start_recording, and recording stopped.
  std::set<GemmKey> stop_recording();

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const GemmPaths> paths_;
  bool recording_ = false;
  std::set<GemmKey> seen_;
};

}  // namespace zt
