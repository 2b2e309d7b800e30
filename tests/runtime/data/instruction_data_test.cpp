// Instruction data (runtime/data/instruction_data.h): the template's exact rendering of both
// JSONL forms, one-line kInput errors naming path:line for every bad line, the mask boundary
// after tokenisation (a merge across prompt and completion never happens), greedy packing and
// one example per block with their padding, truncation and counts, and a packed file that the
// loader reads back. The tokenizer is a tiny byte-level BPE built here: ids 0..255 are the
// bytes, 256 is "ab", 257 is <|endoftext|>.
#include "runtime/data/instruction_data.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/data/token_data.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/model.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

using test::TempDir;

constexpr uint8_t D = kTokenDocStart;
constexpr uint8_t L = kTokenLoss;
constexpr int32_t kAb = 256;
constexpr int32_t kEnd = 257;
constexpr int32_t kBos = 1;

BpeTokenizer tiny_tokenizer(const TempDir& dir) {
  auto [vocab, merges] = test::synthetic_vocab({{"a", "b"}});
  dir.write("tokenizer.json",
            test::gpt2_style_tokenizer_json(vocab, merges, test::MergeFormat::kStrings).dump());
  return load_tokenizer_json(dir.file("tokenizer.json"));
}

std::vector<int32_t> byte_ids(std::string_view text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

std::vector<TextSegment> segments_of(std::string_view line) {
  return parse_instruction_example(line, "x.jsonl:1").segments;
}

// Runs `body`, expecting a one-line kInput error that contains `needle`.
template <typename Body>
void expect_input_error(Body body, const std::string& needle) {
  try {
    body();
    FAIL() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

TEST(InstructionTemplateTest, PromptCompletionIsTheTwoTextsUnchanged) {
  EXPECT_EQ(segments_of(R"({"prompt": "Q: 2+2?\nA:", "completion": " 4", "id": 7})"),
            (std::vector<TextSegment>{{"Q: 2+2?\nA:", Loss::kNo}, {" 4", Loss::kYes}}));
  EXPECT_EQ(segments_of(R"({"prompt": "", "completion": "all of it"})"),
            (std::vector<TextSegment>{{"all of it", Loss::kYes}}));
  EXPECT_EQ(segments_of(R"({"prompt": "only a prompt", "completion": ""})"),
            (std::vector<TextSegment>{{"only a prompt", Loss::kNo}}));
}

TEST(InstructionTemplateTest, MessagesRenderExactly) {
  const std::string_view line = R"({"messages": [
      {"role": "system", "content": "Be terse."},
      {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"},
      {"role": "user", "content": "And 3+3?"},
      {"role": "assistant", "content": "6", "name": "ignored"}]})";
  EXPECT_EQ(segments_of(line),
            (std::vector<TextSegment>{
                {"### System\nBe terse.\n\n### User\n2+2?\n\n### Assistant\n", Loss::kNo},
                {"4", Loss::kYes},
                {"\n\n### User\nAnd 3+3?\n\n### Assistant\n", Loss::kNo},
                {"6", Loss::kYes}}));
  // Two assistant turns in a row; an empty assistant content adds no completion text.
  EXPECT_EQ(
      segments_of(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": ""}, {"role": "assistant", "content": "there"}]})"),
      (std::vector<TextSegment>{{"### User\nhi\n\n### Assistant\n\n\n### Assistant\n", Loss::kNo},
                                {"there", Loss::kYes}}));
  EXPECT_EQ(segments_of(R"({"messages": [{"role": "assistant", "content": "Hello."}]})"),
            (std::vector<TextSegment>{{"### Assistant\n", Loss::kNo}, {"Hello.", Loss::kYes}}));
}

TEST(InstructionTemplateTest, BadLinesNamePathLineAndProblem) {
  // The message starts with where it is and contains `needle`.
  auto refused = [](std::string_view line, const std::string& needle) {
    expect_input_error([&] { parse_instruction_example(line, "data/x.jsonl:12"); }, needle);
    try {
      parse_instruction_example(line, "data/x.jsonl:12");
    } catch (const Error& e) {
      EXPECT_TRUE(e.message().starts_with("data/x.jsonl:12: ")) << e.message();
    }
  };
  refused(R"({"prompt": "a", )", "not JSON: parse error");
  refused("[1, 2]",
          "expected a JSON object with \"prompt\" and \"completion\" or with "
          "\"messages\"; got an array");
  refused(R"("text")", "got a string");
  refused(R"({"text": "a"})", "has neither \"prompt\" and \"completion\" nor \"messages\"");
  refused(R"({"prompt": "a", "completion": "b", "messages": []})", "has both \"messages\"");
  refused(R"({"prompt": "a"})", "\"completion\" is missing");
  refused(R"({"completion": "a"})", "\"prompt\" is missing");
  refused(R"({"prompt": 3, "completion": "b"})", "\"prompt\" must be a string; got a number");
  refused(R"({"prompt": "a", "completion": null})", "\"completion\" must be a string; got null");
  refused(R"({"messages": "hi"})", "\"messages\" must be an array; got a string");
  refused(R"({"messages": [["user", "hi"]]})", "messages[0] must be an object");
  refused(R"({"messages": [{"content": "hi"}]})", "messages[0].role is missing");
  refused(R"({"messages": [{"role": "user"}]})", "messages[0].content is missing");
  refused(R"({"messages": [{"role": "user", "content": ["hi"]}]})",
          "messages[0].content must be a string; got an array");
  refused(R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})",
          "messages[1].role \"tool\" is not system, user or assistant");
  refused(R"({"messages": [{"role": "user", "content": "a"}]})", "no assistant message");
  refused(R"({"messages": []})", "no assistant message");
  refused(R"({"messages": [{"role": "assistant", "content": "a"},
              {"role": "user", "content": "b"}]})",
          "the last message is from the user; a conversation must end with the assistant's");
}

