// BpeTokenizer::decode and decode_for_display on synthetic tokenizer.json files, for what a
// text generator meets when it decodes ids as they come:
//   - a byte-level model's ids cut inside a character: one U+FFFD per maximal subpart, as the
//     ByteLevel decoder's String::from_utf8_lossy gives;
//   - a run of <0xNN> byte-fallback tokens that is not UTF-8: one U+FFFD per byte, as
//     tokenizers' ByteFallback decoder gives;
//   - SkipSpecialTokens::kYes drops the added tokens marked special, and only those;
//   - clean_up_tokenization (transformers' rule) and tokenizer_config.json's
//     clean_up_tokenization_spaces, which decode_for_display follows.
// tests/e2e/hf_tokenizers.sh checks the same on Llama 2, Llama 3 and Qwen3 against Hugging
// Face's own tokenizers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data/decoder.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

using nlohmann::json;
using test::TempDir;
using Ids = std::vector<int32_t>;

const std::string kR = "\xEF\xBF\xBD";     // U+FFFD
const std::string kMeta = "\xE2\x96\x81";  // ▁
constexpr auto kSkip = SkipSpecialTokens::kYes;

BpeTokenizer load_json(const TempDir& dir, const json& tokenizer) {
  dir.write("tokenizer.json", tokenizer.dump());
  return load_tokenizer_json(dir.str());
}

// A byte-level BPE whose ids 0..255 are the bytes, 256 "ab", 257 <|endoftext|>.
json byte_level_tokenizer() {
  const auto [vocab, merges] = test::synthetic_vocab({{"a", "b"}});
  return test::gpt2_style_tokenizer_json(vocab, merges, test::MergeFormat::kPairs);
}

TEST(TokenizerDecodeTest, ByteLevelCutCharactersBecomeOneReplacementPerSubpart) {
  TempDir dir;
  const BpeTokenizer tokenizer = load_json(dir, byte_level_tokenizer());
  const Ids smile = {0xF0, 0x9F, 0x98, 0x80};  // U+1F600's bytes
  EXPECT_EQ(tokenizer.decode(smile), "\xF0\x9F\x98\x80");
  EXPECT_EQ(tokenizer.decode(Ids{'a', 0xF0, 0x9F, 0x98}), "a" + kR);  // cut after 3 of 4 bytes
  EXPECT_EQ(tokenizer.decode(Ids{0x9F, 0x98, 0x80}), kR + kR + kR);   // the other side of a cut
  for (int32_t id : smile) EXPECT_EQ(tokenizer.decode(Ids{id}), kR) << id;  // token by token
  EXPECT_EQ(tokenizer.decode(Ids{0xF0, 0x9F, 257, 256}), kR + "<|endoftext|>ab");
  EXPECT_EQ(tokenizer.decode(Ids{0xE4, 0xBD, 0xA0, 0xF0}), "\xE4\xBD\xA0" + kR);
}

// Llama 2's style (test::sentencepiece_style) with 259 ▁, 260 a, 261 ▁a, then 262 <think>, an
// added token that is not special.
json sentencepiece_with_think() {
  json tokenizer = test::sentencepiece_style({kMeta, "a", kMeta + "a"}, {kMeta + " a"});
  tokenizer["added_tokens"].push_back(
      {{"id", 262}, {"content", "<think>"}, {"special", false}, {"normalized", false}});
  return tokenizer;
}

int32_t byte_token(int byte) { return 3 + byte; }  // <0xNN>

TEST(TokenizerDecodeTest, ByteFallbackRunsThatAreNotUtf8BecomeOneReplacementPerByte) {
  TempDir dir;
  const BpeTokenizer tokenizer = load_json(dir, sentencepiece_with_think());
  const Ids ni = {byte_token(0xE4), byte_token(0xBD), byte_token(0xA0)};  // 你
  EXPECT_EQ(tokenizer.decode(ni), "\xE4\xBD\xA0");
  // One invalid byte spoils the whole run, its valid character included (tokenizers' rule).
  Ids cut = ni;
  cut.push_back(byte_token(0xF0));
  EXPECT_EQ(tokenizer.decode(cut), kR + kR + kR + kR);
  EXPECT_EQ(tokenizer.decode(Ids{261, byte_token(0xF0), byte_token(0x9F), 260}),
            "a" + kR + kR + "a");
  EXPECT_EQ(tokenizer.decode(Ids{byte_token(0x9F)}), kR);
}

