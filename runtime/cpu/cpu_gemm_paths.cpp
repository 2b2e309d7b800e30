// GEMM paths: keys, candidates, the table's text form and the routing the kernels consult (see
// cpu_gemm_paths.h). No timing here (cpu_gemm_measure.cpp), no files (cpu_gemm_cache.cpp).
#include "runtime/cpu/cpu_gemm_paths.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/fnv1a.h"
#include "runtime/status.h"

namespace zt {
namespace {

constexpr std::string_view kProductNames[] = {"fwd", "dinp", "dw"};

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(sep);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

bool parse_int(std::string_view s, int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

bool parse_dtype_name(std::string_view s, DType& out) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    if (dtype_name(t) == s) {
      out = t;
      return true;
    }
  return false;
}

}  // namespace

std::string_view gemm_path_name(GemmPath path) {
  switch (path) {
    case GemmPath::kNative: return "native";
    case GemmPath::kPacked: return "packed";
    case GemmPath::kWidened: return "widened";
    case GemmPath::kPackedB: return "packed_b";
  }
  return "?";
}

GemmPath parse_gemm_path(std::string_view name, std::string_view what) {
  for (GemmPath p : kAllGemmPaths)
    if (gemm_path_name(p) == name) return p;
  throw_input(
      fmt::format("{}: '{}' is not a GEMM path (native, packed, widened or packed_b)", what, name));
}

std::string to_string(const GemmKey& key) {
  return fmt::format("{} {}x{}x{} {} {}/{}", kProductNames[static_cast<int>(key.product)], key.M,
                     key.K, key.N, key.layout == WeightLayout::kInOut ? "io" : "oi",
                     dtype_name(key.operand), dtype_name(key.act));
}

GemmKey parse_gemm_key(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    throw_input(fmt::format(
        "{}: '{}' is not a GEMM key (expected e.g. 'fwd 256x768x2304 io bf16/bf16')", what, text));
  };
  const std::vector<std::string_view> words = split(text, ' ');
  if (words.size() != 4) bad();
  GemmKey key;
  int product = -1;
  for (int p = 0; p < 3; ++p)
    if (words[0] == kProductNames[p]) product = p;
  const std::vector<std::string_view> dims = split(words[1], 'x');
  const std::vector<std::string_view> dtypes = split(words[3], '/');
  if (product < 0 || dims.size() != 3 || dtypes.size() != 2 || !parse_int(dims[0], key.M) ||
      !parse_int(dims[1], key.K) || !parse_int(dims[2], key.N) ||
      (words[2] != "io" && words[2] != "oi") || !parse_dtype_name(dtypes[0], key.operand) ||
      !parse_dtype_name(dtypes[1], key.act))
    bad();
  key.product = static_cast<GemmProduct>(product);
  key.layout = words[2] == "io" ? WeightLayout::kInOut : WeightLayout::kOutIn;
  return key;
}

std::vector<GemmKey> training_gemm_keys(const std::set<GemmKey>& forwards, DType grad) {
  std::vector<GemmKey> keys;
  for (GemmKey key : forwards) {
    if (key.product != GemmProduct::kForward) continue;
    keys.push_back(key);
    key.product = GemmProduct::kDinput;
    keys.push_back(key);
    if (grad == DType::kF32) continue;  // an fp32 weight gradient: sgemm, not keyed
    key.product = GemmProduct::kDweight;
    key.operand = grad;
    keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

GemmPath fallback_gemm_path(const GemmKey& key, const GemmAbilities& abilities) {
  const bool native =
      abilities.native_bf16 && key.act == DType::kBF16 && key.operand == DType::kBF16;
  return native ? GemmPath::kNative : GemmPath::kPacked;
}

std::vector<GemmPath> gemm_candidates(const GemmKey& key, const GemmAbilities& abilities) {
  const GemmPath first = fallback_gemm_path(key, abilities);
  std::vector<GemmPath> paths{first};
  if (first != GemmPath::kPacked) paths.push_back(GemmPath::kPacked);
  paths.push_back(GemmPath::kWidened);
  // Where the packed GEMM reads the weight's rows in place: the weight is B with unit column
  // stride (cpu_matmul_kernels.cpp).
  const bool rows_in_place =
      (key.product == GemmProduct::kForward && key.layout == WeightLayout::kInOut) ||
      (key.product == GemmProduct::kDinput && key.layout == WeightLayout::kOutIn);
  if (rows_in_place) paths.push_back(GemmPath::kPackedB);
  return paths;
}

std::optional<GemmPath> GemmPaths::find(const GemmKey& key) const {
  const auto it = paths_.find(key);
  if (it == paths_.end()) return std::nullopt;
  return it->second;
}

std::string GemmPaths::serialize() const {
  std::string out;
  for (const auto& [key, path] : paths_)
    out += fmt::format("{}{}={}", out.empty() ? "" : ";", to_string(key), gemm_path_name(path));
  return out;
}

GemmPaths GemmPaths::parse(std::string_view text, std::string_view what) {
  GemmPaths paths;
  if (text.empty()) return paths;
  for (std::string_view entry : split(text, ';')) {
    const size_t eq = entry.rfind('=');
    if (eq == std::string_view::npos)
      throw_input(fmt::format("{}: GEMM path entry '{}' has no '=path'", what, entry));
    const GemmKey key = parse_gemm_key(entry.substr(0, eq), what);
    if (paths.find(key))
      throw_input(fmt::format("{}: GEMM key '{}' appears twice", what, to_string(key)));
    paths.set(key, parse_gemm_path(entry.substr(eq + 1), what));
  }
  return paths;
}

std::string GemmPaths::hash() const { return fmt::format("{:016x}", fnv1a64(serialize())); }

GemmMeasurement choose_gemm_path(const GemmKey& key, const GemmAbilities& abilities,
                                 const std::function<double(GemmPath)>& seconds) {
  GemmMeasurement m{key, {}, fallback_gemm_path(key, abilities)};
  double best = 0.0;
  const double flops = 2.0 * static_cast<double>(key.M) * key.K * key.N;
  for (GemmPath path : gemm_candidates(key, abilities)) {
    const double s = seconds(path);
    m.rates.push_back({path, s > 0 ? flops / s / 1e9 : 0.0});
    if (m.rates.size() == 1 || s < best) {  // strictly faster: ties keep the earlier
      best = s;
      m.chosen = path;
    }
  }
  return m;
}

GemmPaths paths_of(std::span<const GemmMeasurement> measurements) {
  GemmPaths paths;
  for (const GemmMeasurement& m : measurements) paths.set(m.key, m.chosen);
  return paths;
}

void GemmRouting::install(std::shared_ptr<const GemmPaths> paths) {
  std::lock_guard<std::mutex> lock(mu_);
  paths_ = std::move(paths);
}

std::shared_ptr<const GemmPaths> GemmRouting::installed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paths_;
}

GemmPath GemmRouting::path_for(const GemmKey& key, const GemmAbilities& abilities) {
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_) seen_.insert(key);
  if (paths_)
    if (const std::optional<GemmPath> p = paths_->find(key)) return *p;
  return fallback_gemm_path(key, abilities);
}

void GemmRouting::start_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = true;
  seen_.clear();
}

std::set<GemmKey> GemmRouting::stop_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = false;
  return std::move(seen_);
}

GemmAbilities cpu_gemm_abilities() {
  return {.native_bf16 = cpu::choose_isa() == cpu::Isa::kAvx512 && native_bf16_gemm()};
}

}  // namespace zt
