// Chat data rendered by a model's chat template (runtime/data/chat_segments.h and the templated
// path of runtime/data/instruction_data.h): for the templates of tests/runtime/data/templates
// (Llama 3, Qwen3, ChatML, Mistral-instruct, Zephyr, Phi-3, Llama 2) on single- and multi-turn
// conversations with and without a system message, the tokens the loss counts on decode to
// exactly the assistant replies and their end-of-turn text; the tokens decode to the whole
// render, with the template's special tokens as their ids and its BOS not doubled. Templates
// whose prefix renders are not prefixes of the whole (Qwen3 multi-turn, Mistral with a system
// message, a template of ours) are refused naming path:line and the bytes that differ. The
// tokenizer is a byte-level BPE built here with the templates' special tokens as added tokens;
// with data/hf-tokenizers (scripts/fetch_tokenizers.sh) the same holds for the real Llama 2,
// Llama 3 and Qwen3 tokenizers, whose whole-text tokenisation every loss boundary falls on.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/data/chat_segments.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/instruction_data.h"
#include "runtime/data/token_data.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

using OrderedJson = nlohmann::ordered_json;
using test::TempDir;

const std::string kTemplates = std::string(ZT_SOURCE_DIR) + "/tests/runtime/data/templates";

const std::vector<std::string> kSpecialTokens = {"<|begin_of_text|>",
                                                 "<|start_header_id|>",
                                                 "<|end_header_id|>",
                                                 "<|eot_id|>",
                                                 "<|end_of_text|>",
                                                 "<|im_start|>",
                                                 "<|im_end|>",
                                                 "<s>",
                                                 "</s>",
                                                 "<|user|>",
                                                 "<|assistant|>",
                                                 "<|system|>",
                                                 "<|end|>"};

// Bytes 0..255, "ab" (256), <|endoftext|> (257), then kSpecialTokens (258...), all special.
BpeTokenizer chat_tokenizer(const TempDir& dir) {
  auto [vocab, merges] = test::synthetic_vocab({{"a", "b"}});
  nlohmann::json json = test::gpt2_style_tokenizer_json(vocab, merges, test::MergeFormat::kStrings);
  int id = 258;
  for (const std::string& token : kSpecialTokens) {
    json["model"]["vocab"][token] = id;
    json["added_tokens"].push_back({{"id", id++},
                                    {"content", token},
                                    {"single_word", false},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false},
                                    {"special", true}});
  }
  dir.write("tokenizer.json", json.dump());
  return load_tokenizer_json(dir.file("tokenizer.json"));
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ChatTemplate fixture(const std::string& name) {
  const OrderedJson cases = OrderedJson::parse(file_text(kTemplates + "/cases.json"));
  const OrderedJson& t = cases["templates"][name];
  return ChatTemplate(file_text(kTemplates + "/" + t["file"].get<std::string>()),
                      t["special_tokens"], name);
}

// The conversations: replies R1, R2 (multi-turn) after user turns, with or without a system
// message.
struct Conversation {
  std::string name;
  std::string line;
  std::vector<std::string> replies;
};

std::vector<Conversation> conversations() {
  const std::string system = R"({"role": "system", "content": "Be terse."}, )";
  const std::string single =
      R"({"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is 4."})";
  const std::string second =
      R"(, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6, abab."})";
  return {{"single", R"({"messages": [)" + single + "]}", {"It is 4."}},
          {"single_system", R"({"messages": [)" + system + single + "]}", {"It is 4."}},
          {"multi", R"({"messages": [)" + single + second + "]}", {"It is 4.", "6, abab."}},
          {"multi_system",
           R"({"messages": [)" + system + single + second + "]}",
           {"It is 4.", "6, abab."}}};
}

// What each template's loss covers for a reply; "" for a conversation it refuses.
struct Expected {
  std::string name;
  std::function<std::string(const std::string& reply)> turn;
  std::vector<std::string> refused;  // conversation names
};

