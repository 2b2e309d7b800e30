// PEFT adapter directories (pretrained/adapter_io.h) on the tiny Llama: adapter_model.safetensors
// with exactly PEFT's names and shapes (listed here as PEFT writes them, not derived from our
// code) and adapter_config.json with PEFT's keys, read back by zt.lora's file form; a trained
// adapter saved and loaded into a fresh engine over the same base gives bitwise the same eval
// losses (fp32 and bf16, biases trained or not); save_pretrained's merged export is bit for bit
// W + s·(B·A) computed here in fp32 and rounded once to bf16, and in fp32 the merged model loaded
// without LoRA gives the adapted model's loss within 1e-5; each refusal (another r, a missing
// tensor, a wrong shape, an unexpected tensor) names the file and changes nothing.
#include "pretrained/adapter_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "pretrained/save_pretrained.h"
#include "pretrained/weights_io.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/formats/safetensors.h"
#include "runtime/status.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/random_data.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using Values = std::map<std::string, std::vector<float>>;

constexpr int kVocab = 67, kT = 12;

struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

const std::vector<std::string> kAllSeven = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};

ModelSpec lora_spec(const LlamaConfig& c, std::vector<std::string> targets, int r = 4,
                    const std::string& bias = "none") {
  ModelSpec spec{c, {}};
  Tuning t;
  t.lora.enabled = true;
  t.lora.r = r;
  t.lora.alpha = 8.0f;
  t.lora.target_modules = std::move(targets);
  t.lora.bias = bias;
  spec.tuning = resolve_tuning(spec, t);
  return spec;
}

// Random base weights (norm scales near 1, the rest small) for `spec`'s model without LoRA,
// written to `path`.
Values write_base(const ModelSpec& spec, const fs::path& path, uint32_t seed) {
  ModelSpec base = spec;
  base.tuning = {};
  Values values;
  SafetensorsWriter w;
  const std::unique_ptr<Model> model = build_model(base);
  for (Unit* u : model->units())
    for (const auto& e : u->layout().entries()) {
      const bool norm = e.spec.shape.size() == 1 && e.spec.name.find("norm") != std::string::npos;
      std::vector<float>& v = values[e.spec.name];
      v = test::random_floats(e.spec.numel(), ++seed, norm ? 0.5f : -0.3f, norm ? 1.5f : 0.3f);
      w.add_f32(e.spec.name, e.spec.shape, v.data());
    }
  w.write(path.string());
  return values;
}

Precision bf16() {
  Precision p;
  p.compute = p.grad_accum = p.comm = DType::kBF16;
  p.master_weights = true;
  return p;
}

// One engine on one rank over `spec`'s model.
struct LoraRun {
  LoraRun(const ModelSpec& spec, uint64_t seed, Precision precision = {})
      : model(build_model(spec)), engine(device, comm, *model, options(seed, precision)) {}
  static EngineOptions options(uint64_t seed, Precision precision) {
    EngineOptions o;
    o.seed = seed;
    o.optimizer.type = OptimizerOptions::Type::kAdamW;
    o.precision = precision;
    return o;
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      const model_test::Tokens t = model_test::random_tokens(2, kT, kVocab, 100 + s);
      engine.train_step(std::span<const Batch>(&t.batch, 1), 2e-2f);
    }
  }
  std::vector<double> eval() {
    std::vector<double> losses;
    for (uint32_t seed : {7u, 8u}) {
      const model_test::Tokens t = model_test::random_tokens(2, kT, kVocab, seed);
      losses.push_back(engine.eval_loss(t.batch));
    }
    return losses;
  }
  std::vector<std::vector<float>> params() {
    std::vector<std::vector<float>> out;
    for (int u = 0; u < engine.num_units(); ++u) {
      out.emplace_back(model->units()[u]->layout().numel());
      engine.read_unit_params(u, out.back().data());
    }
    return out;
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  std::unique_ptr<Model> model;
  Engine engine;
};

Values read_all(const fs::path& path,
                std::map<std::string, std::vector<int64_t>>* shapes = nullptr) {
  const SafetensorsReader r = SafetensorsReader::open(path.string());
  Values values;
  for (const SafetensorsEntry& e : r.entries()) {
    std::vector<float>& v = values[e.name];
    v.resize(e.numel());
    r.read_as_f32(e, v.data());
    if (shapes) (*shapes)[e.name] = e.shape;
  }
  return values;
}