TEST(InstructionFileTest, ReadsLinesSkippingBlankOnes) {
  TempDir dir;
  dir.write("a.jsonl",
            "{\"prompt\": \"p1\", \"completion\": \"c1\"}\n\n  \r\n"
            "{\"prompt\": \"p2\", \"completion\": \"c2\"}\r\n"
            "{\"prompt\": \"p3\", \"completion\": \"c3\"}");  // no final newline
  const std::vector<InstructionExample> examples = read_instruction_file(dir.file("a.jsonl"));
  ASSERT_EQ(examples.size(), 3u);
  EXPECT_EQ(examples[0].where, dir.file("a.jsonl") + ":1");
  EXPECT_EQ(examples[1].where, dir.file("a.jsonl") + ":4");
  EXPECT_EQ(examples[2].where, dir.file("a.jsonl") + ":5");
  EXPECT_EQ(examples[2].segments,
            (std::vector<TextSegment>{{"p3", Loss::kNo}, {"c3", Loss::kYes}}));

  dir.write("bad.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n\n{\"prompt\": 1}\n");
  expect_input_error([&] { read_instruction_file(dir.file("bad.jsonl")); },
                     dir.file("bad.jsonl") + ":3: \"prompt\" must be a string");
  dir.write("empty.jsonl", "");
  expect_input_error([&] { read_instruction_file(dir.file("empty.jsonl")); },
                     dir.file("empty.jsonl") + ": no examples");
  dir.write("blank.jsonl", "\n \n\t\n");
  expect_input_error([&] { read_instruction_file(dir.file("blank.jsonl")); },
                     dir.file("blank.jsonl") + ": no examples");
  expect_input_error([&] { read_instruction_file(dir.file("absent.jsonl")); },
                     dir.file("absent.jsonl"));
}

TEST(InstructionTokenizeTest, MaskBoundaryIsExact) {
  TempDir dir;
  BpeTokenizer tokenizer = tiny_tokenizer(dir);
  ASSERT_EQ(tokenizer.encode("xaby"), (std::vector<int32_t>{'x', kAb, 'y'}));
  // Prompt "xa" and completion "by" are tokenised apart: "a" and "b" do not merge across the
  // boundary, so no token is half prompt.
  const InstructionExample pair =
      parse_instruction_example(R"({"prompt": "xa", "completion": "by"})", "p.jsonl:1");
  TokenizedExample t = tokenize_example(tokenizer, pair, kEnd, std::nullopt);
  EXPECT_EQ(t.where, "p.jsonl:1");
  EXPECT_EQ(t.ids, (std::vector<int32_t>{'x', 'a', 'b', 'y', kEnd}));
  EXPECT_EQ(t.flags, (std::vector<uint8_t>{D, 0, L, L, L}));
  // Within a segment merges apply; BOS goes first, not counted, and is the document start.
  const InstructionExample merged =
      parse_instruction_example(R"({"prompt": "ab", "completion": "abab"})", "p.jsonl:2");
  t = tokenize_example(tokenizer, merged, kEnd, kBos);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{kBos, kAb, kAb, kAb, kEnd}));
  EXPECT_EQ(t.flags, (std::vector<uint8_t>{D, 0, L, L, L}));
}

