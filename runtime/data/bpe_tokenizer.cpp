// BpeTokenizer: added-token matching, PCRE2 pre-tokenisation, BPE by merge rank with a
// per-word cache, and decoding. No file I/O; no threads.
#include "runtime/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <functional>
#include <unordered_map>

#include "runtime/status.h"

namespace zt {

namespace {

// Words longer than this are encoded but not cached; the cache is dropped when it holds this
// many words (bounds memory on adversarial input; English text stays far below it).
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCachedWords = size_t{1} << 20;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct WordHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename Value>
using StringMap = std::unordered_map<std::string, Value, WordHash, std::equal_to<>>;

// Key of the merge table: the two token ids of an adjacent pair.
uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The byte after the UTF-8 character starting at `pos` (a stray byte counts as one character).
size_t next_char(std::string_view text, size_t pos) {
  ++pos;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

// One compiled split pattern and its match data.
struct CompiledPattern {
  pcre2_code* code = nullptr;
  pcre2_match_data* match_data = nullptr;
  bool jit = false;

  CompiledPattern() = default;
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
  ~CompiledPattern() {
    if (match_data) pcre2_match_data_free(match_data);
    if (code) pcre2_code_free(code);
  }
};

}  // namespace

struct BpeTokenizer::Impl {
  struct Merge {
    int32_t rank;    // position in BpeSpec::merges: lower merges first
    int32_t merged;  // id of left + right
  };
  struct CachedWord {
    uint32_t offset;  // into cached_ids
    uint32_t length;
  };

  std::vector<std::unique_ptr<CompiledPattern>> patterns;  // applied in order
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  std::array<int32_t, 256> byte_token{};  // id of each single byte
  std::unordered_map<uint64_t, Merge> merges;
  StringMap<int32_t> vocab_ids;  // raw bytes -> id of every BPE vocabulary token
  bool ignore_merges = false;
  bool add_prefix_space = false;

