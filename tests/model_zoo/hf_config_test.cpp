// model_zoo/hf_config's reading of config.json: each bad config refused naming the key, and
// transformers' defaults where keys are absent (GPT-2, Llama, Qwen2).
#include "model_zoo/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("zt_hf_config_" + std::to_string(::getpid()))) {
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

TEST(HfConfig, ConfigJsonIsCheckedNamingTheKey) {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  auto config_error = [&](const std::string& text) {
    write(tmp.path / "config.json", text);
    return error_of([&] { read_hf_config(dir); });
  };
  EXPECT_NE(config_error("[").find("not a JSON object"), std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "bert"})").find("model_type 'bert' is not supported"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                              "vocab_size": 61})")
                .find("\"n_positions\" must be a positive integer (missing)"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                              "vocab_size": 61, "n_positions": 8, "activation_function": "relu"})")
                .find("activation_function 'relu'"),
            std::string::npos);
  write(tmp.path / "config.json", R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                                      "vocab_size": 61, "n_positions": 8})");
  EXPECT_TRUE(is_hf_model_dir(dir));
  EXPECT_EQ(read_hf_config(dir).gpt2().n_positions, 8);

  // The Llama family: sizes required, what the model would compute differently refused.
  const std::string llama = R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 67)";
  EXPECT_NE(config_error(R"({"model_type": "llama", "hidden_size": 32})")
                .find("\"intermediate_size\" must be a positive integer (missing)"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "llama", )" + llama +
                         R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})")
                .find("\"rope_scaling\": rope_type 'yarn' is not supported"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "llama", )" + llama +
                         R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})")
                .find("\"original_max_position_embeddings\" must be a positive integer (missing)"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "llama", )" + llama + R"(, "hidden_act": "gelu"})")
                .find("hidden_act 'gelu'"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "qwen2", )" + llama + R"(, "use_sliding_window": true})")
                .find("\"use_sliding_window\""),
            std::string::npos);
  EXPECT_NE(config_error(R"({"model_type": "llama", )" + llama + R"(, "num_key_value_heads": 3})")
                .find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(
      config_error(R"({"model_type": "llama", )" + llama + R"(, "tie_word_embeddings": "yes"})")
          .find("\"tie_word_embeddings\" must be true or false"),
      std::string::npos);
  // transformers' defaults where keys are absent: Llama untied without biases, Qwen2's q/k/v
  // biases.
  write(tmp.path / "config.json", R"({"model_type": "llama", )" + llama + "}");
  const LlamaConfig l = read_hf_config(dir).llama();
  EXPECT_EQ(l.num_key_value_heads, 2);
  EXPECT_FALSE(l.tie_word_embeddings);
  EXPECT_FALSE(l.attention_bias);
  EXPECT_EQ(l.rope_theta, 10000.0f);
  EXPECT_EQ(l.max_position_embeddings, 2048);
  // Llama 3.2's rope_scaling as its config.json has it (the older key "type" too).
  for (const char* key : {"rope_type", "type"}) {
    write(tmp.path / "config.json",
          R"({"model_type": "llama", )" + llama + R"(, "rope_scaling":
        {")" + key +
              R"(": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192}})");
    EXPECT_EQ(read_hf_config(dir).llama().rope_scaling,
              (RopeScaling{RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192}));
  }
  write(tmp.path / "config.json", R"({"model_type": "qwen2", )" + llama + "}");
  const ModelSpec q = read_hf_config(dir);
  EXPECT_EQ(q.model_type(), "qwen2");
  EXPECT_TRUE(q.llama().attention_bias);
  EXPECT_FALSE(q.llama().attention_out_bias);
}

}  // namespace
}  // namespace zt
