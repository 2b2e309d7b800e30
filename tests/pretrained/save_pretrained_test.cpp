// Hugging Face model directories: save_pretrained's layout (config.json, one safetensors file or
// an index and its shards, the tokenizer files) for GPT-2 and the Llama family (GQA, tied and
// untied, with and without biases; Mistral, Qwen3 and Phi-3), its round trip through
// load_weights byte for byte, a directory written here as transformers writes one (for each
// family: imported, trained, exported and imported again bit for bit), mixed dtypes on load, and
// each broken directory refused naming the file (config.json itself:
// tests/model_zoo/hf_config_test.cpp).
#include "pretrained/save_pretrained.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "model_zoo/model_spec.h"
#include "pretrained/weights_io.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/formats/safetensors.h"
#include "runtime/formats/safetensors_set.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/runtime/random_data.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const Gpt2Config kSmall{2, 2, 16, 61, 8};

// Tiny Llama-family shapes (tests/model_zoo/tiny_llama.h's): GQA, untied; Qwen2's tied head with
// q/k/v biases; Llama's attention_bias and mlp_bias (biases on o_proj and the MLP too).
LlamaConfig tiny_llama(bool tied, bool qkv_bias, bool out_and_mlp_bias) {
  return tiny_llama_config(67, 16, tied, qkv_bias, out_and_mlp_bias, out_and_mlp_bias);
}

const ModelSpec kSpecs[] = {
    ModelSpec{kSmall},
    ModelSpec{tiny_llama(false, false, false)},  // llama: GQA, untied, no biases
    ModelSpec{tiny_llama(true, true, false)},    // qwen2: tied, q/k/v biases
    ModelSpec{tiny_llama(false, true, true)},    // llama: attention_bias and mlp_bias
    ModelSpec{[] {                               // llama: Llama 3.1's rope_scaling
      LlamaConfig c = tiny_llama(true, false, false);
      c.rope_scaling = RopeScaling{RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 64};
      return c;
    }()},
    ModelSpec{tiny_family_config(LlamaFamily::kMistral, 67, 16)},  // sliding window 3
    ModelSpec{tiny_family_config(LlamaFamily::kQwen3, 67, 16)},    // q_norm, k_norm; tied
    ModelSpec{tiny_family_config(LlamaFamily::kPhi3, 67, 16)},     // qkv_proj, gate_up_proj
};

