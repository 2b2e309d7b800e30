// The parts of a tokenizer.json (runtime/data/normalizer.h, pre_tokenizer.h, decoder.h) on
// their own, and the BPE model's options and post-processing through load_tokenizer_json:
//   - each normalizer (the Unicode forms, Lowercase, Strip, StripAccents, Prepend, Replace,
//     Sequence) on text where it matters;
//   - each pre-tokenizer, Split with every behavior and invert, on Hugging Face's documented
//     examples ("the-final--countdown");
//   - each decoder, and Llama 2's decoder Sequence;
//   - byte_fallback, unk_token with and without fuse_unk, continuing_subword_prefix and
//     end_of_word_suffix, the heap merge of long words, added tokens' lstrip, rstrip,
//     single_word and normalized, TemplateProcessing and tokenizer_config.json's add_bos_token /
//     add_eos_token.
// Refusals of the parts: tokenizer_json_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data/decoder.h"
#include "runtime/data/normalizer.h"
#include "runtime/data/pre_tokenizer.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

using nlohmann::json;
using test::sentencepiece_style;
using test::TempDir;

const JsonFile kFile("test.json");

std::string normalized(const json& config, std::string_view text) {
  return read_normalizer(kFile, config, "normalizer").normalize(text);
}

std::vector<std::string> words(const json& config, std::string_view text, bool at_start = true) {
  Words out;
  read_pre_tokenizer(kFile, config, "pre_tokenizer").split(text, at_start, out);
  std::vector<std::string> result;
  for (size_t i = 0; i < out.spans.size(); ++i) result.emplace_back(out.word(i));
  return result;
}

std::string decoded(const json& config, std::vector<std::string> tokens, bool bytes = false) {
  return read_decoder(kFile, config, "decoder", bytes).decode(std::move(tokens));
}

using Strings = std::vector<std::string>;

TEST(NormalizerTest, UnicodeForms) {
  const std::string composed = "caf\xC3\xA9";     // café, é one code point
  const std::string decomposed = "cafe\xCC\x81";  // e + U+0301
  EXPECT_EQ(normalized({{"type", "NFC"}}, decomposed), composed);
  EXPECT_EQ(normalized({{"type", "NFD"}}, composed), decomposed);
  // Compatibility forms also fold ligatures and full-width forms.
  EXPECT_EQ(normalized({{"type", "NFKC"}}, "\xEF\xAC\x81 \xEF\xBC\xA1\xEF\xBC\x91"), "fi A1");
  EXPECT_EQ(normalized({{"type", "NFKD"}}, "\xEF\xAC\x81" + composed), "fi" + decomposed);
  EXPECT_EQ(normalized({{"type", "NFC"}}, "\xEF\xAC\x81"), "\xEF\xAC\x81");
  // Bytes that are not UTF-8 pass through; the text around them is still normalised.
  EXPECT_EQ(normalized({{"type", "NFC"}}, decomposed + "\xFF" + decomposed),
            composed + "\xFF" + composed);
  EXPECT_EQ(normalized(nullptr, decomposed), decomposed);
}

