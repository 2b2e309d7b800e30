// Gpt2Tokenizer: reading and checking encoder.json / vocab.bpe into a BpeSpec. Reads files
// only at construction.
#include "runtime/data/tokenizer.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "runtime/data/byte_alphabet.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

std::string read_whole_file(const std::string& path) {
  return read_file(path, "GPT-2 vocabulary file",
                   " (run scripts/fetch_data.sh, or pass the directory holding encoder.json and "
                   "vocab.bpe)");
}

BpeSpec load_gpt2_spec(const std::string& dir) {
  const std::string encoder_path = dir + "/encoder.json";
  const std::string merges_path = dir + "/vocab.bpe";
  BpeSpec spec;
  spec.source = encoder_path + " and vocab.bpe";

  // encoder.json: {"token in the byte alphabet": id, ...}; ids must be 0..n-1, each once.
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_whole_file(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    throw_input(fmt::format("{} is not valid JSON: {}", encoder_path, e.what()));
  }
  if (!encoder.is_object() || encoder.empty()) {
    throw_input(fmt::format("{} must be a non-empty JSON object of token -> id", encoder_path));
  }
  std::unordered_map<std::string, int32_t> bytes_to_id;
  bytes_to_id.reserve(encoder.size());
  spec.token_bytes.assign(encoder.size(), std::string());
  std::vector<bool> seen(encoder.size(), false);
  std::string bytes;
  int32_t eot = -1;
  for (const auto& [token, value] : encoder.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(encoder.size())) {
      throw_input(fmt::format("{}: token \"{}\" has id {}; ids must be integers 0..{}",
                              encoder_path, token, value.dump(), encoder.size() - 1));
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (seen[id]) throw_input(fmt::format("{}: id {} is used twice", encoder_path, id));
    seen[id] = true;
    if (token == kEndOfText) eot = id;
    if (!alphabet_to_bytes(token, bytes)) {
      throw_input(
          fmt::format("{}: token \"{}\" is not in GPT-2's byte alphabet", encoder_path, token));
    }
    spec.token_bytes[id] = bytes;
    bytes_to_id.emplace(bytes, id);
  }
  if (eot < 0) throw_input(fmt::format("{} has no \"<|endoftext|>\" token", encoder_path));
  spec.added_tokens.push_back(
      AddedToken{eot, std::string(kEndOfText), /*special=*/true, /*in_model_vocab=*/true});
  for (int b = 0; b < 256; ++b) {
    if (!bytes_to_id.contains(std::string(1, static_cast<char>(b)))) {
      throw_input(fmt::format("{} has no token for byte {}; byte-level BPE needs all 256",
                              encoder_path, b));
    }
  }

  // vocab.bpe: "#version: 0.2", then one merge "left right" per line, in rank order.
  const std::string merges_text = read_whole_file(merges_path);
  size_t line_start = 0;
  int line_number = 0;
  std::string left_bytes, right_bytes;
  while (line_start < merges_text.size()) {
    size_t line_end = merges_text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = merges_text.size();
    std::string_view line(merges_text.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1) {
      if (!line.starts_with("#version")) {
        throw_input(
            fmt::format("{}: line 1 should be the \"#version\" comment of a GPT-2 merges "
                        "file",
                        merges_path));
      }
      continue;
    }
    if (line.empty()) continue;
    size_t space = line.find(' ');
    std::string_view left = line.substr(0, space == std::string_view::npos ? 0 : space);
    std::string_view right = space == std::string_view::npos ? "" : line.substr(space + 1);
    if (left.empty() || right.empty() || right.find(' ') != std::string_view::npos ||
        !alphabet_to_bytes(left, left_bytes) || !alphabet_to_bytes(right, right_bytes)) {
      throw_input(fmt::format("{} line {}: expected two tokens separated by one space", merges_path,
                              line_number));
    }
    auto left_it = bytes_to_id.find(left_bytes);
    auto right_it = bytes_to_id.find(right_bytes);
    auto merged_it = bytes_to_id.find(left_bytes + right_bytes);
    if (left_it == bytes_to_id.end() || right_it == bytes_to_id.end() ||
        merged_it == bytes_to_id.end()) {
      throw_input(fmt::format("{} line {}: merge \"{}\" uses or makes a token missing from {}",
                              merges_path, line_number, line, encoder_path));
    }
    spec.merges.push_back(BpeMerge{left_it->second, right_it->second, merged_it->second});
  }
  if (spec.merges.empty()) throw_input(fmt::format("{} holds no merges", merges_path));

  spec.pre_tokenizer = PreTokenizer::gpt2(spec.source);
  return spec;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : BpeTokenizer(load_gpt2_spec(dir)) {
  eot_ = *token_id(kEndOfText);  // load_gpt2_spec checked it is there
}

}  // namespace zt