  // Added tokens: content -> id, and for the scan, the tokens each first byte may start,
  // longest first (leftmost-longest matching checks them in this order).
  StringMap<int32_t> added_ids;
  std::vector<AddedToken> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`
  bool any_special = false, any_non_special = false;

  StringMap<CachedWord> cache;
  std::vector<int32_t> cached_ids;
  std::vector<int32_t> symbols;  // scratch for bpe()

  ~Impl() {
    patterns.clear();
    if (match_context) pcre2_match_context_free(match_context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }

  void compile_patterns(const std::vector<SplitPattern>& specs, const std::string& source) {
    match_context = pcre2_match_context_create(nullptr);
    if (match_context == nullptr) throw_system("PCRE2: out of memory");
    bool any_jit = false;
    for (const SplitPattern& spec : specs) {
      auto pattern = std::make_unique<CompiledPattern>();
      int error = 0;
      PCRE2_SIZE error_offset = 0;
      // MATCH_INVALID_UTF: invalid UTF-8 is never matched instead of failing the whole call,
      // and no per-call validity scan of the subject (which would make matching quadratic).
      // UCP gives \s, \w and \d their Unicode meaning, as Hugging Face's Oniguruma does; PCRE2
      // refuses it beside LITERAL, where it means nothing.
      const uint32_t options =
          PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (spec.literal ? PCRE2_LITERAL : PCRE2_UCP);
      pattern->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spec.pattern.data()),
                                    spec.pattern.size(), options, &error, &error_offset, nullptr);
      if (pattern->code == nullptr) {
        throw_input(fmt::format("{}: {}: PCRE2 rejects the pattern at offset {}: {}", source,
                                spec.where, error_offset, pcre2_message(error)));
      }
      pattern->jit = pcre2_jit_compile(pattern->code, PCRE2_JIT_COMPLETE) == 0;  // else interpret
      any_jit = any_jit || pattern->jit;
      pattern->match_data = pcre2_match_data_create_from_pattern(pattern->code, nullptr);
      if (pattern->match_data == nullptr) throw_system("PCRE2: out of memory");
      patterns.push_back(std::move(pattern));
    }
    if (any_jit) {
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
    if (ignore_merges) {
      if (auto it = vocab_ids.find(word); it != vocab_ids.end()) {
        symbols.push_back(it->second);
        return;
      }
    }
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

  // Pre-tokenises `text` with patterns[level...] and encodes every piece. A pattern's pieces
  // are its non-empty matches and the non-empty text between them (bytes that are not valid
  // UTF-8 always fall between matches); an empty match splits nothing.
  void split(std::string_view text, size_t level, std::vector<int32_t>& out) {
    if (level == patterns.size()) {
      encode_word(text, out);
      return;
    }
    CompiledPattern& pattern = *patterns[level];
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(pattern.match_data);
    size_t piece_start = 0;  // start of the text not yet handed on
    size_t search = 0;       // where the next match may start
    while (search < text.size()) {
      int rc = pattern.jit ? pcre2_jit_match(pattern.code, subject, text.size(), search, 0,
                                             pattern.match_data, match_context)
                           : pcre2_match(pattern.code, subject, text.size(), search, 0,
                                         pattern.match_data, match_context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        throw_system(fmt::format("PCRE2 match failed at byte {} of {}: {}", search, text.size(),
                                 pcre2_message(rc)));
      }
      const size_t start = ovector[0], end = ovector[1];
      if (end == start) {
        search = next_char(text, start);
        continue;
      }
      if (start > piece_start) split(text.substr(piece_start, start - piece_start), level + 1, out);
      split(text.substr(start, end - start), level + 1, out);
      piece_start = search = end;
    }
    if (piece_start < text.size()) split(text.substr(piece_start), level + 1, out);
  }

  // One segment between added tokens.
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) {
    if (segment.empty()) return;
    if (add_prefix_space && segment.front() != ' ') {
      const std::string prefixed = " " + std::string(segment);
      split(prefixed, 0, out);
      return;
    }
    split(segment, 0, out);
  }

  // The longest eligible added token starting at text[pos], or nullptr.
  const AddedToken* added_at(std::string_view text, size_t pos, bool match_special) const {
    for (int32_t index : added_by_first_byte[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& token = added[index];
      if ((match_special || !token.special) &&
          text.compare(pos, token.content.size(), token.content) == 0) {
        return &token;
      }
    }
    return nullptr;
  }
};

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : impl_(std::make_unique<Impl>()), token_bytes_(std::move(spec.token_bytes)),
      source_(std::move(spec.source)) {
  Impl& impl = *impl_;
  impl.ignore_merges = spec.ignore_merges;
  impl.add_prefix_space = spec.add_prefix_space;

  std::vector<bool> added_only(token_bytes_.size(), false);
  for (const AddedToken& token : spec.added_tokens) {
    ZT_ASSERT(token.id >= 0 && static_cast<size_t>(token.id) < token_bytes_.size() &&
                  !token.content.empty(),
              "{}: added token id {} of {}", source_, token.id, token_bytes_.size());
    if (!token.in_model_vocab) added_only[token.id] = true;
    impl.added_ids.emplace(token.content, token.id);
    (token.special ? impl.any_special : impl.any_non_special) = true;
  }
  impl.added = std::move(spec.added_tokens);
  for (size_t i = 0; i < impl.added.size(); ++i) {
    impl.added_by_first_byte[static_cast<unsigned char>(impl.added[i].content[0])].push_back(
        static_cast<int32_t>(i));
  }
  for (auto& candidates : impl.added_by_first_byte) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
      return impl.added[a].content.size() > impl.added[b].content.size();
    });
  }

  impl.vocab_ids.reserve(token_bytes_.size());
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (!added_only[id]) impl.vocab_ids.emplace(token_bytes_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl.vocab_ids.find(std::string(1, static_cast<char>(b)));
    if (it == impl.vocab_ids.end()) {
      throw_input(
          fmt::format("{} has no token for byte {}; byte-level BPE needs all 256", source_, b));
    }
    impl.byte_token[b] = it->second;
  }

  impl.merges.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const BpeMerge& merge = spec.merges[rank];
    // A repeated pair keeps its first (lowest) rank.
    impl.merges.emplace(pair_key(merge.left, merge.right),
                        Impl::Merge{static_cast<int32_t>(rank), merge.merged});
  }

  impl.compile_patterns(spec.split_patterns, source_);
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, SpecialTokens special) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  encode_append(text, ids, special);
  return ids;
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out,
                                 SpecialTokens special) {
  Impl& impl = *impl_;
  const bool match_special = special == SpecialTokens::kMatch;
  if (!impl.any_non_special && !(match_special && impl.any_special)) {
    impl.encode_segment(text, out);
    return;
  }
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* token = impl.added_at(text, pos, match_special);
    if (token == nullptr) {
      ++pos;
      continue;
    }
    impl.encode_segment(text.substr(segment_start, pos - segment_start), out);
    out.push_back(token->id);
    pos += token->content.size();
    segment_start = pos;
  }
  impl.encode_segment(text.substr(segment_start), out);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) {
      throw_input(fmt::format("token id {} is outside the vocabulary [0, {}) of {}", id,
                              token_bytes_.size(), source_));
    }
    text += token_bytes_[id];
  }
  return text;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view content) const {
  if (auto it = impl_->added_ids.find(content); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->vocab_ids.find(content); it != impl_->vocab_ids.end()) return it->second;
  return std::nullopt;
}

}  // namespace zt