TEST(AdapterFiles, PeftNamesAndShapesForTinyLlama) {
  TempDir tmp("zt_adapter_names");
  const ModelSpec spec = lora_spec(tiny_llama_config(kVocab, 16, true, false, false), kAllSeven);
  write_base(spec, tmp.path / "base.safetensors", 1);
  LoraRun run(spec, 3);
  load_weights(run.engine, (tmp.path / "base.safetensors").string());
  const fs::path dir = tmp.path / "adapter" / "nested";  // created, parents too
  const SaveAdapterResult saved = save_adapter(run.engine, spec, "org/base-model", dir.string());

  // PEFT's get_peft_model_state_dict for LlamaForCausalLM with these targets and r = 4: hidden
  // 32, 4 query heads and 2 key/value heads of 16, intermediate 48, 2 layers.
  std::map<std::string, std::vector<int64_t>> expected;
  for (int layer : {0, 1}) {
    const std::string p = "base_model.model.model.layers." + std::to_string(layer) + ".";
    expected[p + "self_attn.q_proj.lora_A.weight"] = {4, 32};
    expected[p + "self_attn.q_proj.lora_B.weight"] = {64, 4};
    expected[p + "self_attn.k_proj.lora_A.weight"] = {4, 32};
    expected[p + "self_attn.k_proj.lora_B.weight"] = {32, 4};
    expected[p + "self_attn.v_proj.lora_A.weight"] = {4, 32};
    expected[p + "self_attn.v_proj.lora_B.weight"] = {32, 4};
    expected[p + "self_attn.o_proj.lora_A.weight"] = {4, 64};
    expected[p + "self_attn.o_proj.lora_B.weight"] = {32, 4};
    expected[p + "mlp.gate_proj.lora_A.weight"] = {4, 32};
    expected[p + "mlp.gate_proj.lora_B.weight"] = {48, 4};
    expected[p + "mlp.up_proj.lora_A.weight"] = {4, 32};
    expected[p + "mlp.up_proj.lora_B.weight"] = {48, 4};
    expected[p + "mlp.down_proj.lora_A.weight"] = {4, 48};
    expected[p + "mlp.down_proj.lora_B.weight"] = {32, 4};
  }
  const SafetensorsReader r = SafetensorsReader::open((dir / kAdapterWeightsName).string());
  std::map<std::string, std::vector<int64_t>> got;
  for (const SafetensorsEntry& e : r.entries()) {
    got[e.name] = e.shape;
    EXPECT_EQ(e.dtype, "F32") << e.name;
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(saved.tensors, 28);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  // adapter_config.json: PEFT's keys, sorted as its json.dumps(sort_keys=True) writes them.
  std::ifstream in(dir / kAdapterConfigName);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const nlohmann::ordered_json config = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [key, value] : config.items()) keys.push_back(key);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8);
  EXPECT_TRUE(config["lora_alpha"].is_number_integer());
  EXPECT_EQ(config["lora_dropout"].dump(), "0.0");  // a float, as Python writes it
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["base_model_name_or_path"], "org/base-model");
  EXPECT_EQ(config["target_modules"], nlohmann::json({"down_proj", "gate_proj", "k_proj", "o_proj",
                                                      "q_proj", "up_proj", "v_proj"}));
  for (const char* key : {"use_rslora", "use_dora", "fan_in_fan_out", "lora_bias"})
    EXPECT_EQ(config[key], false) << key;
  EXPECT_EQ(config["inference_mode"], true);
  EXPECT_EQ(config["init_lora_weights"], true);
  for (const char* key : {"modules_to_save", "revision", "layers_to_transform", "layers_pattern"})
    EXPECT_TRUE(config[key].is_null()) << key;
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    EXPECT_EQ(config[key], nlohmann::json::object()) << key;

  // zt.lora's file form takes the directory back: the same LoRA settings.
  for (const LoraConfig& back :
       {read_peft_adapter_config(dir.string()),
        config_test::parse(config_test::with(config_test::minimal(), "/zt/lora", dir.string()))
            .zt.tuning.lora}) {
    EXPECT_TRUE(back.enabled);
    EXPECT_EQ(back.r, 4);
    EXPECT_EQ(back.alpha, 8.0f);
    EXPECT_EQ(back.bias, "none");
    EXPECT_EQ(std::set<std::string>(back.target_modules.begin(), back.target_modules.end()),
              std::set<std::string>(kAllSeven.begin(), kAllSeven.end()));
  }
}

