// BpeTokenizer: added-token matching, the normalizer / pre-tokenizer / BPE pipeline with a
// per-word cache, post-processing and decoding. No file I/O; no threads.
#include "runtime/data/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

#include "runtime/data/unicode_text.h"
#include "runtime/status.h"

namespace zt {

namespace {

// Words longer than this are encoded but not cached; the cache is dropped when it holds this
// many words (bounds memory on adversarial input; English text stays far below it).
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCachedWords = size_t{1} << 20;
// Words of more symbols than this merge through a heap (n log n) instead of rescanning every
// pair for each merge (fast on short words, quadratic on long ones).
constexpr size_t kHeapMergeSymbols = 48;

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

// The length of the unit a word starts from at word[pos]: one byte, or one UTF-8 character.
size_t unit_length(std::string_view word, size_t pos, bool bytes) {
  if (bytes) return 1;
  int32_t cp = 0;
  return utf8_char(word, pos, cp);
}

int32_t char_at(std::string_view text, size_t pos) {
  int32_t cp = 0;
  utf8_char(text, pos, cp);
  return cp;
}

// The start of the character ending at text[end - 1] (end > 0); a stray byte is one.
size_t previous_char_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    --start;
  int32_t cp = 0;
  return utf8_char(text, start, cp) == end - start ? start : end - 1;
}

// The code point of the character ending at text[end - 1] (-1 when none or not UTF-8).
int32_t char_before(std::string_view text, size_t end) {
  return end == 0 ? -1 : char_at(text, previous_char_start(text, end));
}

// A piece of a text: an added token's id, or text (id -1).
struct Piece {
  size_t begin, end;
  int32_t id;
};

// The added tokens matched in one pass (not normalized, or normalized), by first byte, longest
// first: leftmost-longest matching checks them in this order.
struct AddedMatcher {
  std::vector<AddedToken> tokens;  // content: what is matched
  std::array<std::vector<int32_t>, 256> by_first_byte;
  bool any_special = false, any_non_special = false;

