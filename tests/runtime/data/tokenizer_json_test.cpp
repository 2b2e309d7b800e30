// load_tokenizer_json (runtime/data/tokenizer_json.h):
//   - a tokenizer.json built here from data/gpt2's encoder.json and vocab.bpe gives
//     Gpt2Tokenizer's ids on data/text (skipped when either is absent: run
//     scripts/fetch_data.sh), in both merge formats and in the Split + ByteLevel Sequence form
//     Llama 3 uses (with GPT-2's own pattern), and decodes back to the text;
//   - on tiny vocabularies written here (always run): ignore_merges, added tokens (special
//     only under SpecialTokens::kMatch, leftmost-longest), add_prefix_space, a custom split
//     pattern (the other parts: tokenizer_parts_test.cpp);
//   - malformed and unsupported files are refused with one kInput line naming the file and
//     what is wrong.
#include "runtime/data/tokenizer_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data/tokenizer.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::alphabet;
using test::alphabet_char;
using test::MergeFormat;
using test::TempDir;

const std::string kVocabDir = std::string(ZT_SOURCE_DIR) + "/data/gpt2";
const std::string kTextDir = std::string(ZT_SOURCE_DIR) + "/data/text";
// How much of data/text the corpus comparison reads: all its .txt files (Moby-Dick and the
// State of the Union addresses, 12 MB, 2.4M tokens: about 5 s on one core).
constexpr size_t kCorpusBytes = size_t{64} << 20;

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// data/text's .txt files in path order, concatenated until kCorpusBytes.
std::string read_corpus() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(kTextDir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".txt") files.push_back(entry);
  }
  std::sort(files.begin(), files.end());
  std::string corpus;
  for (const auto& path : files) {
    if (corpus.size() >= kCorpusBytes) break;
    corpus += file_bytes(path);
  }
  return corpus;
}

// The index of the first difference, or the shorter size.
size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
         a.begin();
}

class TokenizerJsonGpt2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kVocabDir + "/encoder.json") || !fs::exists(kVocabDir + "/vocab.bpe") ||
        !fs::is_directory(kTextDir)) {
      return;
    }
    gpt2_ = std::make_unique<Gpt2Tokenizer>(kVocabDir);
    vocab_ = json::parse(file_bytes(kVocabDir + "/encoder.json"));
    std::ifstream bpe(kVocabDir + "/vocab.bpe");
    std::string line;
    std::getline(bpe, line);  // "#version: 0.2"
    while (std::getline(bpe, line)) {
      if (line.empty()) continue;
      const size_t space = line.find(' ');
      merges_.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    corpus_ = read_corpus();
    gpt2_ids_ = gpt2_->encode(corpus_);
  }
  static void TearDownTestSuite() { gpt2_.reset(); }
  void SetUp() override {
    if (!gpt2_) {
      GTEST_SKIP() << kVocabDir << " or " << kTextDir << " is absent; run scripts/fetch_data.sh";
    }
  }

  // Writes `tokenizer` as dir/tokenizer.json and loads it.
  static BpeTokenizer load(const TempDir& dir, const json& tokenizer) {
    dir.write("tokenizer.json", tokenizer.dump());
    return load_tokenizer_json(dir.file("tokenizer.json"));
  }

  // The ids of `tokenizer` on the first `bytes` of the corpus equal Gpt2Tokenizer's.
  static void expect_gpt2_ids(BpeTokenizer& tokenizer, size_t bytes) {
    const std::string text = corpus_.substr(0, bytes);
    const std::vector<int32_t> expected = bytes >= corpus_.size() ? gpt2_ids_ : gpt2_->encode(text);
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids.size(), expected.size());
    const size_t at = first_difference(ids, expected);
    EXPECT_EQ(at, std::min(ids.size(), expected.size())) << "first different token at " << at;
    std::cout << "[ compared ] " << ids.size() << " tokens of " << text.size() << " bytes\n";
  }

  static std::unique_ptr<Gpt2Tokenizer> gpt2_;
  static json vocab_;
  static std::vector<std::pair<std::string, std::string>> merges_;
  static std::string corpus_;
  static std::vector<int32_t> gpt2_ids_;
};
std::unique_ptr<Gpt2Tokenizer> TokenizerJsonGpt2Test::gpt2_;
json TokenizerJsonGpt2Test::vocab_;
std::vector<std::pair<std::string, std::string>> TokenizerJsonGpt2Test::merges_;
std::string TokenizerJsonGpt2Test::corpus_;
std::vector<int32_t> TokenizerJsonGpt2Test::gpt2_ids_;

