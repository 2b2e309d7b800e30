// Token data: llm.c's token file format (and our two extensions) and the loader that serves
// training batches from it.
//
// File format (llm.c, dev/data/data_common.py): a header of 256 little-endian int32
// (header[0] = 20240520 magic, header[1] = 1 version, header[2] = number of tokens, the rest
// zero), then the tokens as little-endian uint16. Version 2 is ours, the same with uint32
// tokens, for vocabularies past 65536 (Llama 3's 128,256, Qwen2's 151,936); write_token_file()
// writes version 1 whenever every id fits it, so GPT-2 files stay llm.c's byte for byte.
// Version 3 is ours too: packed instruction data (zt-prep on .jsonl, instruction_data.h).
// header[3] = bytes per id (2 or 4), header[4] = the packed length L (> 0), the rest zero; the
// n ids; then n flag bytes, one per token (kTokenLoss, kTokenDocStart below). The tokens are
// whole blocks of L, each starting a document, plus one trailing token so that the last
// block's last token has a target: n = blocks*L + 1. Byte by byte: docs/data_format.md.
// Writes are atomic; TokenFile reads any version fully into memory and validates it.
//
// DataLoader serves (B, T) input/target windows in llm.c's order, sharded by rank, optionally
// with the order of rounds shuffled per epoch; from a version 3 file also the loss mask (in the
// targets) and the positions within documents. It does not tokenise, does not read the file
// itself (it serves from a TokenFile), and does not communicate: every rank computes the same
// order from (seed, epoch), which keeps the ranks' batches disjoint.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zt {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;        // uint16 tokens (llm.c, GPT-2)
inline constexpr int32_t kTokenFileVersionWide = 2;    // uint32 tokens (ours)
inline constexpr int32_t kTokenFileVersionPacked = 3;  // ids of 2 or 4 bytes, then flags (ours)
inline constexpr size_t kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Writes `tokens` to path + ".tmp", fsyncs it, renames it to `path` and fsyncs the directory,
// so a crash leaves either the old file or the new one: version 1 when every id is at most
// 65535, else version 2. Negative ids and more than INT32_MAX tokens throw kInput; I/O
// failures throw kSystem.
void write_token_file(const std::string& path, std::span<const int32_t> tokens);

// Version 3's flag bits, one byte per token; the other bits must be 0.
// kTokenLoss: the loss counts when this token is the target (a completion token).
// kTokenDocStart: this token starts a document (an example, or one pad token). A token never
// has both: nothing in its document precedes a document's first token to predict it from.
inline constexpr uint8_t kTokenLoss = 1 << 0;
inline constexpr uint8_t kTokenDocStart = 1 << 1;

// Writes a version 3 file, atomically as above: `tokens` with `flags` (one per token), packed
// in blocks of `packed_length` tokens, ids as uint16 when every id fits, else uint32. Throws
// kInput naming the path for what TokenFile::open() would refuse (negative ids, a flags count
// that is not the token count, unknown flag bits, loss on a document start, a token count
// that is not blocks*packed_length + 1, a block not starting a document).
void write_token_file(const std::string& path, std::span<const int32_t> tokens,
                      std::span<const uint8_t> flags, int64_t packed_length);

// Whether `path` starts with a version 3 header (packed examples, whose batches carry document
// positions). False for anything else, including a missing file: a peek for planners that do
// not validate the file (TokenFile::open does).
bool is_packed_token_file(const std::string& path);

// A validated token file held in memory. Every problem throws kInput with one line naming the
// problem and the path: missing or unreadable file, shorter than the header, wrong magic or
// version, a token count that disagrees with the file size (truncated or trailing bytes), or a
// token id >= vocab_size (the first offending position and id); for version 3 also a width
// other than 2 or 4, a packed length <= 0, nonzero header[5..255], and the flag rules of
// write_token_file (the first offending token).
class TokenFile {
 public:
  static TokenFile open(const std::string& path, int64_t vocab_size);

  const std::string& path() const { return path_; }
  int64_t size() const {
    return wide_ ? static_cast<int64_t>(wide_tokens_.size()) : static_cast<int64_t>(tokens_.size());
  }
  int32_t version() const { return version_; }
  int32_t at(int64_t i) const {
    return wide_ ? static_cast<int32_t>(wide_tokens_[static_cast<size_t>(i)])
                 : static_cast<int32_t>(tokens_[static_cast<size_t>(i)]);
  }
  // dst[k] = at(begin + k) for k < n.
  void copy(int64_t begin, int64_t n, int32_t* dst) const;

