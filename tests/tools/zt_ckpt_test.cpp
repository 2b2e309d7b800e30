// zt-ckpt (tools/checkpoint_tool.h, tools/zt_ckpt_main.cpp):
//   - consolidate gives the bytes save_weights writes for the same engine: fp32, a pure bf16
//     checkpoint (its working parameters, in bf16 and widened to fp32), a 2-rank checkpoint;
//   - import -> consolidate -> import -> consolidate is byte-identical to the weights imported;
//   - the consolidated file passes a safetensors parser written here from the published format
//     (and python's json/struct when python3 is there);
//   - consolidating gpt2-tiny holds at most one unit in its buffers, and its peak RSS grows by
//     less than 2x the largest unit plus a small constant;
//   - inspect verifies every file and record, and names the file of a corrupted checkpoint
//     (in process and through the executable: exit 2, one line);
//   - import refuses a wrong model and a used directory.
// zt-train --resume from an import and the same run's zt.save_weights: tests/e2e/zt_ckpt.sh.
#include "tools/checkpoint_tool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "pretrained/weights_io.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/formats/safetensors.h"
#include "runtime/status.h"
#include "train/checkpointer.h"
#include "zero/engine.h"
#include "zero/zero_policy.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// Vocabulary 61 padded to 128 rows: the exported wte is trimmed.
const Gpt2Config kSmall{2, 2, 16, 61, 8};

// Every test's files, under one directory per process, removed at exit.
const fs::path kTempRoot = fs::temp_directory_path() / ("zt_ckpt_" + std::to_string(::getpid()));
struct RemoveTempRoot {
  ~RemoveTempRoot() {
    std::error_code ec;
    fs::remove_all(kTempRoot, ec);
  }
} remove_temp_root_at_exit;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = kTempRoot / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    return e.message();
  }
  return "no error";
}

struct Fixture {
  Fixture(Gpt2Config c, uint64_t seed, DType compute = DType::kF32, bool master = true)
      : Fixture(c, options(seed, compute, master)) {}
  Fixture(Gpt2Config c, const EngineOptions& o) : model(c), engine(device, comm, model, o) {}
  static EngineOptions options(uint64_t seed, DType compute, bool master) {
    EngineOptions o;
    o.seed = seed;
    o.precision.compute = o.precision.grad_accum = o.precision.comm = compute;
    o.precision.master_weights = master;
    return o;
  }
  // A one-rank checkpoint of the engine, saved by zt-train's Checkpointer.
  void save_checkpoint(const fs::path& root, int64_t step) {
    CheckpointerOptions o;
    o.root = root.string();
    Checkpointer(engine, comm, std::move(o)).save_sync(step, nlohmann::json::object());
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  Gpt2 model;
  Engine engine;
};

// Weights with Hugging Face names and exported shapes, deterministic values, written with
// SafetensorsWriter (metadata {"format": "pt"}, as save_weights writes it).
void write_random_weights(Model& model, const fs::path& path, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::vector<float>> data;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (Unit* u : model.units())
    for (const auto& e : u->layout().entries()) {
      std::vector<int64_t> shape = e.spec.shape;
      shape[0] = e.spec.exported_rows();
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data.emplace_back(static_cast<size_t>(n));
      for (float& x : data.back()) x = normal(rng);
      w.add_f32(e.spec.name, shape, data.back().data());
    }
  w.write(path.string());
}

// ---- an independent reading of the safetensors format -----------------------------------------
// From the published format alone (not runtime/formats/safetensors.cpp): 8 bytes little-endian
// N, N bytes of JSON header, the byte buffer. Checked: N fits the file; the header is a JSON
// object; every entry (besides "__metadata__", string to string) has dtype, shape and
// data_offsets [begin, end]; end - begin = numel x dtype size; the entries, sorted by begin,
// cover the buffer exactly (contiguous from 0 to the file's end, no gap, no overlap); and, as
// the format's writers do, the header is padded with spaces so that the buffer starts at a
// multiple of 8. Returns the problems found ("" when none) and the entries by name.
struct ParsedTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};
std::string check_safetensors_format(const std::string& bytes,
                                     std::map<std::string, ParsedTensor>* tensors) {
  if (bytes.size() < 8) return "shorter than 8 bytes";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  if (n > bytes.size() - 8) return "header length past the end";
  if ((8 + n) % 8 != 0) return "the buffer does not start at a multiple of 8";
  const std::string header = bytes.substr(8, n);
  if (header.find_last_not_of(' ') + 1 != header.find_last_of('}') + 1)
    return "the header ends in something other than '}' and spaces";
  nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (!j.is_object()) return "the header is not a JSON object";
  const uint64_t buffer = bytes.size() - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, value] : v.items())
        if (!value.is_string()) return "metadata value of " + k + " is not a string";
      continue;
    }
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return name + ": dtype, shape or data_offsets missing";
    ParsedTensor t;
    t.dtype = v["dtype"].get<std::string>();
    const uint64_t size = t.dtype == "F32" ? 4 : (t.dtype == "F16" || t.dtype == "BF16") ? 2 : 0;
    if (size == 0) return name + ": unexpected dtype " + t.dtype;
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      t.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    t.begin = v["data_offsets"][0].get<uint64_t>();
    t.end = v["data_offsets"][1].get<uint64_t>();
    if (t.end < t.begin || t.end - t.begin != numel * size) return name + ": wrong byte count";
    ranges.emplace_back(t.begin, t.end);
    (*tensors)[name] = t;
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != at) return "the tensors are not contiguous at byte " + std::to_string(at);
    at = end;
  }
  if (at != buffer)
    return "the tensors end at " + std::to_string(at) + ", the buffer at " + std::to_string(buffer);
  return "";
}

