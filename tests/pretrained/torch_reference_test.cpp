// One forward and loss of each Llama family (llama, mistral with a window shorter than the
// sequence, qwen3 with and without attention_bias, phi3 with its fused tensors and a window)
// against a float64 PyTorch reference written from transformers' modeling semantics
// (torch_llama_families.py): a tiny random model written here as a Hugging Face directory,
// imported, its eval loss within 1e-5 relative of the reference's; and a trained LoRA adapter's
// PEFT files applied by the reference to the base directory. Skips, naming why, when
// python3 or its torch module is missing (Debian: apt-get install python3-torch; the interpreter
// may be named by ZT_TORCH_PYTHON).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "model_zoo/hf_config.h"
#include "pretrained/adapter_io.h"
#include "pretrained/weights_io.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/formats/safetensors.h"
#include "tests/model_zoo/model_test_util.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/runtime/random_data.h"
#include "zero/engine.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// Runs `command`, returning its exit status and its standard output.
int run(const std::string& command, std::string& out) {
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return -1;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The first of $ZT_TORCH_PYTHON, python3 and Debian's /usr/bin/python3 that imports torch;
// empty, with the last one's answer in `probe`, when none does.
std::string torch_python(std::string& probe) {
  const char* env = std::getenv("ZT_TORCH_PYTHON");
  for (const std::string& candidate :
       {std::string(env ? env : ""), std::string("python3"), std::string("/usr/bin/python3")}) {
    if (candidate.empty()) continue;
    probe.clear();
    if (run(candidate + " -c 'import torch' 2>&1", probe) == 0) return candidate;
  }
  return {};
}

const std::string kScript =
    std::string(ZT_SOURCE_DIR) + "/tests/pretrained/torch_llama_families.py";

// A Hugging Face directory `dir` for `spec` (config.json, random model.safetensors) and
// batch.json for `t`.
void write_model_dir(const fs::path& dir, const ModelSpec& spec, const model_test::Tokens& t,
                     int64_t B, int64_t T) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << hf_config_json(spec, DType::kF32).dump(2);
  ModelSpec base = spec;
  base.tuning = {};
  const std::unique_ptr<Model> shapes = build_model(base);
  std::vector<std::vector<float>> values;
  SafetensorsWriter w;
  uint32_t seed = 500;
  for (Unit* u : shapes->units())
    for (const auto& e : u->layout().entries()) {
      // Norm scales near 1, the rest small: a loss away from log(V) and softmaxes not flat.
      const bool norm = e.spec.shape.size() == 1 && e.spec.name.find("norm") != std::string::npos;
      values.push_back(
          test::random_floats(e.spec.numel(), ++seed, norm ? 0.5f : -0.3f, norm ? 1.5f : 0.3f));
      w.add_f32(e.spec.name, e.spec.shape, values.back().data());
    }
  w.write((dir / "model.safetensors").string());
  std::ofstream(dir / "batch.json")
      << nlohmann::json{{"B", B}, {"T", T}, {"inputs", t.inputs}, {"targets", t.targets}}.dump();
}

TEST(TorchReference, EachLlamaFamilysLossMatchesAFloat64Reference) {
  std::string probe;
  const std::string python = torch_python(probe);
  if (python.empty())
    GTEST_SKIP() << "no python3 with torch here (apt-get install python3-torch): " << probe;
  std::vector<std::pair<std::string, LlamaConfig>> models;
  models.emplace_back("llama", tiny_llama_config(67, 12, false, false, false));
  for (LlamaFamily f : kNewFamilies)
    models.emplace_back(family_name(f), tiny_family_config(f, 67, 12));
  LlamaConfig qwen3_bias = tiny_family_config(LlamaFamily::kQwen3, 67, 12);
  qwen3_bias.attention_bias = qwen3_bias.attention_out_bias = true;
  models.emplace_back("qwen3 attention_bias", qwen3_bias);
  for (const auto& [name, config] : models) {
    SCOPED_TRACE(name);
    const ModelSpec spec{config, {}};
    const fs::path dir = fs::temp_directory_path() / ("zt_torch_ref_" + std::to_string(::getpid()));
    const model_test::Tokens t = model_test::random_tokens(2, 12, 67, 77);
    write_model_dir(dir, spec, t, 2, 12);

    CpuDevice device;
    SelfCommunicator comm(device);
    const std::unique_ptr<Model> model = build_model(spec);
    Engine engine(device, comm, *model, EngineOptions{});
    load_weights(engine, dir.string());
    const double loss = engine.eval_loss(t.batch);
    std::string out;
    ASSERT_EQ(run(python + " " + kScript + " " + dir.string() + " 2>&1", out), 0) << out;
    const double reference = std::stod(out);
    std::printf("%-22s zerotrain %.9f  torch float64 %.9f  relative %.2e\n", name.c_str(), loss,
                reference, std::abs(loss - reference) / std::abs(reference));
    EXPECT_LE(std::abs(loss - reference), 1e-5 * std::abs(reference))
        << "zerotrain " << loss << ", torch float64 " << reference;
    fs::remove_all(dir);
  }
}

