// Hugging Face model directories: save_pretrained's layout (config.json, one safetensors file or
// an index and its shards, the tokenizer files), its round trip through load_weights byte for
// byte, mixed dtypes on load, and each broken directory refused naming the file.
#include "launch/hf_model_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "launch/weights_io.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/formats/safetensors.h"
#include "runtime/formats/safetensors_set.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const Gpt2Config kSmall{2, 2, 16, 61, 8};

struct Fixture {
  explicit Fixture(uint64_t seed) : model(kSmall), engine(device, comm, model, options(seed)) {}
  static EngineOptions options(uint64_t seed) {
    EngineOptions o;
    o.seed = seed;
    return o;
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  Gpt2 model;
  Engine engine;
};

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("zt_hf_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    return e.message();
  }
  return "no error";
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// Every parameter of every unit, fp32, as the engine holds it.
std::vector<std::vector<float>> params_of(Engine& e) {
  std::vector<std::vector<float>> out;
  for (int u = 0; u < e.num_units(); ++u) {
    out.emplace_back(static_cast<size_t>(e.model().units()[u]->layout().numel()));
    e.read_unit_params(u, out.back().data());
  }
  return out;
}

TEST(HfModelDir, SavePretrainedWritesTheLayoutAndLoadsBackBitwise) {
  TempDir tmp;
  Fixture a(1), b(2);
  write(tmp.path / "tokenizer.json", "{}");  // copied along from the directory trained from
  SavePretrainedOptions o;
  o.dir = (tmp.path / "out").string();
  o.tokenizer_from = tmp.path.string();
  const SavePretrainedResult r = save_pretrained(a.engine, kSmall, o);
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.tokenizer_files, 1);
  EXPECT_TRUE(fs::exists(tmp.path / "out" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp.path / "out" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(tmp.path / "out.partial"));
  const Gpt2Config back = read_hf_config(o.dir);
  EXPECT_EQ(back.n_layer, kSmall.n_layer);
  EXPECT_EQ(back.n_embd, kSmall.n_embd);
  EXPECT_EQ(back.vocab_size, kSmall.vocab_size);
  // GPT2LMHeadModel's names; the tied head is left out.
  const SafetensorsReader file = SafetensorsReader::open((tmp.path / "out/model.safetensors").string());
  EXPECT_NE(file.find("transformer.h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);
  load_weights(b.engine, o.dir);
  EXPECT_EQ(params_of(a.engine), params_of(b.engine));
}

TEST(HfModelDir, ShardsPastMaxShardSizeWithAnIndexAndSixteenBitTensors) {
  TempDir tmp;
  Fixture a(3), b(4), c(5);
  SavePretrainedOptions o;
  o.dir = (tmp.path / "sharded").string();
  o.max_shard_size = 8 << 10;  // a few tensors per file
  o.dtype = DType::kBF16;
  const SavePretrainedResult r = save_pretrained(a.engine, kSmall, o);
  ASSERT_GE(r.files, 2);
  const fs::path index = tmp.path / "sharded" / kSafetensorsIndexName;
  ASSERT_TRUE(fs::exists(index));
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(index))["metadata"]["total_size"].get<uint64_t>(),
            r.bytes);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(tmp.path / "sharded/config.json"))["torch_dtype"],
            "bfloat16");
  const SafetensorsSet set = SafetensorsSet::open(o.dir);
  EXPECT_EQ(static_cast<int>(set.files()), r.files);
  EXPECT_EQ(set.entries()[0]->dtype, "BF16");
  // bf16 values load (widened exactly); saved again in bf16 they are the same bytes.
  load_weights(b.engine, o.dir);
  SavePretrainedOptions again = o;
  again.dir = (tmp.path / "again").string();
  save_pretrained(b.engine, kSmall, again);
  for (int s = 1; s <= r.files; ++s) {
    const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", s, r.files);
    std::ifstream x(tmp.path / "sharded" / name, std::ios::binary), y(tmp.path / "again" / name, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}),
              std::string(std::istreambuf_iterator<char>(y), {}))
        << name;
  }
  // Mixed dtypes: one shard rewritten in fp32 still loads to the same values.
  const std::string first = set.file_of(*set.entries()[0]);
  {
    const SafetensorsReader bf = SafetensorsReader::open(first);
    SafetensorsWriter w;
    std::vector<std::vector<float>> values;
    for (const SafetensorsEntry& e : bf.entries()) {
      values.emplace_back(e.numel());
      bf.read_as_f32(e, values.back().data());
      w.add_f32(e.name, e.shape, values.back().data());
    }
    w.write(first);
  }
  load_weights(c.engine, o.dir);
  EXPECT_EQ(params_of(b.engine), params_of(c.engine));
}

