// The GEMM path choice of a CPU job (see gemm_choice.h).
#include "train/gemm_choice.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "launch/tool_frame.h"
#include "runtime/cpu/cpu_gemm_cache.h"
#include "runtime/status.h"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

// The keys of `paths` whose path differs from `other`'s, as "key: a (b)" lines' text.
std::string differing(const GemmPaths& paths, const std::vector<GemmMeasurement>& other,
                      int& count) {
  std::string out;
  count = 0;
  for (const GemmMeasurement& m : other) {
    const std::optional<GemmPath> p = paths.find(m.key);
    if (!p || *p == m.chosen) continue;
    if (count++ < 3)
      out += fmt::format("{}{}: {} (here {})", out.empty() ? "" : ", ", to_string(m.key),
                         gemm_path_name(*p), gemm_path_name(m.chosen));
  }
  return out;
}

// The rates table for the start-up log: one line per key.
std::vector<std::string> rate_lines(const std::vector<GemmMeasurement>& shown) {
  std::vector<std::string> lines;
  if (shown.empty()) return lines;
  std::string header = fmt::format("  {:<34} {:>8}", "product", "path");
  for (GemmPath p : kAllGemmPaths) header += fmt::format(" {:>9}", gemm_path_name(p));
  lines.push_back(header + "  (GFLOP/s)");
  for (const GemmMeasurement& m : shown) {
    std::string cells;
    for (GemmPath p : kAllGemmPaths) {
      std::string cell = "-";
      for (const GemmRate& r : m.rates)
        if (r.path == p) cell = fmt::format("{:.1f}", r.gflops);
      cells += fmt::format(" {:>9}", cell);
    }
    lines.push_back(
        fmt::format("  {:<34} {:>8}{}", to_string(m.key), gemm_path_name(m.chosen), cells));
  }
  return lines;
}

}  // namespace

GemmSetting gemm_setting(const std::string& configured) {
  GemmSetting s;
  s.value = configured;
  if (const char* env = std::getenv("ZT_CPU_GEMM"); env && *env) {
    s.value = env;
    s.source = "ZT_CPU_GEMM";
  }
  if (s.value == "auto")
    s.mode = GemmSetting::Mode::kAuto;
  else if (s.value == "measure")
    s.mode = GemmSetting::Mode::kMeasure;
  else if (s.value == "flags")
    s.mode = GemmSetting::Mode::kFlags;
  else if (s.value == "native" || s.value == "packed" || s.value == "widened" ||
           s.value == "packed_b") {
    s.mode = GemmSetting::Mode::kFixed;
    s.fixed = parse_gemm_path(s.value, s.source);
  } else {
    throw_input(
        fmt::format("{} is '{}'; use auto, measure, flags, native, packed, widened or packed_b",
                    s.source, s.value));
  }
  return s;
}

