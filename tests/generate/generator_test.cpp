// Generation (generate/generator.h) on a tiny trained model of every family: GPT-2, Llama with
// and without biases, Mistral's and Phi-3's sliding windows (shorter than the sequences, so the
// cache's window is exercised), Qwen3's q/k norms. Each greedy token of a 32-token generation
// is the argmax of a full forward over the sequence so far into an empty cache, and that full
// forward's logits give the training forward's loss (Engine::eval_loss) on the same sequence.
// Sampling is reproducible from its seed, top-k 1 is greedy; prompts, stop ids and exact match
// (generate/prompts.h) on small files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/self_communicator.h"
#include "generate/generator.h"
#include "generate/prompts.h"
#include "model_zoo/model_spec.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/model_zoo/tiny_llama.h"

namespace zt {
namespace {

constexpr int kVocab = 67, kPositions = 64, kCycle = 13;

struct Family {
  const char* name;
  ModelSpec spec;
};

std::vector<Family> families() {
  return {{"gpt2", ModelSpec{Gpt2Config{2, 4, 32, kVocab, kPositions}}},
          {"llama", ModelSpec{tiny_llama_config(kVocab, kPositions, false, false, false)}},
          {"qwen2", ModelSpec{tiny_llama_config(kVocab, kPositions, true, true, false)}},
          {"mistral", ModelSpec{tiny_family_config(LlamaFamily::kMistral, kVocab, kPositions)}},
          {"qwen3", ModelSpec{tiny_family_config(LlamaFamily::kQwen3, kVocab, kPositions)}},
          {"phi3", ModelSpec{tiny_family_config(LlamaFamily::kPhi3, kVocab, kPositions)}}};
}

// A sequence the model can learn: a fixed cycle of kCycle tokens, from `offset`.
std::vector<int32_t> cycle_tokens(int64_t n, int64_t offset) {
  std::vector<int32_t> cycle(kCycle);
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  for (int32_t& t : cycle) t = token(gen);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = cycle[(i + offset) % kCycle];
  return out;
}

struct Trained {
  explicit Trained(const ModelSpec& spec)
      : model(build_model(spec)), engine(device, comm, *model, options()) {
    const int64_t B = 4, T = 32;
    for (int step = 0; step < 40; ++step) {
      std::vector<int32_t> inputs, targets;
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> row = cycle_tokens(T + 1, step * B + b);
        inputs.insert(inputs.end(), row.begin(), row.end() - 1);
        targets.insert(targets.end(), row.begin() + 1, row.end());
      }
      const Batch batch{inputs.data(), targets.data(), B, T};
      engine.train_step(std::span<const Batch>(&batch, 1), 1e-2f);
    }
  }
  static EngineOptions options() {
    EngineOptions o;
    o.seed = 3;
    return o;
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  std::unique_ptr<Model> model;
  Engine engine;
};

// Each family's model trained once for the whole binary (training is most of the time here).
Trained& trained(size_t family) {
  static std::vector<std::unique_ptr<Trained>> models(families().size());
  if (!models.at(family)) models[family] = std::make_unique<Trained>(families()[family].spec);
  return *models[family];
}

double cross_entropy(const std::vector<float>& logits, int32_t target) {
  double mx = -INFINITY, sum = 0.0;
  for (float x : logits) mx = std::max(mx, double(x));
  for (float x : logits) sum += std::exp(double(x) - mx);
  return mx + std::log(sum) - logits[target];
}

TEST(GeneratorTest, GreedyTokensAreTheFullForwardsArgmax) {
  for (size_t i = 0; i < families().size(); ++i) {
    const Family& f = families()[i];
    Generator generator(trained(i).engine, 40);
    std::vector<int32_t> seq = cycle_tokens(6, 4);
    GenerateOptions options;
    options.max_new_tokens = 32;
    const Generation g = generator.generate(seq, options);
    ASSERT_EQ(g.ids.size(), 32u) << f.name;
    EXPECT_FALSE(g.stopped);
    for (size_t j = 0; j < g.ids.size(); ++j) {
      const std::vector<float> logits = generator.next_logits(seq);
      ASSERT_EQ(g.ids[j], argmax_token(logits)) << f.name << ": token " << j;
      seq.push_back(g.ids[j]);
    }
    // The model learned its cycle: most generated tokens continue it (the check above is then
    // not about a degenerate model repeating one token).
    const std::vector<int32_t> expected = cycle_tokens(38, 4);
    int right = 0;
    for (size_t j = 0; j < g.ids.size(); ++j) right += g.ids[j] == expected[6 + j] ? 1 : 0;
    EXPECT_GE(right, 24) << f.name;
  }
}

TEST(GeneratorTest, FullForwardLogitsGiveTheTrainingForwardsLoss) {
  for (size_t i = 0; i < families().size(); ++i) {
    const Family& f = families()[i];
    Trained& t = trained(i);
    Generator generator(t.engine, kPositions);
    const std::vector<int32_t> row = cycle_tokens(25, 2);  // 24 inputs, 24 targets
    double sum = 0.0;
    for (size_t n = 1; n < row.size(); ++n)
      sum += cross_entropy(generator.next_logits(std::span(row).first(n)), row[n]);
    const std::vector<int32_t> targets(row.begin() + 1, row.end());
    const Batch batch{row.data(), targets.data(), 1, 24};
    const double loss = t.engine.eval_loss(batch);
    EXPECT_NEAR(sum / 24.0, loss, 1e-5 * std::max(1.0, loss)) << f.name;
  }
}

TEST(GeneratorTest, SamplingIsReproducibleAndTopKOneIsGreedy) {
  Generator generator(trained(1).engine, 40);
  const std::vector<int32_t> prompt = cycle_tokens(5, 0);
  GenerateOptions sampled;
  sampled.max_new_tokens = 20;
  sampled.sampling = {1.5f, 0.9f, 0, 7};
  const Generation a = generator.generate(prompt, sampled), b = generator.generate(prompt, sampled);
  EXPECT_EQ(a.ids, b.ids);
  GenerateOptions greedy = sampled, top1 = sampled;
  greedy.sampling = {};
  top1.sampling.top_k = 1;
  EXPECT_EQ(generator.generate(prompt, top1).ids, generator.generate(prompt, greedy).ids);
  sampled.sampling.seed = 8;
  sampled.sampling.temperature = 50.0f;  // nearly uniform: another seed, other tokens
  EXPECT_NE(generator.generate(prompt, sampled).ids, a.ids);
}

TEST(GeneratorTest, StopsAtAStopTokenAndKeepsIt) {
  Generator generator(trained(1).engine, 40);
  const std::vector<int32_t> prompt = cycle_tokens(5, 0);
  GenerateOptions options;
  options.max_new_tokens = 30;
  const Generation free = generator.generate(prompt, options);
  options.stop_ids = {free.ids[3]};
  const Generation stopped = generator.generate(prompt, options);
  ASSERT_TRUE(stopped.stopped);
  const size_t first = std::find(free.ids.begin(), free.ids.end(), free.ids[3]) - free.ids.begin();
  EXPECT_EQ(stopped.ids, std::vector<int32_t>(free.ids.begin(), free.ids.begin() + first + 1));
}

TEST(GeneratorTest, RefusesWhatDoesNotFit) {
  Engine& engine = trained(1).engine;
  EXPECT_THROW(Generator(engine, kPositions + 1), Error);
  Generator generator(engine, 8);
  const std::vector<int32_t> long_prompt = cycle_tokens(8, 0);
  EXPECT_THROW(generator.generate(long_prompt, {}), Error);
  const std::vector<int32_t> bad = {1, kVocab};
  EXPECT_THROW(generator.next_logits(bad), Error);
  SamplingOptions s;
  s.top_p = 0.0f;
  EXPECT_THROW(validate_sampling(s, "test"), Error);
}

TEST(GeneratorTest, PickTokenFiltersAsTransformersDoes) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  EXPECT_EQ(argmax_token(logits), 1);  // the first of equal ones
  std::mt19937_64 rng(1);
  SamplingOptions top2{1.0f, 1.0f, 2, 0};
  for (int i = 0; i < 200; ++i) {
    const int32_t id = pick_token(logits, top2, rng);
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
  // top_p 0.5: the two largest (about 0.39 each) are needed to reach it; the third never drawn.
  SamplingOptions nucleus{1.0f, 0.5f, 0, 0};
  for (int i = 0; i < 200; ++i) {
    const int32_t id = pick_token(logits, nucleus, rng);
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
}

struct TempDir {
  TempDir()
      : path(std::filesystem::temp_directory_path() / ("zt_gen_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

TEST(PromptsTest, StopIdsInHuggingFacesOrderAndExactMatch) {
  TempDir dir;
  auto write = [&](const char* name, const char* text) { std::ofstream(dir.path / name) << text; };
  BpeSpec spec;
  spec.source = "test";
  for (const char* t : {"a", "b", "<eos>"}) spec.token_bytes.push_back(t);
  spec.added_tokens.push_back({2, "<eos>", true, true});
  BpeTokenizer tokenizer(std::move(spec));
  EXPECT_TRUE(default_stop_ids(dir.path.string(), tokenizer).empty());
  write("tokenizer_config.json", R"({"eos_token": {"content": "<eos>"}})");
  EXPECT_EQ(default_stop_ids(dir.path.string(), tokenizer), std::vector<int32_t>{2});
  write("config.json", R"({"eos_token_id": 1})");
  EXPECT_EQ(default_stop_ids(dir.path.string(), tokenizer), std::vector<int32_t>{1});
  write("generation_config.json", R"({"eos_token_id": [0, 2]})");
  EXPECT_EQ(default_stop_ids(dir.path.string(), tokenizer), (std::vector<int32_t>{0, 2}));
  write("generation_config.json", R"({"eos_token_id": "x"})");
  EXPECT_THROW(default_stop_ids(dir.path.string(), tokenizer), Error);
  EXPECT_TRUE(exact_match(" sixty-eight", "sixty-eight\n"));
  EXPECT_FALSE(exact_match(" sixty-eight", " sixty-nine"));
}

}  // namespace
}  // namespace zt