struct Fixture {
  explicit Fixture(uint64_t seed, const ModelSpec& spec = ModelSpec{kSmall})
      : model(build_model(spec)), engine(device, comm, *model, options(seed)) {}
  static EngineOptions options(uint64_t seed) {
    EngineOptions o;
    o.seed = seed;
    return o;
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  std::unique_ptr<Model> model;
  Engine engine;
};

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

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

TEST(SavePretrained, SavePretrainedWritesTheLayoutAndLoadsBackBitwise) {
  TempDir tmp;
  Fixture a(1), b(2);
  write(tmp.path / "tokenizer.json", "{}");  // copied along from the directory trained from
  SavePretrainedOptions o;
  o.dir = (tmp.path / "out").string();
  o.tokenizer_from = tmp.path.string();
  const SavePretrainedResult r = save_pretrained(a.engine, ModelSpec{kSmall}, o);
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.tokenizer_files, 1);
  EXPECT_TRUE(fs::exists(tmp.path / "out" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp.path / "out" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(tmp.path / "out.partial"));
  const Gpt2Config back = read_hf_config(o.dir).gpt2();
  EXPECT_EQ(back.n_layer, kSmall.n_layer);
  EXPECT_EQ(back.n_embd, kSmall.n_embd);
  EXPECT_EQ(back.vocab_size, kSmall.vocab_size);
  // GPT2LMHeadModel's names; the tied head is left out.
  const SafetensorsReader file =
      SafetensorsReader::open((tmp.path / "out/model.safetensors").string());
  EXPECT_NE(file.find("transformer.h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);
  load_weights(b.engine, o.dir);
  EXPECT_EQ(params_of(a.engine), params_of(b.engine));
}

TEST(SavePretrained, ShardsPastMaxShardSizeWithAnIndexAndSixteenBitTensors) {
  TempDir tmp;
  Fixture a(3), b(4), c(5);
  SavePretrainedOptions o;
  o.dir = (tmp.path / "sharded").string();
  o.max_shard_size = 8 << 10;  // a few tensors per file
  o.dtype = DType::kBF16;
  const SavePretrainedResult r = save_pretrained(a.engine, ModelSpec{kSmall}, o);
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
  save_pretrained(b.engine, ModelSpec{kSmall}, again);
  for (int s = 1; s <= r.files; ++s) {
    const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", s, r.files);
    std::ifstream x(tmp.path / "sharded" / name, std::ios::binary),
        y(tmp.path / "again" / name, std::ios::binary);
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

TEST(SavePretrained, BrokenDirectoriesAreRefusedNamingTheFile) {
  TempDir tmp;
  Fixture a(6);
  SavePretrainedOptions o;
  o.dir = (tmp.path / "m").string();
  o.max_shard_size = 8 << 10;
  save_pretrained(a.engine, ModelSpec{kSmall}, o);
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
  EXPECT_NE(error_of([&] { SafetensorsSet::open(o.dir); }).find("not a JSON object"),
            std::string::npos);
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

// Every model of kSpecs: config.json read back to the same model, transformers' names (a tied
// head left out), and the weights loaded back bit for bit.
TEST(SavePretrained, EveryModelFamilyRoundTrips) {
  for (const ModelSpec& spec : kSpecs) {
    SCOPED_TRACE(hf_config_json(spec, DType::kF32).dump());
    TempDir tmp;
    Fixture a(11, spec), b(12, spec);
    SavePretrainedOptions o;
    o.dir = (tmp.path / "out").string();
    save_pretrained(a.engine, spec, o);
    const ModelSpec back = read_hf_config(o.dir);
    EXPECT_EQ(hf_config_json(back, DType::kF32), hf_config_json(spec, DType::kF32));
    EXPECT_EQ(back.model_type(), spec.model_type());
    const SafetensorsReader file = SafetensorsReader::open(o.dir + "/model.safetensors");
    if (spec.is_gpt2()) {
      EXPECT_NE(file.find("transformer.wte.weight"), nullptr);
    } else {
      EXPECT_NE(file.find("model.embed_tokens.weight"), nullptr);
      const bool phi3 = spec.model_type() == "phi3";
      const char* k_proj = phi3 ? "model.layers.1.self_attn.qkv_proj.weight"
                                : "model.layers.1.self_attn.k_proj.weight";
      ASSERT_NE(file.find(k_proj), nullptr);
      // (num_key_value_heads * head_dim, hidden); Phi-3's q, k and v rows in one
      EXPECT_EQ(file.find(k_proj)->shape, (std::vector<int64_t>{phi3 ? 128 : 32, 32}));
      EXPECT_EQ(file.find("model.layers.1.mlp.gate_up_proj.weight") != nullptr, phi3);
      EXPECT_EQ(file.find("model.layers.1.self_attn.q_norm.weight") != nullptr,
                spec.model_type() == "qwen3");
      EXPECT_EQ(file.find("lm_head.weight") != nullptr, !spec.llama().tie_word_embeddings);
      EXPECT_EQ(file.find("model.layers.0.self_attn.q_proj.bias") != nullptr,
                spec.llama().attention_bias);
      EXPECT_EQ(file.find("model.layers.0.self_attn.o_proj.bias") != nullptr,
                spec.llama().attention_bias && spec.llama().attention_out_bias);
      EXPECT_EQ(file.find("model.layers.0.mlp.down_proj.bias") != nullptr, spec.llama().mlp_bias);
    }
    load_weights(b.engine, o.dir);
    EXPECT_EQ(params_of(a.engine), params_of(b.engine));
  }
}

// A Llama directory as transformers writes one, written here by hand: config.json with keys this
// model does not read (token ids, transformers_version), bf16 tensors in two shards with an
// index, lm_head in fp16. Imported, then saved in bf16: every bf16 tensor the same bytes, and the
// config.json carried over with its extra keys.
// Every Llama-family model of kSpecs (untied GQA, tied with q/k/v biases, all biases, llama3
// rope_scaling); the untied ones carry lm_head.
void import_and_export_by_hand(const ModelSpec& spec) {
  TempDir tmp;
  const fs::path in = tmp.path / "in";
  fs::create_directories(in);
  nlohmann::ordered_json config = hf_config_json(spec, DType::kBF16);
  config["bos_token_id"] = 1;
  config["eos_token_id"] = 2;
  config["transformers_version"] = "4.46.0";
  write(in / "config.json", config.dump(2));
  const std::unique_ptr<Model> shapes = build_model(spec);
  uint64_t bits = 0x9e3779b97f4a7c15ull;
  auto next_bf16 = [&] {  // random bf16 values of moderate size (no NaN or inf)
    bits = bits * 6364136223846793005ull + 1442695040888963407ull;
    const float x = static_cast<float>(static_cast<int64_t>(bits >> 40) - (1 << 23)) / (1 << 26);
    return fp32_to_bf16(x);
  };
  SafetensorsWriter first, second;
  nlohmann::json weight_map;
  std::map<std::string, std::vector<uint16_t>> written;
  int tensor = 0;
  for (Unit* u : shapes->units())
    for (const auto& e : u->layout().entries()) {
      std::vector<uint16_t>& values = written[e.spec.name];
      values.resize(static_cast<size_t>(e.spec.numel()));
      for (uint16_t& v : values) v = next_bf16();
      const bool head = e.spec.name == "lm_head.weight";
      if (head)  // the head in fp16 (converted on load, rounded to bf16 on save)
        for (uint16_t& v : values) v = fp32_to_fp16(bf16_to_fp32(v));
      const bool in_second = tensor++ % 2 == 1;  // the tensors alternate between the shards
      (in_second ? second : first)
          .add(e.spec.name, head ? DType::kF16 : DType::kBF16, e.spec.shape, values.data());
      weight_map[e.spec.name] =
          in_second ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    }
  first.write((in / "model-00001-of-00002.safetensors").string());
  second.write((in / "model-00002-of-00002.safetensors").string());
  write(in / kSafetensorsIndexName,
        nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump());
  ASSERT_EQ(hf_config_json(read_hf_config(in.string()), DType::kBF16),
            hf_config_json(spec, DType::kBF16));

  Fixture f(13, spec);
  load_weights(f.engine, in.string());
  SavePretrainedOptions o;
  o.dir = (tmp.path / "out").string();
  o.dtype = DType::kBF16;
  o.tokenizer_from = in.string();
  save_pretrained(f.engine, spec, o);
  const SafetensorsSet out = SafetensorsSet::open(o.dir);
  for (const auto& [name, values] : written) {
    const SafetensorsEntry* e = out.find(name);
    ASSERT_NE(e, nullptr) << name;
    ASSERT_EQ(e->dtype, "BF16") << name;
    std::vector<float> back(values.size());
    out.read_as_f32(*e, back.data());
    const bool head = name == "lm_head.weight";
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t want = head ? fp32_to_bf16(fp16_to_fp32(values[i])) : values[i];
      ASSERT_EQ(fp32_to_bf16(back[i]), want) << name << "[" << i << "]";
    }
  }
  const nlohmann::json saved = nlohmann::json::parse(file_text(tmp.path / "out/config.json"));
  EXPECT_EQ(saved["eos_token_id"], 2);
  EXPECT_EQ(saved["transformers_version"], "4.46.0");
  EXPECT_EQ(saved["torch_dtype"], "bfloat16");
}

TEST(SavePretrained, ALlamaDirectoryWrittenByHandImportsAndExportsByteForByte) {
  for (const ModelSpec& spec : kSpecs) {
    if (spec.is_gpt2()) continue;
    SCOPED_TRACE(hf_config_json(spec, DType::kF32).dump());
    import_and_export_by_hand(spec);
  }
}

// A tiny model of each new family written here as a Hugging Face directory (config.json and
// model.safetensors with transformers' names, fp32): imported (every tensor as written),
// trained three steps, exported, and imported again into another engine bit for bit; the
// exported file holds the same names and shapes as the one written (Phi-3's fused tensors).
TEST(SavePretrained, EachNewFamilyImportsTrainsExportsAndReimportsBitwise) {
  for (LlamaFamily family : kNewFamilies) {
    SCOPED_TRACE(family_name(family));
    const ModelSpec spec{tiny_family_config(family, 67, 16)};
    TempDir tmp;
    const fs::path in = tmp.path / "in";
    fs::create_directories(in);
    write(in / "config.json", hf_config_json(spec, DType::kF32).dump(2));
    const std::unique_ptr<Model> shapes = build_model(spec);
    std::map<std::string, std::vector<float>> written;
    std::map<std::string, std::vector<int64_t>> written_shapes;
    SafetensorsWriter w;
    uint32_t seed = 100;
    for (Unit* u : shapes->units())
      for (const auto& e : u->layout().entries()) {
        written[e.spec.name] = test::random_floats(e.spec.numel(), ++seed, -0.1f, 0.1f);
        written_shapes[e.spec.name] = e.spec.shape;
        w.add_f32(e.spec.name, e.spec.shape, written[e.spec.name].data());
      }
    w.write((in / "model.safetensors").string());

    Fixture a(21, spec), b(22, spec);
    load_weights(a.engine, in.string());
    for (int u = 0; u < a.engine.num_units(); ++u) {  // every tensor as written
      std::vector<float> params(a.engine.model().units()[u]->layout().numel());
      a.engine.read_unit_params(u, params.data());
      for (const auto& e : a.engine.model().units()[u]->layout().entries())
        EXPECT_EQ(std::memcmp(params.data() + e.offset, written.at(e.spec.name).data(),
                              e.spec.numel() * 4),
                  0)
            << e.spec.name;
    }
    for (int step = 0; step < 3; ++step) {
      const model_test::Tokens t = model_test::random_tokens(2, 8, 67, 30 + step);
      a.engine.train_step(std::span<const Batch>(&t.batch, 1), 1e-2f);
    }
    SavePretrainedOptions o;
    o.dir = (tmp.path / "out").string();
    save_pretrained(a.engine, spec, o);
    EXPECT_EQ(read_hf_config(o.dir).model_type(), spec.model_type());
    const SafetensorsReader file = SafetensorsReader::open(o.dir + "/model.safetensors");
    EXPECT_EQ(file.entries().size(), written_shapes.size());
    for (const auto& [name, shape] : written_shapes) {
      const SafetensorsEntry* e = file.find(name);
      ASSERT_NE(e, nullptr) << name;
      EXPECT_EQ(e->shape, shape) << name;
      EXPECT_EQ(e->dtype, "F32") << name;
    }
    load_weights(b.engine, o.dir);
    const auto trained = params_of(a.engine);
    EXPECT_EQ(trained, params_of(b.engine));
    // Training moved the weights away from what was imported.
    load_weights(b.engine, in.string());
    EXPECT_NE(trained, params_of(b.engine));
  }
}

}  // namespace
}  // namespace zt
