// The GEMM measurement cache (see cpu_gemm_cache.h).
#include "runtime/cpu/cpu_gemm_cache.h"

#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/file_io.h"
#include "runtime/fnv1a.h"
#include "runtime/status.h"

namespace zt {
namespace {

constexpr int kFormat = 1;

// The vendor string and the display family and model (CPUID leaves 0 and 1).
std::string cpu_identity() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return "unknown";
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return vendor;
  unsigned family = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
  if (family == 0xf) family += (a >> 20) & 0xff;
  if (family == 0x6 || family >= 0xf) model += ((a >> 16) & 0xf) << 4;
  return fmt::format("{} family {} model {}", vendor, family, model);
}

std::string isa_name(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::kAvx512: return "avx512";
    case cpu::Isa::kAvx2: return "avx2";
    case cpu::Isa::kSse2: break;
  }
  return "sse2";
}

uint64_t fnv1a(const std::string& text) { return fnv1a64(text); }

GemmMeasurement measurement_of(const nlohmann::json& j, const std::string& path) {
  GemmMeasurement m;
  m.key = parse_gemm_key(j.at("key").get<std::string>(), path);
  m.chosen = parse_gemm_path(j.at("chosen").get<std::string>(), path);
  for (const auto& [name, rate] : j.at("gflops").items())
    m.rates.push_back({parse_gemm_path(name, path), rate.get<double>()});
  return m;
}

}  // namespace

std::string cpu_gemm_signature(int threads) {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{} | {} | oneDNN {}.{}.{} {} | ZT_CPU_SIMD {} | {} threads", cpu_identity(),
                     cpu_simd_features(), v->major, v->minor, v->patch, onednn_isa_name(),
                     isa_name(cpu::choose_isa()), threads);
}

std::string gemm_cache_path(const std::string& signature) {
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    dir = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home)
    dir = std::filesystem::path(home) / ".cache";
  else
    return "";
  return (dir / "zerotrain" / fmt::format("cpu_gemm-{:016x}.json", fnv1a(signature))).string();
}

std::vector<GemmMeasurement> read_gemm_cache(const std::string& path, const std::string& signature,
                                             std::string& note) {
  note.clear();
  std::vector<GemmMeasurement> out;
  if (path.empty() || !std::filesystem::exists(path)) return out;
  try {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw_input("cannot be read");
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (j.at("format").get<int>() != kFormat)
      throw_input(fmt::format("format {} is not {}", j.at("format").dump(), kFormat));
    if (j.at("signature").get<std::string>() != signature)
      throw_input("it was measured on another CPU or set-up (its signature differs)");
    for (const nlohmann::json& m : j.at("measurements")) out.push_back(measurement_of(m, path));
  } catch (const std::exception& e) {  // nlohmann's errors and ours: the file is not used
    out.clear();
    note = fmt::format("ignored the GEMM path cache {} ({}); measuring again", path, e.what());
  }
  return out;
}

std::string write_gemm_cache(const std::string& path, const std::string& signature,
                             const std::vector<GemmMeasurement>& measurements) {
  if (path.empty()) return "no GEMM path cache: neither XDG_CACHE_HOME nor HOME is set";
  nlohmann::ordered_json j = {{"format", kFormat}, {"signature", signature}};
  j["measurements"] = nlohmann::ordered_json::array();
  for (const GemmMeasurement& m : measurements) {
    nlohmann::ordered_json rates = nlohmann::ordered_json::object();
    for (const GemmRate& r : m.rates) rates[std::string(gemm_path_name(r.path))] = r.gflops;
    j["measurements"].push_back(
        {{"key", to_string(m.key)}, {"chosen", gemm_path_name(m.chosen)}, {"gflops", rates}});
  }
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    AtomicFile file(path);
    file.write(j.dump(1) + "\n");
    file.commit();
  } catch (const std::exception& e) {
    return fmt::format("the GEMM path cache {} was not written: {}", path, e.what());
  }
  return "";
}

}  // namespace zt