std::vector<Expected> expectations() {
  return {
      {"llama3", [](const std::string& r) { return r + "<|eot_id|>"; }, {}},
      {"chatml", [](const std::string& r) { return r + "<|im_end|>\n"; }, {}},
      // The last reply after the last user turn gets an (empty) thinking block; earlier
      // replies render without it, so multi-turn prefixes do not match.
      {"qwen3",
       [](const std::string& r) { return "<think>\n\n</think>\n\n" + r + "<|im_end|>\n"; },
       {"multi", "multi_system"}},
      // The system message goes into the last user turn, so no prefix matches with one.
      {"mistral",
       [](const std::string& r) { return " " + r + "</s>"; },
       {"single_system", "multi_system"}},
      {"zephyr", [](const std::string& r) { return r + "</s>\n"; }, {}},
      // Phi-3 closes every render with eos_token: the closing text, not counted.
      {"phi3", [](const std::string& r) { return r + "<|end|>\n"; }, {}},
      {"llama2", [](const std::string& r) { return " " + r + " </s>"; }, {}},
  };
}

// The ids whose flags have kTokenLoss.
std::vector<int32_t> loss_ids(const TokenizedExample& t) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t.ids.size(); ++i)
    if (t.flags[i] & kTokenLoss) ids.push_back(t.ids[i]);
  return ids;
}

TEST(ChatTemplateMaskTest, LossCoversExactlyTheAssistantTurns) {
  TempDir dir;
  BpeTokenizer tokenizer = chat_tokenizer(dir);
  int checked = 0, refused = 0;
  for (const Expected& expected : expectations()) {
    const ChatTemplate chat_template = fixture(expected.name);
    for (const Conversation& conversation : conversations()) {
      SCOPED_TRACE(expected.name + " x " + conversation.name);
      const bool refuses = std::find(expected.refused.begin(), expected.refused.end(),
                                     conversation.name) != expected.refused.end();
      if (refuses) {
        try {
          parse_instruction_example(conversation.line, "chat.jsonl:7", &chat_template);
          ADD_FAILURE() << "not refused";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kInput);
          EXPECT_TRUE(e.message().starts_with("chat.jsonl:7: the chat template " + expected.name +
                                              " renders messages[0.."))
              << e.message();
          EXPECT_NE(e.message().find("is not the start of"), std::string::npos) << e.message();
          EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
          ++refused;
        }
        continue;
      }
      const InstructionExample example =
          parse_instruction_example(conversation.line, "chat.jsonl:7", &chat_template);
      EXPECT_TRUE(example.templated);
      const OrderedJson root = OrderedJson::parse(conversation.line);
      const std::string whole = chat_template.render(root["messages"], false);
      std::string text, expected_loss;
      for (const TextSegment& segment : example.segments) text += segment.text;
      EXPECT_EQ(text, whole);
      for (const std::string& reply : conversation.replies) expected_loss += expected.turn(reply);

      const TokenizedExample t = tokenize_example(tokenizer, example, 257, std::nullopt);
      EXPECT_FALSE(t.by_segments);
      EXPECT_EQ(tokenizer.decode(t.ids), whole);  // no end token added
      EXPECT_EQ(tokenizer.decode(loss_ids(t)), expected_loss);
      EXPECT_EQ(t.flags[0], kTokenDocStart);
      // The template's special tokens are their ids, as tokenising the whole text gives them.
      EXPECT_EQ(t.ids, tokenizer.encode(whole, SpecialTokens::kMatch));
      ++checked;
    }
  }
  std::printf("%d template x conversation masks exact, %d refused\n", checked, refused);
  EXPECT_EQ(checked, 7 * 4 - 4);
  EXPECT_EQ(refused, 4);
}

TEST(ChatTemplateMaskTest, ABosTheTemplateWritesIsNotDoubled) {
  TempDir dir;
  BpeTokenizer tokenizer = chat_tokenizer(dir);
  const ChatTemplate llama3 = fixture("llama3");
  const int32_t bos = *tokenizer.token_id("<|begin_of_text|>");
  const InstructionExample example =
      parse_instruction_example(conversations()[0].line, "c.jsonl:1", &llama3);
  const TokenizedExample with_bos = tokenize_example(tokenizer, example, 257, bos);
  const TokenizedExample without = tokenize_example(tokenizer, example, 257, std::nullopt);
  EXPECT_EQ(with_bos.ids, without.ids);
  EXPECT_EQ(with_bos.ids[0], bos);
  EXPECT_EQ(std::count(with_bos.ids.begin(), with_bos.ids.end(), bos), 1);
  // ChatML writes none: --bos goes first, not counted.
  const ChatTemplate chatml = fixture("chatml");
  const TokenizedExample chat = tokenize_example(
      tokenizer, parse_instruction_example(conversations()[0].line, "c.jsonl:1", &chatml), 257,
      bos);
  EXPECT_EQ(chat.ids[0], bos);
  EXPECT_EQ(chat.ids[1], *tokenizer.token_id("<|im_start|>"));
  EXPECT_EQ(chat.flags[0], kTokenDocStart);
}