struct ToolRun {
  int code = -1;
  std::string out;
};

ToolRun run_command(const std::string& command) {
  ToolRun r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kZtCkpt = std::string(ZT_BINARY_DIR) + "/bin/zt-ckpt";

// ---- consolidate = save_weights -----------------------------------------------------------------

TEST(ZtCkpt, ConsolidateWritesTheBytesOfSaveWeights) {
  const fs::path dir = temp_dir("fp32");
  Fixture a(kSmall, 3);
  a.save_checkpoint(dir / "ckpt", 7);
  save_weights(a.engine, (dir / "saved.safetensors").string());
  const ConsolidateResult r = consolidate_checkpoint(
      (dir / "ckpt").string(), (dir / "out.safetensors").string(), DType::kF32);
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.source_kind, "master");
  EXPECT_EQ(r.dir, (dir / "ckpt" / "step7").string());
  EXPECT_EQ(file_bytes(dir / "out.safetensors"), file_bytes(dir / "saved.safetensors"));
  EXPECT_EQ(r.file_bytes, static_cast<int64_t>(fs::file_size(dir / "out.safetensors")));
  // and with the model given, checked against the manifest
  std::vector<CheckpointUnit> units;
  for (Unit* u : a.model.units())
    units.push_back(checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
  consolidate_checkpoint((dir / "ckpt").string(), (dir / "model.safetensors").string(), DType::kF32,
                         &units);
  EXPECT_EQ(file_bytes(dir / "model.safetensors"), file_bytes(dir / "saved.safetensors"));
  Gpt2 other(Gpt2Config{2, 2, 32, 61, 8});
  units.clear();
  for (Unit* u : other.units())
    units.push_back(checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
  EXPECT_NE(error_of([&] {
              consolidate_checkpoint((dir / "ckpt").string(), (dir / "x.safetensors").string(),
                                     DType::kF32, &units);
            }).find("was written for a different model"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
}

// A pure bf16 checkpoint holds "working" records only: consolidated in bf16 they are the bytes
// of save_weights' 16-bit export, in fp32 those of its master export (widened exactly).
TEST(ZtCkpt, PureSixteenBitCheckpointsConsolidateTheirWorkingParameters) {
  const fs::path dir = temp_dir("pure");
  Fixture a(kSmall, 4, DType::kBF16, /*master=*/false);
  a.save_checkpoint(dir / "ckpt", 2);
  save_weights(a.engine, (dir / "bf16.safetensors").string(), WeightsDtype::kWorking);
  save_weights(a.engine, (dir / "fp32.safetensors").string(), WeightsDtype::kMaster);
  const ConsolidateResult r = consolidate_checkpoint(
      (dir / "ckpt").string(), (dir / "out_bf16.safetensors").string(), DType::kBF16);
  EXPECT_EQ(r.source_kind, "working");
  EXPECT_EQ(file_bytes(dir / "out_bf16.safetensors"), file_bytes(dir / "bf16.safetensors"));
  consolidate_checkpoint((dir / "ckpt").string(), (dir / "out_fp32.safetensors").string(),
                         DType::kF32);
  EXPECT_EQ(file_bytes(dir / "out_fp32.safetensors"), file_bytes(dir / "fp32.safetensors"));
}

// Mixed bf16 with an fp32 master: --dtype bf16 rounds the master as the engine rounds it into
// its working parameters, so the file is save_weights' 16-bit export.
TEST(ZtCkpt, SixteenBitConsolidationRoundsTheMasterAsTheEngineDoes) {
  const fs::path dir = temp_dir("mixed");
  Fixture a(kSmall, 5, DType::kBF16);
  a.save_checkpoint(dir / "ckpt", 1);
  save_weights(a.engine, (dir / "bf16.safetensors").string(), WeightsDtype::kWorking);
  const ConsolidateResult r = consolidate_checkpoint(
      (dir / "ckpt").string(), (dir / "out.safetensors").string(), DType::kBF16);
  EXPECT_EQ(r.source_kind, "master");
  EXPECT_EQ(file_bytes(dir / "out.safetensors"), file_bytes(dir / "bf16.safetensors"));
}

// Two ranks' shard files of a ZeRO-3 layout (each rank its slice of the padded buffer, the
// padding included): consolidation puts the ranges back together.
TEST(ZtCkpt, ConsolidatesShardsOfEveryRank) {
  const fs::path dir = temp_dir("ranks");
  Fixture a(kSmall, 6);
  save_weights(a.engine, (dir / "saved.safetensors").string());
  const fs::path root = dir / "ckpt";
  const std::string step_dir = prepare_checkpoint_dir(root.string(), 3);
  CheckpointManifest manifest;
  manifest.step = 3;
  manifest.world_size = 2;
  manifest.zero_stage = 3;
  auto units = a.model.units();
  for (int rank = 0; rank < 2; ++rank) {
    ShardFileWriter writer(step_dir, rank);
    for (size_t u = 0; u < units.size(); ++u) {
      const ShardLayout shard(units[u]->layout().numel(), 2, rank);
      std::vector<float> full(static_cast<size_t>(shard.padded), 0.0f);
      a.engine.read_unit_params(static_cast<int>(u), full.data());
      writer.add_record(units[u]->name(), "master", DType::kF32, shard.begin(), shard.shard,
                        full.data() + shard.begin());
      if (rank == 0)
        manifest.units.push_back(
            checkpoint_unit(units[u]->name(), units[u]->layout(), shard.padded));
    }
    manifest.files.push_back(writer.finish());
  }
  commit_checkpoint(root.string(), 3, manifest, 0);
  consolidate_checkpoint(root.string(), (dir / "out.safetensors").string(), DType::kF32);
  EXPECT_EQ(file_bytes(dir / "out.safetensors"), file_bytes(dir / "saved.safetensors"));
}

// ---- import -----------------------------------------------------------------------------------

TEST(ZtCkpt, ImportThenConsolidateIsByteIdentical) {
  const fs::path dir = temp_dir("roundtrip");
  Gpt2 model(kSmall);
  write_random_weights(model, dir / "in.safetensors", 11);
  const ImportResult imported =
      import_weights((dir / "in.safetensors").string(), (dir / "a").string(), model, {});
  EXPECT_EQ(imported.dir, (dir / "a" / "step0").string());
  EXPECT_EQ(imported.optimizer_state, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  consolidate_checkpoint((dir / "a").string(), (dir / "a.safetensors").string(), DType::kF32);
  EXPECT_EQ(file_bytes(dir / "a.safetensors"), file_bytes(dir / "in.safetensors"));
  import_weights((dir / "a.safetensors").string(), (dir / "b").string(), model, {});
  consolidate_checkpoint((dir / "b").string(), (dir / "b.safetensors").string(), DType::kF32);
  EXPECT_EQ(file_bytes(dir / "b.safetensors"), file_bytes(dir / "a.safetensors"));
  // The shard files of both imports are the same bytes too.
  EXPECT_EQ(file_bytes(dir / "a" / "step0" / "rank0.zts"),
            file_bytes(dir / "b" / "step0" / "rank0.zts"));
}

// An import loads into an engine as a zt-train checkpoint does: the master from the file, the
// optimizer at step 0 with zero state, and no notes beyond none.
TEST(ZtCkpt, ImportLoadsIntoAnEngineAsAFreshStart) {
  const fs::path dir = temp_dir("load");
  Fixture a(kSmall, 8);
  save_weights(a.engine, (dir / "in.safetensors").string());
  import_weights((dir / "in.safetensors").string(), (dir / "ckpt").string(), a.model, {});
  const CheckpointReader reader((dir / "ckpt").string());
  const nlohmann::json& t = reader.manifest().trainer_state;
  EXPECT_EQ(t.at("step"), 0);
  EXPECT_EQ(t.at("train_position"), 0);
  Fixture b(kSmall, 9);
  const std::vector<std::string> notes = b.engine.load_state(reader, t.at("engine"));
  EXPECT_TRUE(notes.empty()) << notes.front();
  for (int u = 0; u < a.engine.num_units(); ++u) {
    const int64_t n = a.model.units()[u]->layout().numel();
    EXPECT_EQ(std::memcmp(a.engine.unit_params(u), b.engine.unit_params(u), n * 4), 0) << u;
  }
  // Another optimizer's run refuses it, naming both state lists.
  EngineOptions o = Fixture::options(9, DType::kF32, true);
  o.optimizer.type = OptimizerOptions::Type::kSgd;
  o.optimizer.momentum = 0.9f;
  Fixture sgd(kSmall, o);
  Engine& momentum = sgd.engine;
  EXPECT_NE(error_of([&] {
              momentum.load_state(reader, t.at("engine"));
            }).find("the checkpoint's optimizer keeps [exp_avg, exp_avg_sq]"),
            std::string::npos);
  ImportOptions with_momentum;
  with_momentum.optimizer = o.optimizer;
  import_weights((dir / "in.safetensors").string(), (dir / "sgd").string(), a.model, with_momentum);
  const CheckpointReader sgd_reader((dir / "sgd").string());
  EXPECT_TRUE(
      momentum.load_state(sgd_reader, sgd_reader.manifest().trainer_state.at("engine")).empty());
}

TEST(ZtCkpt, ImportRefusesAnotherModelAndAUsedDirectory) {
  const fs::path dir = temp_dir("refuse");
  Gpt2 model(kSmall);
  write_random_weights(model, dir / "in.safetensors", 12);
  Gpt2 wider(Gpt2Config{2, 2, 32, 61, 8});
  EXPECT_NE(error_of([&] {
              import_weights((dir / "in.safetensors").string(), (dir / "w").string(), wider, {});
            }).find("has shape [61, 16], expected [61, 32]"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "w" / "latest"));
  import_weights((dir / "in.safetensors").string(), (dir / "used").string(), model, {});
  EXPECT_NE(error_of([&] {
              import_weights((dir / "in.safetensors").string(), (dir / "used").string(), model, {});
            }).find("is not an empty directory"),
            std::string::npos);
}

// ---- the file's format -------------------------------------------------------------------------

TEST(ZtCkpt, ConsolidatedFilePassesAnIndependentFormatCheck) {
  const fs::path dir = temp_dir("format");
  Fixture a(kSmall, 13);
  a.save_checkpoint(dir / "ckpt", 1);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const fs::path out = dir / fmt::format("out_{}.safetensors", dtype_name(dtype));
    consolidate_checkpoint((dir / "ckpt").string(), out.string(), dtype);
    std::map<std::string, ParsedTensor> tensors;
    EXPECT_EQ(check_safetensors_format(file_bytes(out), &tensors), "") << dtype_name(dtype);
    ASSERT_TRUE(tensors.contains("wte.weight"));
    EXPECT_EQ(tensors["wte.weight"].shape, (std::vector<int64_t>{61, 16}));  // not 128 rows
    EXPECT_EQ(tensors["wte.weight"].dtype, dtype == DType::kF32    ? "F32"
                                           : dtype == DType::kBF16 ? "BF16"
                                                                   : "F16");
    EXPECT_EQ(tensors.size(), 4 + 12 * 2u);  // wte, wpe, ln_f (2) + 12 per block
  }
  // python's json and struct, the way any reader would start, when python3 is there.
  if (run_command("python3 -c 'import json, struct'").code != 0)
    GTEST_SKIP() << "no python3: the C++ format check above ran";
  const std::string script = fmt::format(
      "import json, struct, sys\n"
      "b = open('{}', 'rb').read()\n"
      "(n,) = struct.unpack('<Q', b[:8])\n"
      "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
      "meta = h.pop('__metadata__', {{}})\n"
      "size = {{'F32': 4, 'F16': 2, 'BF16': 2}}\n"
      "spans = sorted(v['data_offsets'] for v in h.values())\n"
      "end = 0\n"
      "for (s, e), v in zip(spans, sorted(h.values(), key=lambda v: v['data_offsets'])):\n"
      "    assert s == end, (s, end)\n"
      "    count = 1\n"
      "    for d in v['shape']: count *= d\n"
      "    assert e - s == count * size[v['dtype']]\n"
      "    end = e\n"
      "assert 8 + n + end == len(b) and (8 + n) % 8 == 0\n"
      "wte = struct.unpack_from('<4f', b, 8 + n + h['wte.weight']['data_offsets'][0])\n"
      "print(len(h), meta.get('format'), h['wte.weight']['shape'],\n"
      "      ' '.join('%.9g' % x for x in wte))\n",
      (dir / "out_fp32.safetensors").string());
  std::ofstream(dir / "check.py") << script;
  const ToolRun py = run_command("python3 " + (dir / "check.py").string());
  ASSERT_EQ(py.code, 0) << py.out;
  const SafetensorsReader reader = SafetensorsReader::open((dir / "out_fp32.safetensors").string());
  std::vector<float> wte(static_cast<size_t>(reader.find("wte.weight")->numel()));
  reader.read_as_f32(*reader.find("wte.weight"), wte.data());
  EXPECT_EQ(py.out, fmt::format("28 pt [61, 16] {:.9g} {:.9g} {:.9g} {:.9g}\n", wte[0], wte[1],
                                wte[2], wte[3]));
}

// ---- memory ----------------------------------------------------------------------------------

// gpt2-tiny: the root unit (wte 50304 x 128, wpe, ln_f: 25.9 MB in fp32) is the largest. The
// tool's buffers hold one unit (plus a 4 MiB conversion buffer for 16-bit output), and the
// process's peak RSS grows by less than 2x that unit plus a small constant.
TEST(ZtCkpt, ConsolidatePeakStaysNearOneUnit) {
  const fs::path dir = temp_dir("peak");
  {
    Gpt2 model(gpt2_zoo_config("gpt2-tiny"));
    write_random_weights(model, dir / "in.safetensors", 14);
    import_weights((dir / "in.safetensors").string(), (dir / "ckpt").string(), model, {});
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const ConsolidateResult r =
        consolidate_checkpoint((dir / "ckpt").string(), (dir / "out.safetensors").string(), dtype);
    std::cout << format_consolidate_result(r, "out.safetensors");
    EXPECT_EQ(r.largest_unit, "root");
    EXPECT_GT(r.largest_unit_bytes, 25'000'000);
    EXPECT_LE(r.buffer_peak_bytes, r.largest_unit_bytes + (int64_t{4} << 20));
    if (!r.peak_reset) continue;  // the peak then covers the whole test process
    constexpr int64_t kSmallConstant = int64_t{16} << 20;
    EXPECT_LT(r.peak_rss - r.before.rss, 2 * r.largest_unit_bytes + kSmallConstant);
  }
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs not writable: RSS not checked";
}

// ---- inspect -----------------------------------------------------------------------------------

TEST(ZtCkpt, InspectVerifiesEveryFileAndRecord) {
  const fs::path dir = temp_dir("inspect");
  Fixture a(kSmall, 15);
  a.save_checkpoint(dir / "ckpt", 4);
  const InspectReport report = inspect_checkpoint((dir / "ckpt").string());
  EXPECT_EQ(report.manifest.step, 4);
  EXPECT_EQ(report.records.size(), 3 * 3u);  // 3 units x master, exp_avg, exp_avg_sq
  const std::string text = format_inspect_report(report);
  EXPECT_NE(text.find("step 4 | world size 1 | ZeRO stage 0 | compute fp32"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ok: 1 shard file"), std::string::npos) << text;
  const ToolRun ok = run_command(kZtCkpt + " inspect " + (dir / "ckpt").string());
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(ok.out, text);

  // One flipped byte in the data of the shard file.
  const fs::path shard = dir / "ckpt" / "step4" / "rank0.zts";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(100);
    f.write(&c, 1);
  }
  EXPECT_NE(error_of([&] {
              inspect_checkpoint((dir / "ckpt").string());
            }).find(shard.string() + ": fails its checksum"),
            std::string::npos);
  const ToolRun bad = run_command(kZtCkpt + " inspect " + (dir / "ckpt").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  EXPECT_EQ(bad.out.rfind("zt-ckpt: checkpoint " + shard.string() + ": fails its checksum", 0), 0u)
      << bad.out;
}

TEST(ZtCkpt, CommandLineErrorsExitTwo) {
  for (const char* args : {"", "verify x", "inspect", "consolidate a", "import a b",
                           "consolidate a b --dtype int8", "inspect a --model gpt2-tiny"}) {
    const ToolRun r = run_command(kZtCkpt + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("zt-ckpt: ", 0), 0u) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace zt