TEST(AdapterFiles, AllLinearIsWrittenAsItsModulesAndNumbersAsPythonWritesThem) {
  TempDir tmp("zt_adapter_all_linear");
  ModelSpec spec = lora_spec(tiny_family_config(LlamaFamily::kPhi3, kVocab, 16), {"all-linear"}, 2);
  spec.tuning.lora.dropout = 0.05f;
  spec.tuning.lora.alpha = 3.5f;
  LoraRun run(spec, 3);
  save_adapter(run.engine, spec, "", tmp.path.string());
  std::ifstream in(tmp.path / kAdapterConfigName);
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config["target_modules"],
            nlohmann::json({"down_proj", "gate_up_proj", "o_proj", "qkv_proj"}));
  EXPECT_EQ(config["lora_dropout"].dump(), "0.05");
  EXPECT_EQ(config["lora_alpha"].dump(), "3.5");
  EXPECT_TRUE(config["base_model_name_or_path"].is_null());
  std::map<std::string, std::vector<int64_t>> shapes;
  read_all(tmp.path / kAdapterWeightsName, &shapes);
  // Phi-3's fused modules take one adapter each: qkv_proj's B spans q, k and v (64 + 2·32 rows).
  EXPECT_EQ(shapes.at("base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight"),
            (std::vector<int64_t>{128, 2}));
  EXPECT_EQ(shapes.at("base_model.model.model.layers.1.mlp.gate_up_proj.lora_A.weight"),
            (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(shapes.size(), 16u);
}

TEST(AdapterFiles, SavedAndLoadedIntoAFreshEngineGivesBitwiseTheSameLosses) {
  struct Case {
    const char* name;
    ModelSpec spec;
    Precision precision;
    std::vector<std::string> biases;  // the saved names of the biases that train
  };
  const LlamaConfig qkv_bias = tiny_llama_config(kVocab, 16, true, true, false);
  const std::string p0 = "base_model.model.model.layers.0.self_attn.";
  const Case cases[] = {
      {"fp32 q,v", lora_spec(tiny_llama_config(kVocab, 16, false, false, false), {}), {}, {}},
      {"bf16 all seven",
       lora_spec(tiny_llama_config(kVocab, 16, true, false, false), kAllSeven),
       bf16(),
       {}},
      // bias "all": q's bias sits in PEFT's wrapped layer (base_layer), k's in k_proj itself.
      {"fp32 bias all",
       lora_spec(qkv_bias, {"q_proj", "o_proj"}, 4, "all"),
       {},
       {p0 + "q_proj.base_layer.bias", p0 + "k_proj.bias", p0 + "v_proj.bias"}},
      // lora_only: q, k and v together (one fused product's biases train all or none).
      {"bf16 bias lora_only",
       lora_spec(qkv_bias, {"q_proj", "k_proj", "v_proj"}, 4, "lora_only"),
       bf16(),
       {p0 + "q_proj.base_layer.bias", p0 + "v_proj.base_layer.bias"}},
  };
  // modules_to_save: the (tied) embedding trains whole and is saved under its own name.
  ModelSpec embed = lora_spec(tiny_llama_config(kVocab, 16, true, false, false), {"q_proj"});
  embed.tuning.lora.modules_to_save = {"embed_tokens"};
  std::vector<Case> all(std::begin(cases), std::end(cases));
  all.push_back({"bf16 modules_to_save embed_tokens",
                 embed,
                 bf16(),
                 {"base_model.model.model.embed_tokens.weight"}});
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    TempDir tmp("zt_adapter_round_trip");
    const std::string base = (tmp.path / "base.safetensors").string();
    write_base(c.spec, base, 11);
    LoraRun trained(c.spec, 5, c.precision);
    load_weights(trained.engine, base);
    trained.train(3);
    const std::vector<double> losses = trained.eval();
    save_adapter(trained.engine, c.spec, base, (tmp.path / "adapter").string());
    const Values file = read_all(tmp.path / "adapter" / kAdapterWeightsName);
    for (const std::string& bias : c.biases) EXPECT_TRUE(file.contains(bias)) << bias;
    const nlohmann::json config =
        nlohmann::json::parse(std::ifstream(tmp.path / "adapter" / "adapter_config.json"));
    EXPECT_EQ(config.at("ensure_weight_tying"), !c.spec.tuning.lora.modules_to_save.empty());
    EXPECT_EQ(config.at("modules_to_save").is_null(), c.spec.tuning.lora.modules_to_save.empty());

    LoraRun fresh(c.spec, 6, c.precision);  // other adapter initialisation
    load_weights(fresh.engine, base);
    EXPECT_NE(fresh.eval(), losses);  // trained: the adapters (and biases) moved
    load_adapter(fresh.engine, c.spec, (tmp.path / "adapter").string());
    EXPECT_EQ(fresh.eval(), losses);  // bitwise
  }
}