TEST(HfModelDir, BrokenDirectoriesAreRefusedNamingTheFile) {
  TempDir tmp;
  Fixture a(6);
  SavePretrainedOptions o;
  o.dir = (tmp.path / "m").string();
  o.max_shard_size = 8 << 10;
  save_pretrained(a.engine, kSmall, o);
  const fs::path index = tmp.path / "m" / kSafetensorsIndexName;
  const std::string good = [&] {
    std::ifstream in(index);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  nlohmann::json j = nlohmann::json::parse(good);
  const std::string tensor = j["weight_map"].begin().key();
  const std::string shard = j["weight_map"].begin().value();

  // An index pointing outside the directory.
  j["weight_map"][tensor] = "../model.safetensors";
  write(index, j.dump());
  EXPECT_NE(error_of([&] { SafetensorsSet::open(o.dir); }).find("is not a file name inside"),
            std::string::npos);
  // A missing shard.
  j["weight_map"][tensor] = shard;
  write(index, j.dump());
  fs::rename(tmp.path / "m" / shard, tmp.path / shard);
  std::string e = error_of([&] { SafetensorsSet::open(o.dir); });
  EXPECT_NE(e.find(shard + ": missing (listed in"), std::string::npos) << e;
  fs::rename(tmp.path / shard, tmp.path / "m" / shard);
  // A tensor the index places in another file than the one holding it.
  std::string other;
  for (const auto& [t, f] : j["weight_map"].items())
    if (f != shard) other = f;
  ASSERT_FALSE(other.empty());
  j["weight_map"][tensor] = other;
  write(index, j.dump());
  e = error_of([&] { SafetensorsSet::open(o.dir); });
  EXPECT_NE(e.find(tensor), std::string::npos) << e;
  EXPECT_NE(e.find(shard), std::string::npos) << e;
  // Not JSON; no weight_map.
  write(index, "{not json");
  EXPECT_NE(error_of([&] { SafetensorsSet::open(o.dir); }).find("not a JSON object"), std::string::npos);
  write(index, "{}");
  EXPECT_NE(error_of([&] { SafetensorsSet::open(o.dir); }).find("weight_map"), std::string::npos);
  // A tensor of the wrong shape: another model's directory.
  write(index, good);
  Gpt2Config wider = kSmall;
  wider.n_embd = 32;
  Gpt2 other_model(wider);
  e = error_of([&] { check_weights_file(o.dir, other_model); });
  EXPECT_NE(e.find("has shape"), std::string::npos) << e;
  EXPECT_NE(e.find(".safetensors"), std::string::npos) << e;
  // A directory with no weights at all.
  fs::create_directories(tmp.path / "empty");
  EXPECT_NE(error_of([&] { SafetensorsSet::open((tmp.path / "empty").string()); }).find("neither"),
            std::string::npos);
}

TEST(HfModelDir, ConfigJsonIsCheckedNamingTheKey) {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  auto config_error = [&](const std::string& text) {
    write(tmp.path / "config.json", text);
    return error_of([&] { read_hf_config(dir); });
  };
  EXPECT_NE(config_error("[").find("not a JSON object"), std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "llama"})").find("model_type 'llama' is not supported yet"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "bert"})").find("model_type 'bert'"), std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                              "vocab_size": 61})").find("\"n_positions\" must be a positive integer (missing)"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                              "vocab_size": 61, "n_positions": 8, "activation_function": "relu"})")
                .find("activation_function 'relu'"),
            std::string::npos);
  write(tmp.path / "config.json", R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                                      "vocab_size": 61, "n_positions": 8})");
  EXPECT_TRUE(is_hf_model_dir(dir));
  EXPECT_EQ(read_hf_config(dir).n_positions, 8);
}

}  // namespace
}  // namespace zt