GemmDecision decide_gemm_paths(std::span<const GemmKey> keys, const GemmSetting& setting,
                               const GemmAbilities& abilities,
                               const std::vector<GemmMeasurement>& cached,
                               const GemmPaths* checkpoint, GemmTimer& timer) {
  GemmDecision d;
  using Mode = GemmSetting::Mode;
  if (setting.mode == Mode::kFlags || setting.mode == Mode::kFixed) {
    for (const GemmKey& key : keys) {
      GemmPath path = fallback_gemm_path(key, abilities);
      if (setting.mode == Mode::kFixed) {
        const std::vector<GemmPath> can = gemm_candidates(key, abilities);
        const bool runs = std::find(can.begin(), can.end(), setting.fixed) != can.end();
        path = setting.fixed;
        if (!runs && setting.fixed == GemmPath::kPackedB)
          path = GemmPath::kPacked;  // where the weight is packed anyway: the same code
        else if (!runs)
          throw_input(fmt::format(
              "{} is '{}', but '{}' cannot run on that path here (no native {} matmul in "
              "oneDNN on this CPU); use auto, flags, packed, widened or packed_b",
              setting.source, setting.value, to_string(key), dtype_name(key.operand)));
      }
      d.paths.set(key, path);
    }
    if (checkpoint && !checkpoint->empty() && d.paths != *checkpoint)
      d.notes.push_back(fmt::format(
          "{}={} differs from the checkpoint's GEMM paths (hash {}): losses will not continue "
          "its bits exactly",
          setting.source, setting.value, checkpoint->hash()));
    return d;
  }
  // Each key: the checkpoint's path kept where it can run here; this machine's choice from the
  // cache (kAuto) or measured now, except for a kept key the cache lacks (not measured).
  std::vector<GemmKey> missing;
  std::vector<const GemmMeasurement*> hits(keys.size(), nullptr);
  std::vector<bool> keep(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    const GemmKey& key = keys[i];
    const std::vector<GemmPath> can = gemm_candidates(key, abilities);
    const auto runs = [&](GemmPath p) { return std::find(can.begin(), can.end(), p) != can.end(); };
    if (setting.mode == Mode::kAuto)
      for (const GemmMeasurement& m : cached)
        if (m.key == key && runs(m.chosen)) hits[i] = &m;
    const std::optional<GemmPath> kept = checkpoint ? checkpoint->find(key) : std::nullopt;
    keep[i] = kept && runs(*kept);
    if (kept && !keep[i])
      d.notes.push_back(fmt::format(
          "the checkpoint computed '{}' on the {} path, which this CPU cannot run: its bits "
          "will differ",
          to_string(key), gemm_path_name(*kept)));
    if (!hits[i] && !keep[i]) missing.push_back(key);
  }
  d.measured = measure_gemm_paths(missing, timer, abilities);
  std::vector<GemmMeasurement> known;  // this machine's choice where cached or measured
  for (size_t i = 0, next = 0; i < keys.size(); ++i) {
    const GemmMeasurement* m = hits[i];
    if (!m && !keep[i]) m = &d.measured[next++];
    if (m) known.push_back(*m);
    d.paths.set(keys[i], keep[i] ? *checkpoint->find(keys[i]) : m->chosen);
  }
  d.shown = known;
  int count = 0;
  const std::string which = differing(d.paths, known, count);
  if (count > 0)
    d.notes.push_back(fmt::format(
        "using the checkpoint's GEMM paths (hash {}) for bitwise continuity: {} of them "
        "differ from this machine's measured choice ({}{})",
        d.paths.hash(), count, which, count > 3 ? ", ..." : ""));
  return d;
}

GemmPaths agree_gemm_paths(Communicator& comm, const std::function<GemmPaths()>& decide) {
  // Rank 0's table as text, or its error after a '!', in 4-byte words (broadcast copies bits).
  std::string text;
  if (comm.rank() == 0) {
    try {
      text = decide().serialize();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInput) throw;
      text = std::string("!") + e.what();
    }
  }
  uint32_t length = static_cast<uint32_t>(text.size());
  comm.broadcast(&length, 1, DType::kF32, 0);
  std::vector<uint32_t> words((length + 3) / 4);
  std::memcpy(words.data(), text.data(), comm.rank() == 0 ? length : 0);
  if (!words.empty())
    comm.broadcast(words.data(), static_cast<int64_t>(words.size()), DType::kF32, 0);
  text.assign(reinterpret_cast<const char*>(words.data()), length);
  if (text.starts_with("!")) throw_input(text.substr(1));
  return GemmPaths::parse(text, "rank 0's GEMM paths");
}