  // Version 3: per-token flags and the length of the blocks the tokens were packed into.
  bool has_flags() const { return !flags_.empty(); }
  uint8_t flag(int64_t i) const { return flags_[static_cast<size_t>(i)]; }  // has_flags() only
  int64_t packed_length() const { return packed_length_; }                  // 0 without flags
  // How many of the tokens [begin, begin + n) the loss counts on as targets: those with
  // kTokenLoss, or all n in a file without flags.
  int64_t loss_tokens(int64_t begin, int64_t n) const;

 private:
  TokenFile() = default;
  std::string path_;
  int32_t version_ = kTokenFileVersion;
  bool wide_ = false;                  // uint32 ids (version 2, or 3 with width 4)
  std::vector<uint16_t> tokens_;       // uint16 ids (version 1, or 3 with width 2)
  std::vector<uint32_t> wide_tokens_;  // uint32 ids
  std::vector<uint8_t> flags_;         // version 3: (n,) kTokenLoss | kTokenDocStart
  int64_t packed_length_ = 0;          // version 3: L
};

// Serves batches of B rows of T tokens: inputs (B*T) and targets (B*T, the inputs shifted by
// one token), both row-major (B, T) int32, cut from one contiguous window of B*T+1 tokens.
// From a file with flags, a target whose token lacks kTokenLoss is kIgnoreTarget
// (runtime/model.h), and T must be a multiple of the packed length L, so that a row (which
// starts at a multiple of T) holds whole blocks and never cuts an example.
//
// Order (llm.c's): a round is world*B*T tokens; R = floor((ntokens - 1) / (world*B*T)) rounds
// fit. Batch k of rank r uses round q = k mod R and starts at token (q*world + r)*B*T, so in
// one round the ranks read adjacent, disjoint windows. After R batches (an epoch) the order
// wraps. With shuffle, epoch e visits the R rounds in a permutation drawn from a
// std::mt19937_64 seeded with (seed, e) by an explicit Fisher-Yates, identical on every rank
// and every platform. The tail beyond R rounds is never served.
//
// The TokenFile must outlive the loader. Pinned by tests/runtime/data/token_data_test.cpp.
class DataLoader {
 public:
  // B, T >= 1, T a multiple of the file's packed length, and a file too small for one round
  // (R == 0) throw kInput naming the file.
  DataLoader(const TokenFile& file, int64_t B, int64_t T, int rank, int world, bool shuffle,
             uint64_t seed);
  DataLoader(TokenFile&&, int64_t, int64_t, int, int, bool, uint64_t) = delete;  // would dangle

  // Fills inputs[B*T] and targets[B*T] with batch position() and advances. `positions`, when
  // not null, gets B*T positions as Batch::positions defines them (runtime/model.h): 0 at each
  // row's first token and at every input token with kTokenDocStart, else the previous plus
  // one; 0..T-1 in every row for a file without flags.
  void next(int32_t* inputs, int32_t* targets, int32_t* positions = nullptr);
  // The index of the batch next() serves; counts from 0 across epochs.
  int64_t position() const { return position_; }
  // Continues from batch `batch_index` (a checkpoint's data position); must be >= 0.
  void seek(int64_t batch_index);

  int64_t batches_per_epoch() const { return rounds_; }  // R
  int64_t B() const { return B_; }
  int64_t T() const { return T_; }
  // The first token of batch `batch_index` on this rank (what next() would read).
  int64_t batch_start(int64_t batch_index) const;

 private:
  // The rounds in the order epoch `epoch` visits them; cached for the current epoch.
  const std::vector<int64_t>& round_order(int64_t epoch) const;

  const TokenFile& file_;
  int64_t B_, T_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  int64_t rounds_;        // R
  int64_t position_ = 0;  // next batch index
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;  // (R,) round visited at each step of order_epoch_
};

// The permutation of 0..n-1 that a shuffled DataLoader uses for `epoch`. Exposed for tests.
std::vector<int64_t> shuffled_rounds(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace zt