TEST(ChatTemplateMaskTest, ToolsAndKwargsReachTheTemplate) {
  TempDir dir;
  BpeTokenizer tokenizer = chat_tokenizer(dir);
  const ChatTemplate qwen3 = fixture("qwen3");
  // enable_thinking false puts the empty thinking block in the generation prompt: the loss
  // is the reply alone.
  const InstructionExample no_thinking = parse_instruction_example(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
          "chat_template_kwargs": {"enable_thinking": false}})",
      "t.jsonl:1", &qwen3);
  EXPECT_EQ(tokenizer.decode(loss_ids(tokenize_example(tokenizer, no_thinking, 257, {}))),
            "Yo<|im_end|>\n");
  // Tools go into the system turn; a tool call and a tool reply go through as written.
  const std::string line = R"({"tools": [{"type": "function", "function": {"name": "f"}}],
      "messages": [{"role": "user", "content": "Call f"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
       "arguments": {"x": 1}}}]}]})";
  const InstructionExample tools = parse_instruction_example(line, "t.jsonl:2", &qwen3);
  const std::string text = tools.segments.front().text;
  EXPECT_TRUE(text.starts_with("<|im_start|>system\n# Tools")) << text;
  EXPECT_NE(text.find(R"({"type": "function", "function": {"name": "f"}})"), std::string::npos);
  EXPECT_EQ(tools.segments.back().loss, Loss::kYes);
  EXPECT_EQ(tools.segments.back().text,
            "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": "
            "1}}\n</tool_call><|im_end|>\n");
}

TEST(ChatTemplateMaskTest, ATokenAcrossALossBoundaryFallsBackToRunByRun) {
  TempDir dir;
  BpeTokenizer tokenizer = chat_tokenizer(dir);
  // The generation prompt ends in "a" and the reply starts with "b": whole, they would merge
  // into "ab" (256), half prompt and half reply.
  const ChatTemplate glued(
      "{% for m in messages %}<|im_start|>{{ m.role }}:a{{ m.content }}<|im_end|>{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant:a{% endif %}",
      OrderedJson::object(), "glued");
  const InstructionExample example = parse_instruction_example(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "bc"}]})",
      "g.jsonl:1", &glued);
  const TokenizedExample t = tokenize_example(tokenizer, example, 257, std::nullopt);
  EXPECT_TRUE(t.by_segments);
  EXPECT_EQ(std::count(t.ids.begin(), t.ids.end(), 256), 0);
  EXPECT_EQ(tokenizer.decode(loss_ids(t)), "bc<|im_end|>");
  EXPECT_EQ(tokenizer.decode(t.ids),
            "<|im_start|>user:aq<|im_end|><|im_start|>assistant:abc<|im_end|>");
}

TEST(ChatTemplateMaskTest, RefusesPrefixesThatDoNotMatchNamingTheExample) {
  TempDir dir;
  // The message count first: no prefix render starts the whole one.
  const ChatTemplate counting(
      "{{ messages | length }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}",
      OrderedJson::object(), "counting");
  dir.write("c.jsonl", "\n" + conversations()[0].line + "\n");
  try {
    read_instruction_file(dir.file("c.jsonl"), &counting);
    FAIL() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message(),
              dir.file("c.jsonl") +
                  ":2: the chat template counting renders messages[0..1) with the generation "
                  "prompt (where reply 1 begins) as text that is not the start of the whole "
                  "conversation, so the assistant turns cannot be masked: at byte 0 it has "
                  "\"1[user]What is 2+2?[assistant]\" where the whole conversation has "
                  "\"2[user]What is 2+2?[assistant]It\"...");
  }
  // A template error names the example too; the last message must be the assistant's.
  const ChatTemplate llama2 = fixture("llama2");
  try {
    parse_instruction_example(
        R"({"messages": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]})",
        "x.jsonl:3", &llama2);
    FAIL() << "not refused";
  } catch (const Error& e) {
    EXPECT_TRUE(e.message().starts_with("x.jsonl:3: template llama2 line 1: the template raised"))
        << e.message();
  }
  EXPECT_THROW(parse_instruction_example(R"({"messages": [{"role": "user", "content": "a"}]})",
                                         "x.jsonl:4", &llama2),
               Error);
  EXPECT_THROW(parse_instruction_example(
                   R"({"messages": [{"role": "assistant", "content": "a"}], "tools": 3})",
                   "x.jsonl:5", &llama2),
               Error);
}