// W + s·(B·A) as a user would compute it from the two files: each element's sum over k in
// order in fp32, times s, plus W.
std::vector<float> merged_here(const std::vector<float>& w, const std::vector<float>& a,
                               const std::vector<float>& b, int64_t out, int64_t in, int64_t r,
                               float s) {
  std::vector<float> m(w.size());
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < in; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < r; ++k) sum += b[i * r + k] * a[k * in + j];
      m[i * in + j] = w[i * in + j] + s * sum;
    }
  return m;
}

TEST(AdapterFiles, MergedExportIsTheBaseWeightPlusScaledBA) {
  TempDir tmp("zt_adapter_merge");
  const ModelSpec spec =
      lora_spec(tiny_llama_config(kVocab, 16, true, true, false), kAllSeven, 4, "all");
  const std::string base = (tmp.path / "base.safetensors").string();
  const Values base_values = write_base(spec, base, 21);
  LoraRun trained(spec, 5);
  load_weights(trained.engine, base);
  trained.train(3);
  const std::vector<double> adapted = trained.eval();
  save_adapter(trained.engine, spec, base, (tmp.path / "adapter").string());
  const Values adapter = read_all(tmp.path / "adapter" / kAdapterWeightsName);
  SavePretrainedOptions o;
  o.merge_adapters = true;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    o.dir = (tmp.path / (dtype == DType::kF32 ? "fp32" : "bf16")).string();
    o.dtype = dtype;
    EXPECT_EQ(save_pretrained(trained.engine, spec, o).merged, 14);
  }

  // bf16: every tensor's bits, the merged ones W + s·(B·A) rounded once.
  const float s = 8.0f / 4.0f;
  const SafetensorsReader bf =
      SafetensorsReader::open((tmp.path / "bf16/model.safetensors").string());
  int merged = 0, moved = 0;  // merged tensors; their elements the adapters changed in bf16
  for (const SafetensorsEntry& e : bf.entries()) {
    SCOPED_TRACE(e.name);
    ASSERT_EQ(e.dtype, "BF16");
    EXPECT_EQ(e.name.find("lora_"), std::string::npos);
    std::vector<float> expected = base_values.at(e.name);
    const std::string module = e.name.substr(0, e.name.rfind('.'));
    const std::string a_name = "base_model.model." + module + ".lora_A.weight";
    if (e.name.ends_with(".weight") && adapter.contains(a_name)) {
      const std::vector<float>& a = adapter.at(a_name);
      const std::vector<float>& b = adapter.at("base_model.model." + module + ".lora_B.weight");
      const int64_t out = e.shape.at(0), in = e.shape.at(1);
      const std::vector<float> w = expected;
      expected = merged_here(w, a, b, out, in, static_cast<int64_t>(a.size()) / in, s);
      ++merged;
      for (size_t i = 0; i < w.size(); ++i)
        moved += fp32_to_bf16(w[i]) != fp32_to_bf16(expected[i]);
    }
    const std::string bias = "base_model.model." + module + ".base_layer.bias";
    if (e.name.ends_with(".bias"))  // bias "all": the trained biases, as the adapter file has them
      expected = adapter.count(bias) ? adapter.at(bias) : adapter.at("base_model.model." + e.name);
    std::vector<float> got(e.numel());
    bf.read_as_f32(e, got.data());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
                std::bit_cast<uint32_t>(bf16_to_fp32(fp32_to_bf16(expected[i]))))
          << "element " << i;
  }
  EXPECT_EQ(merged, 14);
  EXPECT_GT(moved, 1000);  // training moved B off zero: the merge shows

  // fp32: the merged model, loaded without LoRA, computes the adapted model's losses.
  ModelSpec plain = spec;
  plain.tuning = {};
  LoraRun merged_run(plain, 9);
  load_weights(merged_run.engine, o.dir);
  const std::vector<double> losses = merged_run.eval();
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], adapted[i], 1e-5 * std::abs(adapted[i]));
}