TEST(TokenizerDecodeTest, SkipSpecialTokensDropsOnlySpecialAddedTokens) {
  TempDir dir;
  const BpeTokenizer tokenizer = load_json(dir, sentencepiece_with_think());
  EXPECT_EQ(tokenizer.decode(Ids{1, 261, 2}), "<s> a</s>");
  // Without <s>, the decoder's Strip takes the space ▁a starts with.
  EXPECT_EQ(tokenizer.decode(Ids{1, 261, 2}, kSkip), "a");
  EXPECT_EQ(tokenizer.decode(Ids{1, 262, 261, 2}, kSkip), "<think> a");
  EXPECT_EQ(tokenizer.decode(Ids{1, 2}, kSkip), "");
  EXPECT_EQ(tokenizer.decode(Ids{0, 260}), "<unk>a");  // <unk> is special too
  EXPECT_EQ(tokenizer.decode(Ids{0, 260}, kSkip), "a");

  TempDir byte_dir;
  const BpeTokenizer byte_level = load_json(byte_dir, byte_level_tokenizer());
  EXPECT_EQ(byte_level.decode(Ids{'x', 257, 256}, kSkip), "xab");
}

TEST(TokenizerDecodeTest, CleanUpTokenizationAsTransformers) {
  EXPECT_EQ(clean_up_tokenization("Hello , world ! Is it ? Yes . No"),
            "Hello, world! Is it? Yes. No");
  EXPECT_EQ(clean_up_tokenization("I do n't , I 'm , it 's , we 've , they 're"),
            "I don't, I'm, it's, we've, they're");
  EXPECT_EQ(clean_up_tokenization("a ' b"), "a'b");
  // One space goes per replacement; each runs over the last one's result, left to right.
  EXPECT_EQ(clean_up_tokenization("end  ."), "end .");
  EXPECT_EQ(clean_up_tokenization(" . ."), "..");
  EXPECT_EQ(clean_up_tokenization("x ' s"), "x's");        // " ' " first, so " 's" never sees it
  EXPECT_EQ(clean_up_tokenization("a 'b 'd"), "a 'b 'd");  // not a listed contraction
  EXPECT_EQ(clean_up_tokenization(""), "");
}

TEST(TokenizerDecodeTest, DisplayCleansUpOnlyWhenTheConfigAsks) {
  TempDir dir;
  const json tokenizer = byte_level_tokenizer();
  const std::string text = "I do n't know , ab .";
  {
    BpeTokenizer plain = load_json(dir, tokenizer);  // no tokenizer_config.json
    const Ids ids = plain.encode(text);
    EXPECT_FALSE(plain.cleans_up_spaces());
    EXPECT_EQ(plain.decode_for_display(ids), text);
  }
  dir.write(
      "tokenizer_config.json",
      R"({"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": true})");
  BpeTokenizer cleaning = load_json(dir, tokenizer);
  Ids ids = cleaning.encode(text);
  EXPECT_TRUE(cleaning.cleans_up_spaces());
  EXPECT_EQ(cleaning.decode(ids), text);
  EXPECT_EQ(cleaning.decode_for_display(ids), "I don't know, ab.");
  ids.insert(ids.begin() + 1, 257);  // "I<|endoftext|> do n't ..."
  EXPECT_EQ(cleaning.decode_for_display(ids), "I<|endoftext|> don't know, ab.");
  EXPECT_EQ(cleaning.decode_for_display(ids, kSkip), "I don't know, ab.");

  dir.write("tokenizer_config.json", R"({"clean_up_tokenization_spaces": false})");
  EXPECT_EQ(load_json(dir, tokenizer).decode_for_display(ids), cleaning.decode(ids));

  dir.write("tokenizer_config.json", R"({"clean_up_tokenization_spaces": "yes"})");
  try {
    load_json(dir, tokenizer);
    FAIL() << "a string clean_up_tokenization_spaces was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find(dir.file("tokenizer_config.json")), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("clean_up_tokenization_spaces must be true or false"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace zt