// The real tokenizers of scripts/fetch_tokenizers.sh (data/hf-tokenizers), when fetched: Llama 3
// and Qwen3 with the templates of their tokenizer_config.json, Qwen3's with ChatML, Llama 2's
// (Metaspace, legacy: a space after each special token) with the Llama 2, Mistral, Zephyr and
// Phi-3 templates. Every loss boundary is a token boundary of the whole text's tokenisation, so
// the ids are apply_chat_template(tokenize=True)'s, and the loss decodes to the replies.
TEST(ChatTemplateMaskTest, WithRealTokenizers) {
  const std::string hf = std::string(ZT_SOURCE_DIR) + "/data/hf-tokenizers";
  for (const char* name : {"llama2", "llama3", "qwen3"})
    if (!std::ifstream(hf + "/" + name + "/tokenizer.json"))
      GTEST_SKIP() << "no data/hf-tokenizers (scripts/fetch_tokenizers.sh)";
  struct Case {
    std::string tokenizer;
    std::string chat_template;  // "": the directory's own
    std::function<std::string(const std::string& reply)> turn;
    std::vector<std::string> refused;
  };
  const std::string think = "<think>\n\n</think>\n\n";
  const std::vector<Case> cases = {
      {"llama3", "", [](const std::string& r) { return r + "<|eot_id|>"; }, {}},
      {"qwen3",
       "",
       [&](const std::string& r) { return think + r + "<|im_end|>\n"; },
       {"multi", "multi_system"}},
      {"qwen3", "chatml", [](const std::string& r) { return r + "<|im_end|>\n"; }, {}},
      {"llama2", "llama2", [](const std::string& r) { return " " + r + " </s>"; }, {}},
      {"llama2",
       "mistral",
       [](const std::string& r) { return " " + r + "</s>"; },
       {"single_system", "multi_system"}},
      {"llama2", "zephyr", [](const std::string& r) { return r + "</s> \n"; }, {}},
      {"llama2", "phi3", [](const std::string& r) { return r + "<|end|>\n"; }, {}}};
  int checked = 0, refused = 0;
  for (const Case& c : cases) {
    BpeTokenizer tokenizer = load_tokenizer_json(hf + "/" + c.tokenizer);
    const ChatTemplate t = c.chat_template.empty() ? ChatTemplate::load(hf + "/" + c.tokenizer)
                                                   : fixture(c.chat_template);
    for (const Conversation& conversation : conversations()) {
      SCOPED_TRACE(c.tokenizer + "/" + c.chat_template + " x " + conversation.name);
      if (std::find(c.refused.begin(), c.refused.end(), conversation.name) != c.refused.end()) {
        EXPECT_THROW(parse_instruction_example(conversation.line, "r:1", &t), Error);
        ++refused;
        continue;
      }
      const InstructionExample e = parse_instruction_example(conversation.line, "r:1", &t);
      const TokenizedExample tokens = tokenize_example(tokenizer, e, 0, std::nullopt);
      std::string whole, expected;
      for (const TextSegment& segment : e.segments) whole += segment.text;
      for (const std::string& reply : conversation.replies) expected += c.turn(reply);
      if (expected.starts_with(' ')) expected.erase(0, 1);  // the decoder strips it
      EXPECT_FALSE(tokens.by_segments);
      EXPECT_EQ(tokens.ids, tokenizer.encode(whole, SpecialTokens::kMatch));
      EXPECT_EQ(tokenizer.decode(loss_ids(tokens)), expected);
      ++checked;
    }
  }
  std::printf("real tokenizers: %d masks exact, %d refused\n", checked, refused);
  EXPECT_EQ(checked + refused, 7 * 4);
}

}  // namespace
}  // namespace zt
