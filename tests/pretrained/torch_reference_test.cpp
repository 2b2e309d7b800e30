// One forward and loss of each Llama family (llama, mistral with a window shorter than the
// sequence, qwen3 with and without attention_bias, phi3 with its fused tensors and a window)
// against a float64 PyTorch reference written from transformers' modeling semantics
// (torch_llama_families.py): a tiny random model written here as a Hugging Face directory,
// imported, its eval loss within 1e-5 relative of the reference's. Skips, naming why, when
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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "model_zoo/hf_config.h"
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

TEST(TorchReference, EachLlamaFamilysLossMatchesAFloat64Reference) {
  // The first of $ZT_TORCH_PYTHON, python3 and Debian's /usr/bin/python3 that imports torch.
  std::string python, probe;
  const char* env = std::getenv("ZT_TORCH_PYTHON");
  for (const std::string& candidate :
       {std::string(env ? env : ""), std::string("python3"), std::string("/usr/bin/python3")}) {
    if (candidate.empty()) continue;
    probe.clear();
    if (run(candidate + " -c 'import torch' 2>&1", probe) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty())
    GTEST_SKIP() << "no python3 with torch here (apt-get install python3-torch): " << probe;
  const std::string script =
      std::string(ZT_SOURCE_DIR) + "/tests/pretrained/torch_llama_families.py";
  std::vector<std::pair<std::string, LlamaConfig>> models;
  models.emplace_back("llama", tiny_llama_config(67, 12, false, false, false));
  for (LlamaFamily f : kNewFamilies)
    models.emplace_back(family_name(f), tiny_family_config(f, 67, 12));
  LlamaConfig qwen3_bias = tiny_family_config(LlamaFamily::kQwen3, 67, 12);
  qwen3_bias.attention_bias = qwen3_bias.attention_out_bias = true;
  models.emplace_back("qwen3 attention_bias", qwen3_bias);
  for (const auto& [name, config] : models) {
    SCOPED_TRACE(name);
    const ModelSpec spec{config};
    const fs::path dir = fs::temp_directory_path() / ("zt_torch_ref_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << hf_config_json(spec, DType::kF32).dump(2);
    const std::unique_ptr<Model> shapes = build_model(spec);
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
    const model_test::Tokens t = model_test::random_tokens(2, 12, 67, 77);
    std::ofstream(dir / "batch.json")
        << nlohmann::json{{"B", 2}, {"T", 12}, {"inputs", t.inputs}, {"targets", t.targets}}.dump();

    CpuDevice device;
    SelfCommunicator comm(device);
    const std::unique_ptr<Model> model = build_model(spec);
    Engine engine(device, comm, *model, EngineOptions{});
    load_weights(engine, dir.string());
    const double loss = engine.eval_loss(t.batch);
    std::string out;
    ASSERT_EQ(run(python + " " + script + " " + dir.string() + " 2>&1", out), 0) << out;
    const double reference = std::stod(out);
    std::printf("%-22s zerotrain %.9f  torch float64 %.9f  relative %.2e\n", name.c_str(), loss,
                reference, std::abs(loss - reference) / std::abs(reference));
    EXPECT_LE(std::abs(loss - reference), 1e-5 * std::abs(reference))
        << "zerotrain " << loss << ", torch float64 " << reference;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace zt
