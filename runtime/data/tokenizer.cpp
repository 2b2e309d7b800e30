// Gpt2Tokenizer: loading encoder.json / vocab.bpe, PCRE2 pre-tokenisation, BPE by merge rank
// with a per-word cache, and decoding. Reads files only at construction; no threads.
#include "runtime/data/tokenizer.h"

#include "runtime/file_io.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "runtime/status.h"

namespace zt {

namespace {

// GPT-2's pre-tokeniser: contractions, letter runs, number runs, other-symbol runs (each with
// an optional leading space), then whitespace. `\s+(?!\S)` leaves the last space of a run for
// the next word, so " world" stays one piece after "a  ".
constexpr std::string_view kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Words longer than this are encoded but not cached; the cache is dropped when it holds this
// many words (bounds memory on adversarial input; English text stays far below it).
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCachedWords = size_t{1} << 20;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes keep their code point; the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) take 256, 257, ... in ascending byte order. It
// exists only so vocabulary files are printable; we undo it at load time.
bool byte_is_printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<int, 512> code_point_to_byte;  // -1 where a code point is not in the alphabet
  ByteAlphabet() {
    code_point_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) code_point_to_byte[byte_is_printable(b) ? b : next++] = b;
  }
};

// Decodes one vocabulary-file token ("Ġworld") to its raw bytes (" world"). Returns false when
// the string is not UTF-8 over the byte alphabet.
bool alphabet_to_bytes(std::string_view token, std::string& bytes) {
  static const ByteAlphabet alphabet;
  bytes.clear();
  size_t i = 0;
  while (i < token.size()) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    int code_point;
    if (c < 0x80) {
      code_point = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      code_point = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // the alphabet ends at U+0143: two UTF-8 bytes at most
    }
    if (code_point >= 512 || alphabet.code_point_to_byte[code_point] < 0) return false;
    bytes.push_back(static_cast<char>(alphabet.code_point_to_byte[code_point]));
  }
  return !bytes.empty();
}

