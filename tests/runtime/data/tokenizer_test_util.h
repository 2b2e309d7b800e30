// Helpers for the tokenizer tests (tokenizer_test.cpp, tokenizer_json_test.cpp,
// tokenizer_parts_test.cpp, tokenizer_decode_test.cpp, tests/e2e/zt_prep.sh): GPT-2's byte
// alphabet re-stated independently of runtime/data/byte_alphabet.cpp, a per-test temporary
// directory, a Hugging Face tokenizer.json built from a vocabulary and merges in the byte
// alphabet, and one in Llama 2's SentencePiece style.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zt::test {

// GPT-2's printable stand-in for byte b, as UTF-8 (bytes_to_unicode: printable Latin-1 keeps
// its code point, the rest count up from 256).
inline std::string alphabet_char(int byte) {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int code_point = byte;
  if (!printable(byte)) {
    code_point = 256;
    for (int b = 0; b < byte; ++b) code_point += printable(b) ? 0 : 1;
  }
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

inline std::string alphabet(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += alphabet_char(static_cast<unsigned char>(c));
  return out;
}

// A directory under the system temp directory named after the process and the running test,
// removed when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("zt_tokenizer_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" +
             info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  std::filesystem::path path_;
};

// How model.merges is written: "left right" strings (tokenizers < 0.20) or [left, right].
enum class MergeFormat { kStrings, kPairs };

// A tokenizer.json as Hugging Face writes GPT-2's: model BPE over `vocab` (alphabet string ->
// id) and `merges` (alphabet strings, rank order), a ByteLevel pre-tokenizer with GPT-2's
// pattern, a ByteLevel decoder, and <|endoftext|> as a special added token when `vocab` has it.
inline nlohmann::json gpt2_style_tokenizer_json(
    const nlohmann::json& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    MergeFormat format) {
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [left, right] : merges) {
    if (format == MergeFormat::kStrings) {
      merge_list.push_back(left + " " + right);
    } else {
      merge_list.push_back(nlohmann::json::array({left, right}));
    }
  }
  nlohmann::json added = nlohmann::json::array();
  if (vocab.contains("<|endoftext|>")) {
    added.push_back({{"id", vocab["<|endoftext|>"]},
                     {"content", "<|endoftext|>"},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", true},
                     {"special", true}});
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

// The vocabulary of a synthetic byte-level BPE: ids 0..255 the bytes, then one id per merge
// (raw bytes, in order), then <|endoftext|>. Returns the vocab and the merges in the alphabet.
inline std::pair<nlohmann::json, std::vector<std::pair<std::string, std::string>>> synthetic_vocab(
    const std::vector<std::pair<std::string, std::string>>& raw_merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[alphabet_char(b)] = id++;
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [left, right] : raw_merges) {
    vocab[alphabet(left + right)] = id++;
    merges.emplace_back(alphabet(left), alphabet(right));
  }
  vocab["<|endoftext|>"] = id;
  return {vocab, merges};
}

// A SentencePiece-style BPE as Llama 2 ships it: ids 0..2 <unk> <s> </s>, 3..258 the byte
// tokens <0x00>..<0xFF>, then `tokens` in order; merges as given.
inline nlohmann::json sentencepiece_style(const std::vector<std::string>& tokens,
                                          const std::vector<std::string>& merges) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = 259 + i;
  nlohmann::json added = nlohmann::json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", id == 0   ? "<unk>"
                                 : id == 1 ? "<s>"
                                           : "</s>"},
                     {"special", true},
                     {"normalized", false}});
  }
  const std::string m = "\xE2\x96\x81";
  return {{"added_tokens", added},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", m}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace zt::test