  void add(AddedToken token) {
    (token.special ? any_special : any_non_special) = true;
    by_first_byte[static_cast<unsigned char>(token.content[0])].push_back(
        static_cast<int32_t>(tokens.size()));
    tokens.push_back(std::move(token));
  }
  void sort() {
    for (auto& candidates : by_first_byte) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
        return tokens[a].content.size() > tokens[b].content.size();
      });
    }
  }
  bool active(bool match_special) const {
    return any_non_special || (match_special && any_special);
  }

  // The longest eligible token at text[pos], or nullptr.
  const AddedToken* at(std::string_view text, size_t pos, bool match_special) const {
    for (int32_t index : by_first_byte[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& token = tokens[index];
      if ((!match_special && token.special) ||
          text.compare(pos, token.content.size(), token.content) != 0) {
        continue;
      }
      if (token.single_word && (is_word_char(char_before(text, pos)) ||
                                (pos + token.content.size() < text.size() &&
                                 is_word_char(char_at(text, pos + token.content.size()))))) {
        continue;
      }
      return &token;
    }
    return nullptr;
  }

  // Cuts `text` into text pieces and added tokens; lstrip/rstrip widen a token over the
  // whitespace beside it (never into the token before).
  void split(std::string_view text, bool match_special, std::vector<Piece>& out) const {
    out.clear();
    size_t done = 0;
    for (size_t pos = 0; pos < text.size();) {
      const AddedToken* token = at(text, pos, match_special);
      if (token == nullptr) {
        ++pos;
        continue;
      }
      size_t begin = pos, end = pos + token->content.size();
      if (token->lstrip) {
        while (begin > done && is_whitespace(char_before(text, begin))) {
          begin = previous_char_start(text, begin);
        }
      }
      if (token->rstrip) {
        int32_t cp = 0;
        for (size_t length = 0; end < text.size(); end += length) {
          length = utf8_char(text, end, cp);
          if (!is_whitespace(cp)) break;
        }
      }
      if (begin > done) out.push_back({done, begin, -1});
      out.push_back({begin, end, token->id});
      done = pos = end;
    }
    if (done < text.size() || out.empty()) out.push_back({done, text.size(), -1});
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

  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  TokenDecoder decoder;
  bool decoder_empty = true;
  AddedMatcher raw_added, normalized_added;  // matched before / after the normalizer
  StringMap<int32_t> added_ids;              // content -> id

  bool bytes = true;  // words start as bytes (a byte-level pre-tokenizer), else as characters
  std::array<int32_t, 256> byte_token{};      // bytes: the id of each byte
  std::array<int32_t, 256> fallback_token{};  // byte_fallback: the id of <0xNN>, or -1
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
  std::unordered_map<uint64_t, Merge> merges;
  StringMap<int32_t> vocab_ids;  // text -> id of every BPE vocabulary token
  bool ignore_merges = false;

  StringMap<CachedWord> cache;
  std::vector<int32_t> cached_ids;
  std::vector<int32_t> symbols;  // scratch for bpe()
  Words words;                   // scratch for encode_segment()
  std::vector<Piece> raw_pieces, normalized_pieces;

  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges.find(pair_key(left, right));
    return it == merges.end() ? nullptr : &it->second;
  }

  // symbols := the tokens `word` starts from (step 4 of the header).
  void initial_symbols(std::string_view word) {
    symbols.clear();
    if (bytes && prefix.empty() && suffix.empty()) {
      for (char c : word) symbols.push_back(byte_token[static_cast<unsigned char>(c)]);
      return;
    }
    std::optional<int32_t> pending_unk;
    std::string unit;
    for (size_t pos = 0; pos < word.size();) {
      const size_t length = unit_length(word, pos, bytes);
      unit.assign(pos == 0 ? "" : prefix);
      unit.append(word.substr(pos, length));
      pos += length;
      if (pos == word.size()) unit += suffix;
      if (auto it = vocab_ids.find(unit); it != vocab_ids.end()) {
        if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
        symbols.push_back(it->second);
        continue;
      }
      if (byte_fallback && std::all_of(unit.begin(), unit.end(), [&](char c) {
            return fallback_token[static_cast<unsigned char>(c)] >= 0;
          })) {
        if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
        for (char c : unit) symbols.push_back(fallback_token[static_cast<unsigned char>(c)]);
        continue;
      }
      if (!unk_id) continue;
      if (pending_unk && !fuse_unk) symbols.push_back(*pending_unk);
      pending_unk = unk_id;
    }
    if (pending_unk) symbols.push_back(*pending_unk);
  }

  // Repeatedly merges every occurrence (left to right, non-overlapping) of the adjacent pair
  // with the lowest rank, as GPT-2's encoder.py.
  void merge_by_rescanning() {
    while (symbols.size() > 1) {
      const Merge* best = nullptr;
      int32_t best_left = 0, best_right = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const Merge* merge = find_merge(symbols[i], symbols[i + 1]);
        if (merge != nullptr && (best == nullptr || merge->rank < best->rank)) {
          best = merge;
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

  // The same merges through a min-heap of (rank, position) over a linked list of symbols: the
  // lowest rank first, and of equal ranks the leftmost, which is the order above.
  void merge_with_heap() {
    const auto n = static_cast<int32_t>(symbols.size());
    std::vector<int32_t> next(n), prev(n);
    for (int32_t i = 0; i < n; ++i) {
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    using Entry = std::pair<int32_t, int32_t>;  // rank, position of the left symbol
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    auto push = [&](int32_t pos) {
      if (pos < 0 || next[pos] < 0) return;
      if (const Merge* merge = find_merge(symbols[pos], symbols[next[pos]])) {
        heap.emplace(merge->rank, pos);
      }
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const auto [rank, pos] = heap.top();
      heap.pop();
      if (symbols[pos] < 0 || next[pos] < 0) continue;  // merged away since
      const Merge* merge = find_merge(symbols[pos], symbols[next[pos]]);
      if (merge == nullptr || merge->rank != rank) continue;  // the pair changed since
      const int32_t right = next[pos];
      symbols[pos] = merge->merged;
      symbols[right] = -1;
      next[pos] = next[right];
      if (next[pos] >= 0) prev[next[pos]] = pos;
      push(prev[pos]);
      push(pos);
    }
    std::erase(symbols, -1);
  }

  void bpe(std::string_view word) {
    if (ignore_merges) {
      if (auto it = vocab_ids.find(word); it != vocab_ids.end()) {
        symbols.assign(1, it->second);
        return;
      }
    }
    initial_symbols(word);
    if (symbols.size() > kHeapMergeSymbols) {
      merge_with_heap();
    } else {
      merge_by_rescanning();
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

  // Steps 3 and 4 on one normalised segment.
  void encode_words(std::string_view segment, bool at_start, std::vector<int32_t>& out) {
    pre_tokenizer.split(segment, at_start, words);
    for (size_t i = 0; i < words.spans.size(); ++i) encode_word(words.word(i), out);
  }

  // Steps 2 to 4 on one segment between raw added tokens.
  void encode_segment(std::string_view segment, bool at_start, bool match_special,
                      std::vector<int32_t>& out) {
    if (segment.empty()) return;
    std::string normalized;
    if (!normalizer.empty()) {
      normalized = normalizer.normalize(segment);
      segment = normalized;
    }
    if (!normalized_added.active(match_special)) {
      encode_words(segment, at_start, out);
      return;
    }
    std::vector<Piece> pieces;
    normalized_added.split(segment, match_special, pieces);
    for (const Piece& piece : pieces) {
      if (piece.id >= 0) {
        out.push_back(piece.id);
      } else if (piece.end > piece.begin) {
        encode_words(segment.substr(piece.begin, piece.end - piece.begin),
                     at_start && piece.begin == 0, out);
      }
    }
  }
};

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : impl_(std::make_unique<Impl>()), token_bytes_(std::move(spec.token_bytes)),
      prefix_ids_(std::move(spec.prefix_ids)), suffix_ids_(std::move(spec.suffix_ids)),
      special_(token_bytes_.size(), false),
      clean_up_tokenization_spaces_(spec.clean_up_tokenization_spaces),
      source_(std::move(spec.source)) {
  Impl& impl = *impl_;
  impl.normalizer = std::move(spec.normalizer);
  impl.pre_tokenizer = std::move(spec.pre_tokenizer);
  impl.decoder = std::move(spec.decoder);
  impl.decoder_empty = impl.decoder.concatenates();
  impl.bytes = impl.pre_tokenizer.byte_level();
  impl.ignore_merges = spec.ignore_merges;
  impl.byte_fallback = spec.byte_fallback;
  impl.unk_id = spec.unk_id;
  impl.fuse_unk = spec.fuse_unk;
  impl.prefix = std::move(spec.continuing_subword_prefix);
  impl.suffix = std::move(spec.end_of_word_suffix);

  std::vector<bool> added_only(token_bytes_.size(), false);
  for (AddedToken& token : spec.added_tokens) {
    ZT_ASSERT(token.id >= 0 && static_cast<size_t>(token.id) < token_bytes_.size() &&
                  !token.content.empty(),
              "{}: added token id {} of {}", source_, token.id, token_bytes_.size());
    if (!token.in_model_vocab) added_only[token.id] = true;
    if (token.special) special_[token.id] = true;
    impl.added_ids.emplace(token.content, token.id);
    if (token.normalized && !impl.normalizer.empty()) {
      token.content = impl.normalizer.normalize(token.content);
      if (token.content.empty()) continue;  // normalised away: never matched
    }
    (token.normalized ? impl.normalized_added : impl.raw_added).add(std::move(token));
  }
  impl.raw_added.sort();
  impl.normalized_added.sort();

  impl.vocab_ids.reserve(token_bytes_.size());
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (!added_only[id]) impl.vocab_ids.emplace(token_bytes_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl.vocab_ids.find(fmt::format("<0x{:02X}>", b));
    impl.fallback_token[b] = it == impl.vocab_ids.end() ? -1 : it->second;
    if (!impl.bytes) continue;
    it = impl.vocab_ids.find(std::string(1, static_cast<char>(b)));
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
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, SpecialTokens special,
                                          AddSpecialTokens add) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  encode_append(text, ids, special, add);
  return ids;
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out,
                                 SpecialTokens special, AddSpecialTokens add) {
  Impl& impl = *impl_;
  const bool match_special = special == SpecialTokens::kMatch;
  const bool post_process = add == AddSpecialTokens::kYes;
  if (post_process) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  if (!impl.raw_added.active(match_special)) {
    impl.encode_segment(text, /*at_start=*/true, match_special, out);
  } else {
    std::vector<Piece> pieces;
    impl.raw_added.split(text, match_special, pieces);
    for (const Piece& piece : pieces) {
      if (piece.id >= 0) {
        out.push_back(piece.id);
      } else {
        impl.encode_segment(text.substr(piece.begin, piece.end - piece.begin), piece.begin == 0,
                            match_special, out);
      }
    }
  }
  if (post_process) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, SkipSpecialTokens skip) const {
  const bool skip_special = skip == SkipSpecialTokens::kYes;
  std::vector<std::string> tokens;
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) {
      throw_input(fmt::format("token id {} is outside the vocabulary [0, {}) of {}", id,
                              token_bytes_.size(), source_));
    }
    if (skip_special && special_[id]) continue;
    if (impl_->decoder_empty) {
      text += token_bytes_[id];
    } else {
      tokens.push_back(token_bytes_[id]);
    }
  }
  // The decoder's ByteLevel step makes its text valid UTF-8; a concatenation of byte-level
  // tokens is made so here, as that step would.
  if (!impl_->decoder_empty) text = impl_->decoder.decode(std::move(tokens));
  return is_valid_utf8(text) ? text : utf8_lossy(text);
}

std::string BpeTokenizer::decode_for_display(std::span<const int32_t> ids,
                                             SkipSpecialTokens skip) const {
  std::string text = decode(ids, skip);
  return clean_up_tokenization_spaces_ ? clean_up_tokenization(text) : text;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view content) const {
  if (auto it = impl_->added_ids.find(content); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->vocab_ids.find(content); it != impl_->vocab_ids.end()) return it->second;
  return std::nullopt;
}

}  // namespace zt