std::string read_whole_file(const std::string& path) {
  return read_file(path, "GPT-2 vocabulary file",
                   " (run scripts/fetch_data.sh, or pass the directory holding encoder.json and "
                   "vocab.bpe)");
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct WordHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Key of the merge table: the two token ids of an adjacent pair.
uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

struct Gpt2Tokenizer::Impl {
  struct Merge {
    int32_t rank;    // line order in vocab.bpe: lower merges first
    int32_t merged;  // id of left + right
  };
  struct CachedWord {
    uint32_t offset;  // into cached_ids
    uint32_t length;
  };

  pcre2_code* pattern = nullptr;
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  bool jit = false;

  std::array<int32_t, 256> byte_token{};  // id of each single byte
  std::unordered_map<uint64_t, Merge> merges;

  std::unordered_map<std::string, CachedWord, WordHash, std::equal_to<>> cache;
  std::vector<int32_t> cached_ids;
  std::vector<int32_t> symbols;  // scratch for bpe()

  ~Impl() {
    if (match_data) pcre2_match_data_free(match_data);
    if (match_context) pcre2_match_context_free(match_context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
    if (pattern) pcre2_code_free(pattern);
  }

  void compile_pattern() {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: invalid UTF-8 is never matched instead of failing the whole call, and
    // no per-call validity scan of the subject (which would make matching quadratic).
    pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                            &error_offset, nullptr);
    if (pattern == nullptr) {
      throw_internal(fmt::format("PCRE2 rejected the GPT-2 pattern at offset {}: {}",
                                 error_offset, pcre2_message(error)));
    }
    jit = pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE) == 0;  // falls back to the interpreter
    match_data = pcre2_match_data_create_from_pattern(pattern, nullptr);
    match_context = pcre2_match_context_create(nullptr);
    if (match_data == nullptr || match_context == nullptr) throw_system("PCRE2: out of memory");
    if (jit) {
      // Long whitespace runs backtrack through `\s+(?!\S)`; give the JIT more than its 32 KiB.
      jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
      if (jit_stack == nullptr) throw_system("PCRE2: out of memory for the JIT stack");
      pcre2_jit_stack_assign(match_context, nullptr, jit_stack);
    }
  }

  // BPE on one word: start from single bytes, repeatedly merge every occurrence (left to
  // right, non-overlapping) of the adjacent pair with the lowest rank, as GPT-2's encoder.py.
  void bpe(std::string_view word) {
    symbols.clear();
    for (char c : word) symbols.push_back(byte_token[static_cast<unsigned char>(c)]);
    while (symbols.size() > 1) {
      const Merge* best = nullptr;
      int32_t best_left = 0, best_right = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = merges.find(pair_key(symbols[i], symbols[i + 1]));
        if (it != merges.end() && (best == nullptr || it->second.rank < best->rank)) {
          best = &it->second;
          best_left = symbols[i];
          best_right = symbols[i + 1];
        }
      }
      if (best == nullptr) break;
      size_t write = 0;
      for (size_t read = 0; read < symbols.size();) {
        if (read + 1 < symbols.size() && symbols[read] == best_left &&
            symbols[read + 1] == best_right) {
          symbols[write++] = best->merged;
          read += 2;
        } else {
          symbols[write++] = symbols[read++];
        }
      }
      symbols.resize(write);
    }
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) {
    if (word.size() <= kMaxCachedWordBytes) {
      if (auto it = cache.find(word); it != cache.end()) {
        const int32_t* ids = cached_ids.data() + it->second.offset;
        out.insert(out.end(), ids, ids + it->second.length);
        return;
      }
    }
    bpe(word);
    out.insert(out.end(), symbols.begin(), symbols.end());
    if (word.size() <= kMaxCachedWordBytes) {
      if (cache.size() >= kMaxCachedWords) {
        cache.clear();
        cached_ids.clear();
      }
      cache.emplace(std::string(word), CachedWord{static_cast<uint32_t>(cached_ids.size()),
                                                  static_cast<uint32_t>(symbols.size())});
      cached_ids.insert(cached_ids.end(), symbols.begin(), symbols.end());
    }
  }
};

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  const std::string encoder_path = dir + "/encoder.json";
  const std::string merges_path = dir + "/vocab.bpe";

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
  token_bytes_.assign(encoder.size(), std::string());
  std::vector<bool> seen(encoder.size(), false);
  std::string bytes;
  for (const auto& [token, value] : encoder.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(encoder.size())) {
      throw_input(fmt::format("{}: token \"{}\" has id {}; ids must be integers 0..{}",
                              encoder_path, token, value.dump(), encoder.size() - 1));
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (seen[id]) throw_input(fmt::format("{}: id {} is used twice", encoder_path, id));
    seen[id] = true;
    if (token == "<|endoftext|>") eot_ = id;
    if (!alphabet_to_bytes(token, bytes)) {
      throw_input(fmt::format("{}: token \"{}\" is not in GPT-2's byte alphabet", encoder_path,
                              token));
    }
    token_bytes_[id] = bytes;
    bytes_to_id.emplace(bytes, id);
  }
  if (eot_ < 0) throw_input(fmt::format("{} has no \"<|endoftext|>\" token", encoder_path));
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id.end()) {
      throw_input(fmt::format("{} has no token for byte {}; byte-level BPE needs all 256",
                              encoder_path, b));
    }
    impl_->byte_token[b] = it->second;
  }

  // vocab.bpe: "#version: 0.2", then one merge "left right" per line, in rank order.
  const std::string merges_text = read_whole_file(merges_path);
  size_t line_start = 0;
  int line_number = 0;
  int32_t rank = 0;
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
        throw_input(fmt::format("{}: line 1 should be the \"#version\" comment of a GPT-2 merges "
                                "file", merges_path));
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
    // A repeated pair keeps its first (lowest) rank.
    impl_->merges.emplace(pair_key(left_it->second, right_it->second),
                          Impl::Merge{rank++, merged_it->second});
  }
  if (impl_->merges.empty()) throw_input(fmt::format("{} holds no merges", merges_path));

  impl_->compile_pattern();
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  encode_append(text, ids);
  return ids;
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  Impl& impl = *impl_;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(impl.match_data);
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = impl.jit ? pcre2_jit_match(impl.pattern, subject, text.size(), pos, 0,
                                        impl.match_data, impl.match_context)
                      : pcre2_match(impl.pattern, subject, text.size(), pos, 0, impl.match_data,
                                    impl.match_context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      impl.encode_word(text.substr(pos), out);  // trailing bytes that are not valid UTF-8
      break;
    }
    if (rc < 0) {
      throw_system(fmt::format("PCRE2 match failed at byte {} of {}: {}", pos, text.size(),
                               pcre2_message(rc)));
    }
    size_t start = ovector[0], end = ovector[1];
    if (start > pos) impl.encode_word(text.substr(pos, start - pos), out);  // invalid UTF-8
    if (end == start) end = start + 1;  // the pattern never matches empty; keep progress anyway
    impl.encode_word(text.substr(start, end - start), out);
    pos = end;
  }
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) {
      throw_input(fmt::format("token id {} is outside the GPT-2 vocabulary [0, {})", id,
                              token_bytes_.size()));
    }
    text += token_bytes_[id];
  }
  return text;
}

}  // namespace zt