// `dir`'s adapter_model.safetensors rewritten by `edit` (name -> (shape, values)).
void rewrite_weights(
    const fs::path& dir,
    const std::function<
        void(std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>&)>& edit) {
  std::map<std::string, std::vector<int64_t>> shapes;
  const Values values = read_all(dir / kAdapterWeightsName, &shapes);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  for (const auto& [name, v] : values) tensors[name] = {shapes.at(name), v};
  edit(tensors);
  SafetensorsWriter w;
  for (const auto& [name, t] : tensors) w.add_f32(name, t.first, t.second.data());
  w.set_metadata("format", "pt");
  w.write((dir / kAdapterWeightsName).string());
}

TEST(AdapterFiles, RefusalsNameTheFileAndChangeNothing) {
  TempDir tmp("zt_adapter_refusals");
  const ModelSpec spec = lora_spec(tiny_llama_config(kVocab, 16, true, false, false), kAllSeven);
  LoraRun saved(spec, 5);
  saved.train(1);
  const fs::path good = tmp.path / "good";
  save_adapter(saved.engine, spec, "", good.string());
  const std::string config = (good / kAdapterConfigName).string();
  const std::string weights = (good / kAdapterWeightsName).string();
  const std::string q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";

  struct Case {
    const char* name;
    ModelSpec spec;
    std::function<void(std::map<std::string, std::pair<std::vector<int64_t>,
                                                       std::vector<float>>>&)>
        edit;  // of the weights file; empty: none
    std::string file, says;
  };
  const Case cases[] = {
      {"another r",
       lora_spec(spec.llama(), kAllSeven, 8),
       {},
       config,
       "r is 4, this run's zt.lora.r 8"},
      {"other targets",
       lora_spec(spec.llama(), {"q_proj", "v_proj"}),
       {},
       config,
       "target_modules [down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj] adapt "
       "other layers than this run's zt.lora target_modules [q_proj, v_proj]"},
      {"missing tensor", spec, [&](auto& t) { t.erase(q_a); }, weights,
       "tensor '" + q_a + "' is missing"},
      {"wrong shape", spec,
       [&](auto& t) {
         t[q_a].first = {32, 4};
       },
       weights, "tensor '" + q_a + "' has shape [32, 4]; this model's is [4, 32]"},
      {"unexpected tensor", spec,
       [&](auto& t) {
         t["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"] = t[q_a];
       },
       weights,
       "unexpected tensor "
       "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir("zt_adapter_refused");
    fs::copy(good, dir.path, fs::copy_options::recursive);
    if (c.edit) rewrite_weights(dir.path, c.edit);
    const std::string file = (dir.path / fs::path(c.file).filename()).string();
    LoraRun run(c.spec, 7);
    const auto before = run.params();
    try {
      load_adapter(run.engine, c.spec, dir.path.string());
      ADD_FAILURE() << "not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_EQ(e.message().rfind(file + ": ", 0), 0u) << e.message();
      EXPECT_NE(e.message().find(c.says), std::string::npos) << e.message();
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    }
    EXPECT_EQ(run.params(), before);
    EXPECT_THROW(check_adapter_dir(dir.path.string(), c.spec, *build_model(c.spec)), Error);
  }
  // A directory without the files.
  try {
    check_adapter_dir((tmp.path / "none").string(), spec, *build_model(spec));
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("none: not a directory"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace zt