TEST_F(TokenizerJsonGpt2Test, SameIdsAsGpt2OnCorpus) {
  TempDir dir;
  BpeTokenizer tokenizer =
      load(dir, test::gpt2_style_tokenizer_json(vocab_, merges_, MergeFormat::kStrings));
  EXPECT_EQ(tokenizer.vocab_size(), 50257u);
  EXPECT_EQ(tokenizer.token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tokenizer.token_id(" world"), 995);
  expect_gpt2_ids(tokenizer, corpus_.size());
  EXPECT_EQ(tokenizer.decode(gpt2_ids_), corpus_);
}

TEST_F(TokenizerJsonGpt2Test, PairMergesSameIds) {
  TempDir dir;
  BpeTokenizer tokenizer =
      load(dir, test::gpt2_style_tokenizer_json(vocab_, merges_, MergeFormat::kPairs));
  expect_gpt2_ids(tokenizer, size_t{1} << 20);
}

TEST_F(TokenizerJsonGpt2Test, SplitThenByteLevelSequenceSameIds) {
  TempDir dir;
  json tokenizer = test::gpt2_style_tokenizer_json(vocab_, merges_, MergeFormat::kPairs);
  tokenizer["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers",
                                 {{{"type", "Split"},
                                   {"pattern", {{"Regex", std::string(kGpt2SplitPattern)}}},
                                   {"behavior", "Isolated"},
                                   {"invert", false}},
                                  {{"type", "ByteLevel"},
                                   {"add_prefix_space", false},
                                   {"trim_offsets", false},
                                   {"use_regex", false}}}}};
  BpeTokenizer loaded = load(dir, tokenizer);
  expect_gpt2_ids(loaded, size_t{1} << 20);
}

TEST_F(TokenizerJsonGpt2Test, EndOfTextMatchedOnlyWhenAsked) {
  TempDir dir;
  BpeTokenizer tokenizer =
      load(dir, test::gpt2_style_tokenizer_json(vocab_, merges_, MergeFormat::kStrings));
  const std::string text = "Hello<|endoftext|> world";
  EXPECT_EQ(tokenizer.encode(text), gpt2_->encode(text));
  EXPECT_EQ(tokenizer.encode(text),
            (std::vector<int32_t>{15496, 27, 91, 437, 1659, 5239, 91, 29, 995}));
  EXPECT_EQ(tokenizer.encode(text, SpecialTokens::kMatch),
            (std::vector<int32_t>{15496, 50256, 995}));
  EXPECT_EQ(gpt2_->encode(text, SpecialTokens::kMatch),
            tokenizer.encode(text, SpecialTokens::kMatch));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, SpecialTokens::kMatch)), text);
}

// --- Tiny vocabularies written here. -------------------------------------------------------

// Writes `tokenizer` to a file of `dir` and loads it.
BpeTokenizer load_json(const TempDir& dir, const json& tokenizer) {
  dir.write("tokenizer.json", tokenizer.dump(1));
  return load_tokenizer_json(dir.str());  // the directory form
}

// Bytes, then the merges' results in order, then <|endoftext|> (tokenizer_test_util.h).
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& raw_merges) {
  auto [vocab, merges] = test::synthetic_vocab(raw_merges);
  return test::gpt2_style_tokenizer_json(vocab, merges, MergeFormat::kStrings);
}

std::vector<int32_t> byte_ids(std::string_view text) {
  return std::vector<int32_t>(text.begin(), text.end());  // bytes are ids 0..255 here (ASCII)
}

TEST(TokenizerJsonTinyTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  TempDir dir;
  // 256 "he", 257 "ll", 258 "hell"; then "hello" (259), which no merge makes; 260 <|endoftext|>
  json tokenizer = tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}});
  tokenizer["model"]["vocab"].erase("<|endoftext|>");
  tokenizer["added_tokens"] = json::array();
  tokenizer["model"]["vocab"]["hello"] = 259;

  BpeTokenizer merging = load_json(dir, tokenizer);
  EXPECT_EQ(merging.encode("hello"), (std::vector<int32_t>{258, 'o'}));

  tokenizer["model"]["ignore_merges"] = true;
  BpeTokenizer ignoring = load_json(dir, tokenizer);
  EXPECT_EQ(ignoring.encode("hello"), (std::vector<int32_t>{259}));
  // Words not in the vocabulary still merge; " hello" is one word, not in the vocabulary.
  EXPECT_EQ(ignoring.encode("hellx"), (std::vector<int32_t>{258, 'x'}));
  EXPECT_EQ(ignoring.encode("hello hello"), (std::vector<int32_t>{259, ' ', 258, 'o'}));
  EXPECT_EQ(ignoring.decode(std::vector<int32_t>{259}), "hello");
}