TEST(InstructionTokenizeTest, MessagesCountOnlyAssistantContents) {
  TempDir dir;
  BpeTokenizer tokenizer = tiny_tokenizer(dir);
  const InstructionExample chat = parse_instruction_example(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"},
          {"role": "user", "content": "s"}, {"role": "assistant", "content": "t"}]})",
      "c.jsonl:1");
  const TokenizedExample t = tokenize_example(tokenizer, chat, kEnd, std::nullopt);
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  auto add = [&](std::string_view text, uint8_t flag) {
    for (int32_t id : byte_ids(text)) {
      ids.push_back(id);
      flags.push_back(flag);
    }
  };
  add("### User\nq\n\n### Assistant\n", 0);
  add("r", L);
  add("\n\n### User\ns\n\n### Assistant\n", 0);
  add("t", L);
  ids.push_back(kEnd);
  flags.push_back(L);
  flags[0] = D;
  EXPECT_EQ(t.ids, ids);
  EXPECT_EQ(t.flags, flags);
}

TEST(InstructionTokenizeTest, AFirstTokenNeverCounts) {
  TempDir dir;
  BpeTokenizer tokenizer = tiny_tokenizer(dir);
  // With no prompt and no BOS, the completion's first token has nothing before it.
  const InstructionExample bare =
      parse_instruction_example(R"({"prompt": "", "completion": "xy"})", "b.jsonl:1");
  TokenizedExample t = tokenize_example(tokenizer, bare, kEnd, std::nullopt);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{'x', 'y', kEnd}));
  EXPECT_EQ(t.flags, (std::vector<uint8_t>{D, L, L}));
  t = tokenize_example(tokenizer, bare, kEnd, kBos);
  EXPECT_EQ(t.flags, (std::vector<uint8_t>{D, L, L, L}));
  // An empty completion still teaches the end token.
  const InstructionExample empty =
      parse_instruction_example(R"({"prompt": "x", "completion": ""})", "b.jsonl:2");
  t = tokenize_example(tokenizer, empty, kEnd, std::nullopt);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{'x', kEnd}));
  EXPECT_EQ(t.flags, (std::vector<uint8_t>{D, L}));
}

// An example of n tokens: ids base, base+1, ...; the first `prompt` are the prompt.
TokenizedExample example(int32_t base, int n, int prompt) {
  TokenizedExample e{"e" + std::to_string(base), {}, {}};
  for (int i = 0; i < n; ++i) {
    e.ids.push_back(base + i);
    e.flags.push_back(i == 0 ? D : i < prompt ? 0 : L);
  }
  return e;
}

constexpr int32_t kPad = 99;

TEST(InstructionPackTest, GreedyFillsBlocksInOrder) {
  // Lengths 3, 4, 2, 6, 11 (truncated to 6), 1, 6 with seq_len 6.
  const std::vector<TokenizedExample> examples = {
      example(10, 3, 1),  example(20, 4, 2), example(30, 2, 1), example(40, 6, 5),
      example(50, 11, 8), example(70, 1, 1), example(80, 6, 6)};
  const PackedExamples packed = pack_examples(examples, 6, kPad, Packing::kGreedy);
  const int32_t P = kPad;
  EXPECT_EQ(packed.ids,
            (std::vector<int32_t>{10, 11, 12, P,  P,  P,   // 20..23 does not fit the 3 left
                                  20, 21, 22, 23, 30, 31,  // exactly full: no padding
                                  40, 41, 42, 43, 44, 45,  // a whole block
                                  50, 51, 52, 53, 54, 55,  // cut to seq_len: all prompt
                                  70, P,  P,  P,  P,  P,   // 80..85 does not fit the 5 left
                                  80, 81, 82, 83, 84, 85,  // all prompt
                                  P}));                    // the last block's last target
  EXPECT_EQ(packed.flags,
            (std::vector<uint8_t>{D, L, L, D, D, D, D, 0, L, L, D, L, D, 0, 0, 0, 0, L, D,
                                  0, 0, 0, 0, 0, D, D, D, D, D, D, D, 0, 0, 0, 0, 0, D}));
  EXPECT_EQ(packed.examples, 7);
  EXPECT_EQ(packed.blocks, 6);
  EXPECT_EQ(packed.completion_tokens, 2 + 2 + 1 + 1);
  EXPECT_EQ(packed.padding_tokens, 3 + 5);
  EXPECT_EQ(packed.truncated, 1);
  EXPECT_EQ(packed.without_completion, 3);  // 50 (after the cut), 70 and 80
  EXPECT_EQ(packed.first_without_completion, "e50");
}