// A trained LoRA adapter as a user applies it: the reference reads the base directory and the
// adapter directory save_adapter wrote (PEFT's files) and merges W + (lora_alpha/r)·B@A into
// each targeted weight in float64, the trained biases replacing the base's, as PEFT's
// merge_and_unload computes; its loss against our adapted model's. PEFT itself is not called:
// python3-peft is not installable here (no Debian package, and PyPI is out of reach).
TEST(TorchReference, LoraAdapterFilesMatchAFloat64Reference) {
  std::string probe;
  const std::string python = torch_python(probe);
  if (python.empty())
    GTEST_SKIP() << "no python3 with torch here (apt-get install python3-torch): " << probe;
  struct Case {
    const char* name;
    LlamaConfig config;
    std::vector<std::string> targets;
    std::string bias;
  };
  const Case cases[] = {
      {"qwen2 seven, bias all",
       tiny_llama_config(67, 12, true, true, false),
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
       "all"},
      {"phi3 all-linear", tiny_family_config(LlamaFamily::kPhi3, 67, 12), {"all-linear"}, "none"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModelSpec spec{c.config, {}};
    Tuning tuning;
    tuning.lora.enabled = true;
    tuning.lora.r = 4;
    tuning.lora.alpha = 6.0f;
    tuning.lora.target_modules = c.targets;
    tuning.lora.bias = c.bias;
    spec.tuning = resolve_tuning(spec, tuning);
    const fs::path dir =
        fs::temp_directory_path() / ("zt_torch_lora_" + std::to_string(::getpid()));
    const model_test::Tokens t = model_test::random_tokens(2, 12, 67, 77);
    write_model_dir(dir, spec, t, 2, 12);

    CpuDevice device;
    SelfCommunicator comm(device);
    const std::unique_ptr<Model> model = build_model(spec);
    EngineOptions o;
    o.optimizer.type = OptimizerOptions::Type::kAdamW;
    Engine engine(device, comm, *model, o);
    load_weights(engine, dir.string());
    for (uint32_t step = 0; step < 3; ++step) {  // B off zero, the biases moved
      const model_test::Tokens train = model_test::random_tokens(2, 12, 67, 200 + step);
      engine.train_step(std::span<const Batch>(&train.batch, 1), 2e-2f);
    }
    const double loss = engine.eval_loss(t.batch);
    save_adapter(engine, spec, dir.string(), (dir / "adapter").string());
    std::string out;
    ASSERT_EQ(run(python + " " + kScript + " " + dir.string() + " " + (dir / "adapter").string() +
                      " 2>&1",
                  out),
              0)
        << out;
    const double reference = std::stod(out);
    std::printf("%-22s zerotrain %.9f  torch float64 %.9f  relative %.2e\n", c.name, loss,
                reference, std::abs(loss - reference) / std::abs(reference));
    EXPECT_LE(std::abs(loss - reference), 1e-5 * std::abs(reference))
        << "zerotrain " << loss << ", torch float64 " << reference;
    // The base alone is far from it: the comparison sees the adapter.
    out.clear();
    ASSERT_EQ(run(python + " " + kScript + " " + dir.string() + " 2>&1", out), 0) << out;
    EXPECT_GT(std::abs(std::stod(out) - reference), 1e-3 * std::abs(reference));
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace zt