TEST(TokenizerJsonTinyTest, AddedTokensSpecialOnlyWhenAsked) {
  TempDir dir;
  json tokenizer = tiny_tokenizer({{"a", "b"}});  // 256 "ab", 257 <|endoftext|>
  // Added tokens beyond the vocabulary, as Llama 3 ships its specials: 258..261.
  auto add = [&](int id, const std::string& content, bool special) {
    tokenizer["added_tokens"].push_back({{"id", id},
                                         {"content", content},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", special}});
  };
  add(258, "<|eot|>", true);
  add(259, "<|eo", true);    // a prefix of <|eot|>: the longest match wins
  add(260, "<sep>", false);  // not special: always matched
  add(261, "b<", true);      // starts earlier than <|eot|> in "ab<|eot|>": leftmost wins
  BpeTokenizer loaded = load_json(dir, tokenizer);
  EXPECT_EQ(loaded.vocab_size(), 262u);

  const std::string text = "ab<|eot|>x<sep>y<|eo";
  std::vector<int32_t> as_text = {256};
  for (int32_t id : byte_ids("<|eot|>x")) as_text.push_back(id);
  as_text.push_back(260);
  for (int32_t id : byte_ids("y<|eo")) as_text.push_back(id);
  EXPECT_EQ(loaded.encode(text), as_text);
  EXPECT_EQ(loaded.encode(text, SpecialTokens::kMatch),
            (std::vector<int32_t>{'a', 261, '|', 'e', 'o', 't', '|', '>', 'x', 260, 'y', 259}));
  EXPECT_EQ(loaded.encode("x<|eot|>", SpecialTokens::kMatch), (std::vector<int32_t>{'x', 258}));
  EXPECT_EQ(loaded.decode(std::vector<int32_t>{258, 259, 260, 261, 257}),
            "<|eot|><|eo<sep>b<<|endoftext|>");

  EXPECT_EQ(loaded.token_id("<|eot|>"), 258);
  EXPECT_EQ(loaded.token_id("<|endoftext|>"), 257);
  EXPECT_EQ(loaded.token_id("ab"), 256);
  EXPECT_EQ(loaded.token_id("a"), 'a');
  EXPECT_EQ(loaded.token_id("abc"), std::nullopt);
}

TEST(TokenizerJsonTinyTest, AddPrefixSpace) {
  TempDir dir;
  json tokenizer = tiny_tokenizer({{" ", "a"}});  // 256 " a"
  BpeTokenizer without = load_json(dir, tokenizer);
  EXPECT_EQ(without.encode("a a"), (std::vector<int32_t>{'a', 256}));
  tokenizer["pre_tokenizer"]["add_prefix_space"] = true;
  BpeTokenizer with = load_json(dir, tokenizer);
  EXPECT_EQ(with.encode("a a"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(with.encode(" a"), (std::vector<int32_t>{256}));  // already has one
  // Each segment between added tokens gets its own space.
  EXPECT_EQ(with.encode("a<|endoftext|>a", SpecialTokens::kMatch),
            (std::vector<int32_t>{256, 257, 256}));
}

TEST(TokenizerJsonTinyTest, SplitPatternDecidesTheWords) {
  TempDir dir;
  // 256 "12", 257 "34", 258 "123", 259 "45": "3 4" outranks "12 3".
  json tokenizer = tiny_tokenizer({{"1", "2"}, {"3", "4"}, {"12", "3"}, {"4", "5"}});
  BpeTokenizer gpt2_pattern = load_json(dir, tokenizer);
  EXPECT_EQ(gpt2_pattern.encode("12345"), (std::vector<int32_t>{256, 257, '5'}));

  // Llama 3's digit rule: at most three digits a word.
  tokenizer["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", R"(\p{N}{1,3}|[^\p{N}]+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  BpeTokenizer three_digits = load_json(dir, tokenizer);
  EXPECT_EQ(three_digits.encode("12345"), (std::vector<int32_t>{258, 259}));
  EXPECT_EQ(three_digits.decode(three_digits.encode("x12345 \xff")), "x12345 \xEF\xBF\xBD");

  // A literal split: "3" is a piece of its own, so neither "34" nor "123" forms.
  tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "3"}};
  BpeTokenizer literal = load_json(dir, tokenizer);
  EXPECT_EQ(literal.encode("12345"), (std::vector<int32_t>{256, '3', 259}));
}

// --- Refusals. ------------------------------------------------------------------------------

void expect_refused(const TempDir& dir, const std::string& contents, const std::string& needle) {
  dir.write("tokenizer.json", contents);
  const std::string path = dir.file("tokenizer.json");
  try {
    load_tokenizer_json(path);
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

TEST(TokenizerJsonRefusalTest, UnsupportedChoicesNamed) {
  TempDir dir;
  const json good = tiny_tokenizer({{"a", "b"}, {"ab", "c"}});  // 256 "ab", 257 "abc", 258 eot
  auto refused = [&](const std::function<void(json&)>& change, const std::string& needle) {
    json tokenizer = good;
    change(tokenizer);
    SCOPED_TRACE(needle);
    expect_refused(dir, tokenizer.dump(), needle);
  };
  refused([](json& t) { t["model"]["type"] = "WordPiece"; },
          "model.type 'WordPiece' is not supported; only BPE (Unigram, WordPiece and WordLevel "
          "models are not read)");
  refused([](json& t) { t["model"]["type"] = "Unigram"; }, "model.type 'Unigram'");
  refused([](json& t) { t["model"]["type"] = "WordLevel"; }, "model.type 'WordLevel'");
  refused(
      [](json& t) {
        t["normalizer"] = {{"type", "BertNormalizer"}};
      },
      "normalizer.type 'BertNormalizer' is not supported");
  refused(
      [](json& t) {
        t["normalizer"] = {{"type", "Sequence"},
                           {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
      },
      "normalizer.normalizers[1].type 'Precompiled' is not supported");
  refused([](json& t) { t["model"]["dropout"] = 0.1; }, "model.dropout 0.1 is not supported");
  refused([](json& t) { t["model"]["unk_token"] = "<unk>"; },
          "model.unk_token '<unk>' is not in model.vocab");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
      },
      "pre_tokenizer.type 'BertPreTokenizer' is not supported");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "ByteLevel"}, {"add_prefix_space", false}},
                                {{"type", "Digits"}, {"individual_digits", true}}}}};
      },
      "pre_tokenizer.pretokenizers[1] (a Digits step) follows ByteLevel");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Split"},
                                 {"pattern", {{"Regex", "a"}}},
                                 {"behavior", "Sideways"},
                                 {"invert", false}},
                                {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
      },
      "pre_tokenizer.pretokenizers[0].behavior 'Sideways' is not one of Isolated, Removed");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Glob", "a"}}}};
      },
      "pre_tokenizer.pattern must hold \"Regex\" or \"String\"");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
      },
      "pre_tokenizer.prepend_scheme 'sometimes' is not one of always, first and never");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
      },
      "pre_tokenizer.replacement must be one character");
  refused(
      [](json& t) {
        t["decoder"] = {{"type", "WordPiece"}};
      },
      "decoder.type 'WordPiece' is not supported");
  refused(
      [](json& t) {
        t["decoder"] = {{"type", "Sequence"},
                        {"decoders", {{{"type", "Strip"}, {"content", "  "}, {"start", 1}}}}};
      },
      "decoder.decoders[0].content must be one character");
  refused(
      [](json& t) {
        t["post_processor"] = {{"type", "Magic"}};
      },
      "post_processor.type 'Magic' is not supported");
  refused(
      [](json& t) {
        t["post_processor"] = {{"type", "TemplateProcessing"},
                               {"single",
                                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                               {"special_tokens", json::object()}};
      },
      "post_processor.single[0].SpecialToken.id '<s>' is not in special_tokens");
  refused(
      [](json& t) {
        t["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {258}}, {"tokens", {"<s>"}}}}}}};
      },
      "post_processor.single has no $A");
  refused(
      [](json& t) {
        t["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999}}, {"tokens", {"<s>"}}}}}}};
      },
      "post_processor.special_tokens.<s>.ids[0] 999 is not a token id");
  // The string form is a shorthand of tokenizers' constructors, which its readers refuse too
  // (tests/e2e/hf_tokenizers.sh checks the Rust one).
  refused(
      [](json& t) {
        t["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single", "<s> $A"},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {258}}, {"tokens", {"<s>"}}}}}}};
      },
      "post_processor.single is a string (\"<s> $A\"); a tokenizer.json spells the template as a "
      "list of {\"SpecialToken\"} and {\"Sequence\"} pieces, and Hugging Face's tokenizers "
      "refuse it too");
  refused([](json& t) { t["added_tokens"][0]["lstrip"] = "yes"; },
          "added_tokens[0].lstrip must be true or false");
}