TEST(InstructionPackTest, OnePerBlockPadsEveryExample) {
  const std::vector<TokenizedExample> examples = {example(10, 2, 1), example(20, 4, 2),
                                                  example(30, 1, 1)};
  const PackedExamples packed = pack_examples(examples, 4, kPad, Packing::kOnePerBlock);
  const int32_t P = kPad;
  EXPECT_EQ(packed.ids, (std::vector<int32_t>{10, 11, P, P, 20, 21, 22, 23, 30, P, P, P, P}));
  EXPECT_EQ(packed.flags, (std::vector<uint8_t>{D, L, D, D, D, 0, L, L, D, D, D, D, D}));
  EXPECT_EQ(packed.blocks, 3);
  EXPECT_EQ(packed.padding_tokens, 2 + 0 + 3);
  EXPECT_EQ(packed.truncated, 0);
  EXPECT_EQ(packed.without_completion, 1);
  // Greedy would have put 10 11 and 30 in one block.
  EXPECT_EQ(pack_examples(examples, 4, kPad, Packing::kGreedy).blocks, 3);
  const std::vector<TokenizedExample> short_ones = {examples[0], examples[2]};
  EXPECT_EQ(pack_examples(short_ones, 4, kPad, Packing::kGreedy).blocks, 1);
}

// zt-prep's path end to end: JSONL to a version 3 file that the loader serves with the
// completion tokens as the only targets.
TEST(InstructionPackTest, PackedFileLoadsWithMaskedTargets) {
  TempDir dir;
  BpeTokenizer tokenizer = tiny_tokenizer(dir);
  dir.write("d.jsonl",
            "{\"prompt\": \"pq\", \"completion\": \"r\"}\n"
            "{\"messages\": [{\"role\": \"assistant\", \"content\": \"s\"}]}\n");
  std::vector<TokenizedExample> examples;
  for (const InstructionExample& e : read_instruction_file(dir.file("d.jsonl"))) {
    examples.push_back(tokenize_example(tokenizer, e, kEnd, std::nullopt));
  }
  // "pq" "r" end (4 tokens), then "### Assistant\n" (14) "s" end: 16 tokens, a block each.
  const PackedExamples packed = pack_examples(examples, 16, kEnd, Packing::kGreedy);
  ASSERT_EQ(packed.blocks, 2);
  write_token_file(dir.file("d.bin"), packed.ids, packed.flags, 16);
  const TokenFile file = TokenFile::open(dir.file("d.bin"), 258);
  DataLoader loader(file, 2, 16, 0, 1, false, 0);
  std::vector<int32_t> inputs(32), targets(32), positions(32);
  loader.next(inputs.data(), targets.data(), positions.data());
  std::vector<int32_t> expected_targets(32, kIgnoreTarget);
  expected_targets[1] = 'r';
  expected_targets[2] = kEnd;
  expected_targets[16 + 13] = 's';
  expected_targets[16 + 14] = kEnd;
  EXPECT_EQ(targets, expected_targets);
  std::vector<int32_t> expected_positions = {0, 1, 2, 3};
  expected_positions.resize(16, 0);  // the pads are documents of one token
  for (int32_t t = 0; t < 16; ++t) expected_positions.push_back(t);
  EXPECT_EQ(positions, expected_positions);
  EXPECT_EQ(file.loss_tokens(0, file.size()), packed.completion_tokens);
  EXPECT_EQ(packed.completion_tokens, 4);
}

}  // namespace
}  // namespace zt