TEST(NormalizerTest, LowercaseStripAndAccents) {
  EXPECT_EQ(normalized({{"type", "Lowercase"}}, "HeLLo \xC3\x84 \xCE\xA3 \xC4\xB0"),
            "hello \xC3\xA4 \xCF\x83 i\xCC\x87");   // Ä ä, Σ σ, İ i + U+0307
  const std::string text = " \t a b \xE3\x80\x80";  // ends in U+3000
  EXPECT_EQ(normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, text),
            "a b");
  EXPECT_EQ(normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, text),
            "a b \xE3\x80\x80");
  EXPECT_EQ(normalized({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, text),
            " \t a b");
  // StripAccents removes marks, so it follows NFD.
  const json accents = {{"type", "Sequence"},
                        {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}};
  EXPECT_EQ(normalized(accents, "caf\xC3\xA9 na\xC3\xAFve \xC3\x85"), "cafe naive A");
  EXPECT_EQ(normalized({{"type", "StripAccents"}}, "caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(NormalizerTest, PrependAndReplaceAsLlama2) {
  const json llama2 = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(normalized(llama2, "Hi  there"), "\xE2\x96\x81Hi\xE2\x96\x81\xE2\x96\x81there");
  EXPECT_EQ(normalized(llama2, ""), "");  // nothing to prepend to
  const json regex = {{"type", "Replace"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"content", "_"}};
  EXPECT_EQ(normalized(regex, "a \t b\n\nc"), "a_b_c");
}

TEST(PreTokenizerTest, SplitBehaviors) {
  auto split = [](std::string_view behavior, bool invert) {
    return json{{"type", "Split"},
                {"pattern", {{"String", "-"}}},
                {"behavior", behavior},
                {"invert", invert}};
  };
  const std::string text = "the-final--countdown";
  EXPECT_EQ(words(split("Removed", false), text), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(words(split("Isolated", false), text),
            (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(words(split("MergedWithPrevious", false), text),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(words(split("MergedWithNext", false), text),
            (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(words(split("Contiguous", false), text),
            (Strings{"the", "-", "final", "--", "countdown"}));
  // invert: the text between matches is what the behavior applies to.
  EXPECT_EQ(words(split("Removed", true), text), (Strings{"-", "-", "-"}));
  EXPECT_EQ(words(split("MergedWithPrevious", true), text),
            (Strings{"the", "-final", "-", "-countdown"}));
  const json regex = {
      {"type", "Split"}, {"pattern", {{"Regex", R"(\d+)"}}}, {"behavior", "Isolated"}};
  EXPECT_EQ(words(regex, "ab12cd345"), (Strings{"ab", "12", "cd", "345"}));
}

TEST(PreTokenizerTest, CharacterClasses) {
  EXPECT_EQ(words({{"type", "Digits"}, {"individual_digits", true}}, "Call 123 please"),
            (Strings{"Call ", "1", "2", "3", " please"}));
  EXPECT_EQ(words({{"type", "Digits"}, {"individual_digits", false}}, "Call 123 please"),
            (Strings{"Call ", "123", " please"}));
  EXPECT_EQ(words({{"type", "Punctuation"}}, "Hey friend!     How are you?!?"),
            (Strings{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(words({{"type", "Punctuation"}, {"behavior", "Contiguous"}}, "Hi?!? x"),
            (Strings{"Hi", "?!?", " x"}));
  EXPECT_EQ(words({{"type", "Whitespace"}}, "Hey man!! caf\xC3\xA9\t_x"),
            (Strings{"Hey", "man", "!!", "caf\xC3\xA9", "_x"}));
  EXPECT_EQ(words({{"type", "WhitespaceSplit"}}, " Hey\xC2\xA0man!\n"),
            (Strings{"Hey", "man!"}));  // U+00A0 is whitespace too
  const json sequence = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(words(sequence, "a12 b3"), (Strings{"a", "1", "2", "b", "3"}));
}

TEST(PreTokenizerTest, Metaspace) {
  const std::string m = "\xE2\x96\x81";  // U+2581
  const json always = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}};
  EXPECT_EQ(words(always, "Hey friend!"), (Strings{m + "Hey", m + "friend!"}));
  EXPECT_EQ(words(always, "  Hey"), (Strings{m, m + "Hey"}));
  json unsplit = always;
  unsplit["split"] = false;
  EXPECT_EQ(words(unsplit, "Hey friend!"), (Strings{m + "Hey" + m + "friend!"}));
  const json never = {{"type", "Metaspace"}, {"prepend_scheme", "never"}};
  EXPECT_EQ(words(never, "Hey friend!"), (Strings{"Hey", m + "friend!"}));
  // first: only the text that starts the input (no added token before it).
  const json first = {{"type", "Metaspace"}, {"prepend_scheme", "first"}};
  EXPECT_EQ(words(first, "Hey you", true), (Strings{m + "Hey", m + "you"}));
  EXPECT_EQ(words(first, "Hey you", false), (Strings{"Hey", m + "you"}));
  // Older files: add_prefix_space instead of prepend_scheme.
  EXPECT_EQ(words({{"type", "Metaspace"}, {"add_prefix_space", false}}, "a b"),
            (Strings{"a", m + "b"}));
}

TEST(PreTokenizerTest, ByteLevel) {
  const json with_regex = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  EXPECT_EQ(words(with_regex, "Hello  world's"), (Strings{" Hello", " ", " world", "'s"}));
  EXPECT_EQ(words(with_regex, " x"), (Strings{" x"}));  // already has its space
  const json without = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(words(without, "Hello world"), (Strings{"Hello world"}));
  EXPECT_TRUE(read_pre_tokenizer(kFile, without, "p").byte_level());
  EXPECT_FALSE(read_pre_tokenizer(kFile, {{"type", "Whitespace"}}, "p").byte_level());
}

TEST(DecoderTest, EachStep) {
  EXPECT_EQ(decoded({{"type", "ByteFallback"}},
                    {"<0x61>", "<0xE2>", "<0x96>", "<0x81>", "b", "<0xFF>", "<0x41>"}),
            "a\xE2\x96\x81"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");  // 0xFF 0x41 is not UTF-8: one U+FFFD per byte
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(decoded({{"type", "Metaspace"}}, {m + "Hey", m + "friend!"}), "Hey friend!");
  EXPECT_EQ(decoded({{"type", "Metaspace"}, {"prepend_scheme", "never"}}, {m + "Hey", m + "x"}),
            " Hey x");
  EXPECT_EQ(decoded({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}},
                    {" a ", "  b  ", "c"}),
            "a b c");
  EXPECT_EQ(decoded({{"type", "Replace"}, {"pattern", {{"Regex", "_+"}}}, {"content", " "}},
                    {"a__b", "_c"}),
            "a b c");
  // ByteLevel reads GPT-2's alphabet back when the model's tokens are not already bytes.
  EXPECT_EQ(decoded({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "\xC4\x8A"}),
            "Hello world\n");
  EXPECT_EQ(decoded({{"type", "ByteLevel"}}, {"a", " b"}, /*bytes=*/true), "a b");
  EXPECT_EQ(decoded(nullptr, {"a", "b"}), "ab");
}

TEST(DecoderTest, Llama2Sequence) {
  const std::string m = "\xE2\x96\x81";
  const json llama2 = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decoded(llama2, {m + "Hello", m + "w", "or", "ld", "<0xE2>", "<0x82>", "<0xAC>"}),
            "Hello world\xE2\x82\xAC");
}

// --- The model, added tokens and post-processing through load_tokenizer_json. ---------------

BpeTokenizer load_json(const TempDir& dir, const json& tokenizer) {
  dir.write("tokenizer.json", tokenizer.dump());
  return load_tokenizer_json(dir.str());
}

using Ids = std::vector<int32_t>;

TEST(BpeModelTest, ByteFallbackAndPostProcessing) {
  TempDir dir;
  const std::string m = "\xE2\x96\x81";
  // 259 ▁, 260 a, 261 b, 262 ▁a, 263 ab, 264 ▁ab
  BpeTokenizer tokenizer = load_json(
      dir, sentencepiece_style({m, "a", "b", m + "a", "ab", m + "ab"}, {m + " a", m + "a b"}));
  EXPECT_EQ(tokenizer.encode("ab"), (Ids{264}));
  EXPECT_EQ(tokenizer.encode("ab b"), (Ids{264, 259, 261}));
  // € is not in the vocabulary: its three bytes' tokens.
  EXPECT_EQ(tokenizer.encode("a\xE2\x82\xAC"), (Ids{262, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("a\xE2\x82\xAC b")), "a\xE2\x82\xAC b");
  EXPECT_EQ(tokenizer.encode("ab", SpecialTokens::kMatch, AddSpecialTokens::kYes), (Ids{1, 264}));
  EXPECT_EQ(tokenizer.prefix_ids(), (Ids{1}));
  EXPECT_TRUE(tokenizer.suffix_ids().empty());
  // Each segment between added tokens is normalised on its own: "▁" before "b" too.
  EXPECT_EQ(tokenizer.encode("a</s>b", SpecialTokens::kMatch), (Ids{262, 2, 259, 261}));
  EXPECT_EQ(tokenizer.token_id(m + "ab"), 264);
}

TEST(BpeModelTest, UnknownTokensFusedOrNot) {
  TempDir dir;
  json config = sentencepiece_style({"\xE2\x96\x81", "a"}, {});
  config["model"]["byte_fallback"] = false;
  config["normalizer"] = nullptr;
  BpeTokenizer fused = load_json(dir, config);
  EXPECT_EQ(fused.encode("axya"), (Ids{260, 0, 260}));
  config["model"]["fuse_unk"] = false;
  BpeTokenizer unfused = load_json(dir, config);
  EXPECT_EQ(unfused.encode("axya"), (Ids{260, 0, 0, 260}));
  config["model"]["unk_token"] = nullptr;
  BpeTokenizer dropping = load_json(dir, config);
  EXPECT_EQ(dropping.encode("axya"), (Ids{260, 260}));
}

TEST(BpeModelTest, SubwordPrefixAndWordSuffix) {
  TempDir dir;
  json config =
      sentencepiece_style({"a", "##b", "##c", "##bc", "ab", "abc", "c</w>", "b</w>", "ab</w>"},
                          {"##b ##c", "a ##b", "a ##bc"});
  config["normalizer"] = nullptr;
  config["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  config["model"]["continuing_subword_prefix"] = "##";
  BpeTokenizer prefixed = load_json(dir, config);
  // "abc": a ##b ##c, then ##b ##c -> ##bc (rank 0), then a ##bc -> abc.
  EXPECT_EQ(prefixed.encode("abc ab"), (Ids{264, 263}));
  config["model"]["continuing_subword_prefix"] = nullptr;
  config["model"]["end_of_word_suffix"] = "</w>";
  config["model"]["merges"] = {"a b</w>"};
  BpeTokenizer suffixed = load_json(dir, config);
  EXPECT_EQ(suffixed.encode("ab c"), (Ids{267, 265}));  // ab</w>, c</w>
}

TEST(BpeModelTest, LongWordsMergeAsShortOnes) {
  TempDir dir;
  // 259 a, 260 aa, 261 aaaa, 262 b, 263 ab
  json config = sentencepiece_style({"a", "aa", "aaaa", "b", "ab"}, {"a a", "aa aa", "a b"});
  config["normalizer"] = nullptr;
  BpeTokenizer tokenizer = load_json(dir, config);
  // Far past the heap's threshold: every "a a" first, so no "a" is left for "a b".
  const std::string word = std::string(402, 'a') + "b";
  Ids expected(100, 261);
  expected.push_back(260);
  expected.push_back(262);
  EXPECT_EQ(tokenizer.encode(word), expected);
  EXPECT_EQ(tokenizer.encode("aaaaab"), (Ids{261, 263}));
  EXPECT_EQ(tokenizer.encode("aaaaaaab"), (Ids{261, 260, 263}));
  EXPECT_EQ(tokenizer.encode(std::string(99, 'a')), tokenizer.encode(std::string(99, 'a')));
  Ids long_odd(24, 261);
  long_odd.push_back(260);
  long_odd.push_back(259);
  EXPECT_EQ(tokenizer.encode(std::string(99, 'a')), long_odd);
}

TEST(BpeModelTest, AddedTokenOptions) {
  TempDir dir;
  json config = sentencepiece_style({"a", "b", " "}, {});  // 259 a, 260 b, 261 " "
  auto add = [&](int id, const std::string& content, json options) {
    options["id"] = id;
    options["content"] = content;
    options["special"] = false;
    config["added_tokens"].push_back(options);
    config["model"]["vocab"][content] = id;
  };
  add(262, "<L>", {{"lstrip", true}});
  add(263, "<R>", {{"rstrip", true}});
  add(264, "ab", {{"single_word", true}});
  add(265, "X", {{"normalized", true}});  // matched after the normalizer, as "x"
  config["normalizer"] = {{"type", "Lowercase"}};
  BpeTokenizer tokenizer = load_json(dir, config);
  EXPECT_EQ(tokenizer.encode("a  <L>b"), (Ids{259, 262, 260}));
  EXPECT_EQ(tokenizer.encode("a<R> \t b"), (Ids{259, 263, 260}));
  EXPECT_EQ(tokenizer.encode("ab a ab"), (Ids{264, 261, 259, 261, 264}));
  EXPECT_EQ(tokenizer.encode("aab"), (Ids{259, 259, 260}));  // not a single word there
  // "X" is normalised to "x", and so is the text: every "x" or "X" is the added token.
  EXPECT_EQ(tokenizer.encode("aXx"), (Ids{259, 265, 265}));
}

TEST(BpeModelTest, TokenizerConfigOverridesLlamaTemplates) {
  TempDir dir;
  json config = sentencepiece_style({"a"}, {});  // 259 a
  config["normalizer"] = nullptr;
  dir.write("tokenizer_config.json",
            json{{"tokenizer_class", "LlamaTokenizer"},
                 {"add_bos_token", false},
                 {"add_eos_token", true},
                 {"bos_token", "<s>"},
                 {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}}}
                .dump());
  BpeTokenizer eos_only = load_json(dir, config);
  EXPECT_EQ(eos_only.encode("a", SpecialTokens::kMatch, AddSpecialTokens::kYes), (Ids{259, 2}));
  // Another class keeps tokenizer.json's template.
  dir.write("tokenizer_config.json",
            json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"add_eos_token", true}}.dump());
  BpeTokenizer kept = load_json(dir, config);
  EXPECT_EQ(kept.encode("a", SpecialTokens::kMatch, AddSpecialTokens::kYes), (Ids{1, 259}));
  dir.write("tokenizer_config.json",
            json{{"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<nope>"}}.dump());
  try {
    load_json(dir, config);
    ADD_FAILURE() << "no error for a bos_token missing from the vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tokenizer_config.json: bos_token '<nope>' is not a token"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace zt