TEST(TokenizerJsonRefusalTest, MalformedFilesNamed) {
  TempDir dir;
  const json good = tiny_tokenizer({{"a", "b"}, {"ab", "c"}});  // 256 "ab", 257 "abc", 258 eot
  auto refused = [&](const std::function<void(json&)>& change, const std::string& needle) {
    json tokenizer = good;
    change(tokenizer);
    SCOPED_TRACE(needle);
    expect_refused(dir, tokenizer.dump(), needle);
  };
  {
    BpeTokenizer loaded = load_json(dir, good);  // the unchanged file loads
    EXPECT_EQ(loaded.encode("abc"), (std::vector<int32_t>{257}));
  }
  refused([](json& t) { t["model"].erase("vocab"); }, "model.vocab is missing");
  refused([](json& t) { t["model"]["vocab"] = json::array(); }, "model.vocab must be an object");
  refused([](json& t) { t["model"].erase("merges"); }, "model.merges is missing");
  refused([](json& t) { t.erase("model"); }, ": model is missing");
  refused([](json& t) { t["model"]["vocab"]["ab"] = "x"; },
          "model.vocab[\"ab\"] must be a token id");
  refused([](json& t) { t["model"]["vocab"]["ab"] = 258; }, "ids must be unique");
  refused([](json& t) { t["model"]["vocab"]["ab"] = 300; }, "has no token with id 256");
  refused([](json& t) { t["model"]["vocab"]["a b"] = 259; },
          "model.vocab[\"a b\"] is not in the byte-level alphabet");
  refused([](json& t) { t["model"]["merges"][1] = "ab c d"; },
          "model.merges[1]: \"ab c d\": expected two tokens separated by one space");
  refused([](json& t) { t["model"]["merges"][1] = 7; }, "model.merges[1]: 7: expected");
  refused([](json& t) { t["model"]["merges"][1] = "zz c"; },
          "model.merges[1]: names \"zz\", which is not in model.vocab");
  refused(
      [](json& t) {
        t["model"]["merges"][1] = json::array({"a", "c"});
      },
      "model.merges[1]: makes \"ac\" from \"a\" and \"c\", which is not in model.vocab");
  refused([](json& t) { t["model"]["ignore_merges"] = "yes"; },
          "model.ignore_merges must be true or false");
  refused([](json& t) { t["added_tokens"][0]["content"] = "x"; },
          "added_tokens[0] has id 258, which model.vocab gives to \"<|endoftext|>\"");
  refused([](json& t) { t["added_tokens"].push_back(t["added_tokens"][0]); },
          "added_tokens[1].id 258 is also added_tokens[0]'s id");
  refused([](json& t) { t["added_tokens"][0].erase("special"); },
          "added_tokens[0].special is missing");
  // A byte without a token: byte 'z' (122) becomes an added token, ids stay contiguous.
  refused(
      [](json& t) {
        t["model"]["vocab"].erase("z");
        t["added_tokens"].push_back({{"id", 122}, {"content", "<z>"}, {"special", true}});
      },
      "has no token for byte 122");
  refused(
      [](json& t) {
        t["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Split"},
                                 {"pattern", {{"Regex", "(a"}}},
                                 {"behavior", "Isolated"},
                                 {"invert", false}},
                                {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
      },
      "pre_tokenizer.pretokenizers[0].pattern.Regex: PCRE2 rejects the pattern at offset 2: "
      "missing closing parenthesis");

  expect_refused(dir, good.dump().substr(0, 100), "is not valid JSON");
  expect_refused(dir, "[1, 2]", "the top level must be an object");
  fs::remove(dir.file("tokenizer.json"));
  try {
    load_tokenizer_json(dir.str());
    ADD_FAILURE() << "no error for a directory without tokenizer.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("cannot open tokenizer file " + dir.file("tokenizer.json")),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace zt