GemmChoice choose_cpu_gemm(CpuDevice& device, Engine& engine, Communicator& comm,
                           const GemmSetting& setting, int64_t B, int64_t T,
                           const std::optional<GemmPaths>& checkpoint, GemmTimer& timer) {
  GemmChoice choice;
  const Precision& precision = engine.options().precision;
  if (precision.compute == DType::kF32) {
    choice.paths = std::make_shared<GemmPaths>();
    choice.lines.push_back("cpu GEMM paths: fp32 compute, every product on dnnl_sgemm");
    return choice;
  }
  const auto t0 = Clock::now();
  // The products: one evaluation forward with the tables recording (its loss unused).
  const std::vector<int32_t> tokens(static_cast<size_t>(B * T), 0);
  device.gemm_routing().start_recording();
  engine.eval_loss(Batch{tokens.data(), tokens.data(), B, T, nullptr});
  const std::vector<GemmKey> keys =
      training_gemm_keys(device.gemm_routing().stop_recording(), precision.grad_accum);
  GemmDecision decision;
  std::string source;
  GemmPaths agreed = agree_gemm_paths(comm, [&] {
    const std::string signature = cpu_gemm_signature(cpu_threads());
    const std::string cache = gemm_cache_path(signature);
    std::string note;
    std::vector<GemmMeasurement> cached = read_gemm_cache(cache, signature, note);
    decision = decide_gemm_paths(keys, setting, cpu_gemm_abilities(), cached,
                                 checkpoint ? &*checkpoint : nullptr, timer);
    if (!note.empty()) decision.notes.insert(decision.notes.begin(), note);
    source = fmt::format("{} {}", setting.source, setting.value);
    if (!decision.measured.empty()) {
      for (const GemmMeasurement& m : decision.measured) {
        std::erase_if(cached, [&](const GemmMeasurement& c) { return c.key == m.key; });
        cached.push_back(m);
      }
      const std::string failed = write_gemm_cache(cache, signature, cached);
      if (!failed.empty()) decision.notes.push_back(failed);
      source += fmt::format(", {} measured, cache {}", decision.measured.size(), cache);
    } else if (!decision.shown.empty()) {
      source += fmt::format(", from cache {}", cache);
    }
    return decision.paths;
  });
  choice.paths = std::make_shared<const GemmPaths>(std::move(agreed));
  device.gemm_routing().install(choice.paths);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  choice.lines.push_back(fmt::format(
      "cpu GEMM paths: {} products, table {} ({}; set-up {:.0f} ms on rank 0, agreed by all "
      "ranks)",
      choice.paths->entries().size(), choice.paths->hash(), source, ms));
  for (const std::string& line : rate_lines(decision.shown)) choice.lines.push_back(line);
  if (decision.shown.empty())
    for (const auto& [key, path] : choice.paths->entries())
      choice.lines.push_back(fmt::format("  {:<34} {:>8}", to_string(key), gemm_path_name(path)));
  for (const std::string& note : decision.notes) choice.lines.push_back("note: " + note);
  return choice;
}

int set_up_job_gemm_paths(Device& device, Engine& engine, Communicator& comm, const Config& config,
                          const CheckpointReader* resume, MetricsWriter& metrics,
                          GemmChoice& choice) {
  auto* cpu = dynamic_cast<CpuDevice*>(&device);
  if (!cpu) return 0;
  std::optional<GemmPaths> checkpoint;
  if (resume)
    checkpoint =
        checkpoint_gemm_paths(resume->manifest().trainer_state, resume->dir() + "/manifest.json");
  WallClockGemmTimer timer;
  std::string refused;
  try {
    choice = choose_cpu_gemm(*cpu, engine, comm, gemm_setting(config.zt.cpu_gemm),
                             config.train_micro_batch_size_per_gpu, config.zt.seq_len, checkpoint,
                             timer);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInput) throw;
    describe_current_exception(&refused);
  }
  const int code = agree_on_failure("zt-train", comm.rank(), comm.world(),
                                    refused.empty() ? 0 : kExitBadInput, refused);
  if (code == 0)
    metrics.write(nlohmann::ordered_json{{"cpu_gemm", choice.paths->serialize()},
                                         {"cpu_gemm_hash", choice.paths->hash()}});
  return code;
}

std::optional<GemmPaths> checkpoint_gemm_paths(const nlohmann::json& trainer_state,
                                               const std::string& where) {
  const auto it = trainer_state.find("cpu_gemm");
  if (it == trainer_state.end()) return std::nullopt;
  if (!it->is_string())
    throw_input(fmt::format("{}: trainer_state.cpu_gemm is not a string of GEMM paths", where));
  return GemmPaths::parse(it->get<std::string>(), where + ": trainer_state.cpu_gemm");
}

}  // namespace zt
