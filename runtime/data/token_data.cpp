// Token files (llm.c's format and versions 2 and 3): atomic write, full read with validation;
// DataLoader's batch order, loss mask and positions. POSIX I/O only; no tokenisation, no
// communication.
#include "runtime/data/token_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include "runtime/model.h"
#include "runtime/status.h"

namespace zt {

bool is_packed_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t header[2] = {0, 0};
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  return in && header[0] == kTokenFileMagic && header[1] == kTokenFileVersionPacked;
}

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read without byte swapping");

namespace {

// write() until everything is written; false with errno set on failure.
bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// read() exactly `bytes`; returns how many were read before end of file, or -1 on error.
ssize_t read_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd, p + done, bytes - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

std::string parent_directory(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes the descriptor on scope exit.
struct FileDescriptor {
  int fd = -1;
  explicit FileDescriptor(int f) : fd(f) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

// Uniform in [0, bound) from the generator's raw 64-bit output: rejection keeps it exactly
// uniform, and (unlike std::uniform_int_distribution) the result is the same on every
// standard library.
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t excess = (UINT64_MAX % bound + 1) % bound;  // 2^64 mod bound
  uint64_t x;
  do {
    x = rng();
  } while (x > UINT64_MAX - excess);
  return x % bound;
}

// Whether any id needs uint32; negative ids and more than INT32_MAX tokens throw kInput.
bool check_ids_for_writing(const std::string& path, std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw_input(fmt::format("cannot write {}: {} tokens exceed the format's limit of {}", path,
                            tokens.size(), INT32_MAX));
  }
  bool wide = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      throw_input(fmt::format("cannot write {}: token id {} at position {} is negative", path,
                              tokens[i], i));
    }
    wide = wide || tokens[i] > 65535;
  }
  return wide;
}

// The first way `flags` breaks version 3's rules for blocks of `packed_length`, or nullopt.
// The caller has checked packed_length > 0.
std::optional<std::string> flag_problem(std::span<const uint8_t> flags, int64_t packed_length) {
  const auto n = static_cast<int64_t>(flags.size());
  if (n == 0 || (n - 1) % packed_length != 0) {
    return fmt::format(
        "{} tokens are not whole blocks of the packed length {} plus the one "
        "trailing token",
        n, packed_length);
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t f = flags[static_cast<size_t>(i)];
    if ((f & ~(kTokenLoss | kTokenDocStart)) != 0) {
      return fmt::format(
          "token {} has flags 0x{:02x}; only bit 0 (loss) and bit 1 (document "
          "start) are defined",
          i, f);
    }
    if ((f & kTokenLoss) && (f & kTokenDocStart)) {
      return fmt::format(
          "token {} both starts a document and counts in the loss; nothing "
          "before a document's first token predicts it",
          i);
    }
    if (i % packed_length == 0 && !(f & kTokenDocStart)) {
      return fmt::format("token {} starts block {} of {} tokens but not a document", i,
                         i / packed_length, packed_length);
    }
  }
  return std::nullopt;
}

// Writes the header, the ids (uint32 when `wide`, else uint16) and `flags` to path + ".tmp",
// fsyncs it, renames it to `path` and fsyncs the directory.
void write_atomically(const std::string& path, const int32_t (&header)[kTokenFileHeaderInts],
                      std::span<const int32_t> tokens, bool wide, std::span<const uint8_t> flags) {
  const std::string tmp_path = path + ".tmp";
  FileDescriptor out(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (out.fd < 0) {
    throw_input(fmt::format("cannot create {}: {}", tmp_path, std::strerror(errno)));
  }
  auto fail = [&](const char* what) {
    int saved = errno;
    ::close(out.release());
    ::unlink(tmp_path.c_str());
    throw_system(fmt::format("{} {} failed: {}", what, tmp_path, std::strerror(saved)));
  };

  if (!write_all(out.fd, header, sizeof header)) fail("writing");
  std::vector<uint16_t> chunk;
  std::vector<uint32_t> wide_chunk;
  constexpr size_t kChunkTokens = size_t{1} << 20;
  for (size_t begin = 0; begin < tokens.size(); begin += kChunkTokens) {
    size_t end = std::min(tokens.size(), begin + kChunkTokens);
    bool written = false;
    if (wide) {
      wide_chunk.assign(tokens.begin() + begin, tokens.begin() + end);
      written = write_all(out.fd, wide_chunk.data(), wide_chunk.size() * sizeof(uint32_t));
    } else {
      chunk.assign(tokens.begin() + begin, tokens.begin() + end);
      written = write_all(out.fd, chunk.data(), chunk.size() * sizeof(uint16_t));
    }
    if (!written) fail("writing");
  }
  if (!write_all(out.fd, flags.data(), flags.size())) fail("writing");
  if (::fsync(out.fd) != 0) fail("fsync of");
  if (::close(out.release()) != 0) fail("closing");
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp_path.c_str());
    throw_system(fmt::format("renaming {} to {} failed: {}", tmp_path, path, std::strerror(saved)));
  }
  // Make the rename itself durable. Some file systems cannot fsync a directory (EINVAL).
  const std::string dir = parent_directory(path);
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.fd < 0 || (::fsync(dir_fd.fd) != 0 && errno != EINVAL)) {
    throw_system(fmt::format("fsync of directory {} failed: {}", dir, std::strerror(errno)));
  }
}

}  // namespace

void write_token_file(const std::string& path, std::span<const int32_t> tokens) {
  const bool wide = check_ids_for_writing(path, tokens);
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = wide ? kTokenFileVersionWide : kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  write_atomically(path, header, tokens, wide, {});
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens,
                      std::span<const uint8_t> flags, int64_t packed_length) {
  const bool wide = check_ids_for_writing(path, tokens);
  if (flags.size() != tokens.size()) {
    throw_input(fmt::format("cannot write {}: {} flags for {} tokens; give one per token", path,
                            flags.size(), tokens.size()));
  }
  if (packed_length <= 0 || packed_length > INT32_MAX) {
    throw_input(fmt::format("cannot write {}: the packed length must be 1..{}; got {}", path,
                            INT32_MAX, packed_length));
  }
  if (auto problem = flag_problem(flags, packed_length)) {
    throw_input(fmt::format("cannot write {}: {}", path, *problem));
  }
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersionPacked;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = wide ? 4 : 2;
  header[4] = static_cast<int32_t>(packed_length);
  write_atomically(path, header, tokens, wide, flags);
}

TokenFile TokenFile::open(const std::string& path, int64_t vocab_size) {
  ZT_ASSERT(vocab_size > 0, "vocab_size={}", vocab_size);
  FileDescriptor in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) {
    if (errno == ENOENT) throw_input(fmt::format("token file {} does not exist", path));
    throw_input(fmt::format("cannot open token file {}: {}", path, std::strerror(errno)));
  }
  struct stat info;
  if (::fstat(in.fd, &info) != 0) {
    throw_system(fmt::format("cannot stat token file {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    throw_input(fmt::format("token file {} is not a regular file", path));
  }
  const auto file_bytes = static_cast<int64_t>(info.st_size);
  if (file_bytes < static_cast<int64_t>(kTokenFileHeaderBytes)) {
    throw_input(
        fmt::format("token file {} is {} bytes, shorter than the {}-byte header; not an "
                    "llm.c token file",
                    path, file_bytes, kTokenFileHeaderBytes));
  }

  int32_t header[kTokenFileHeaderInts];
  if (read_all(in.fd, header, sizeof header) != static_cast<ssize_t>(sizeof header)) {
    throw_system(
        fmt::format("cannot read the header of token file {}: {}", path, std::strerror(errno)));
  }
  if (header[0] != kTokenFileMagic) {
    throw_input(
        fmt::format("token file {} has magic number {}, expected {}; not an llm.c token "
                    "file",
                    path, header[0], kTokenFileMagic));
  }
  const int32_t version = header[1];
  if (version != kTokenFileVersion && version != kTokenFileVersionWide &&
      version != kTokenFileVersionPacked) {
    throw_input(fmt::format(
        "token file {} has version {}; only versions {} (uint16 tokens, "
        "llm.c's), {} (uint32 tokens) and {} (tokens with flags) are "
        "supported",
        path, version, kTokenFileVersion, kTokenFileVersionWide, kTokenFileVersionPacked));
  }
  const bool packed = version == kTokenFileVersionPacked;
  if (packed) {
    if (header[3] != 2 && header[3] != 4) {
      throw_input(
          fmt::format("token file {} (version 3) has {} bytes per token id in "
                      "header[3]; expected 2 or 4",
                      path, header[3]));
    }
    if (header[4] <= 0) {
      throw_input(
          fmt::format("token file {} (version 3) has packed length {} in header[4]; "
                      "expected > 0",
                      path, header[4]));
    }
    for (size_t i = 5; i < kTokenFileHeaderInts; ++i) {
      if (header[i] != 0) {
        throw_input(
            fmt::format("token file {} (version 3) has {} in header[{}]; header[5..255] "
                        "must be 0",
                        path, header[i], i));
      }
    }
  }
  const bool wide = packed ? header[3] == 4 : version == kTokenFileVersionWide;
  const int64_t width = wide ? 4 : 2;
  const int64_t token_bytes = packed ? width + 1 : width;  // the id and, in version 3, its flags
  const int64_t count = header[2];
  const int64_t payload_bytes = file_bytes - static_cast<int64_t>(kTokenFileHeaderBytes);
  if (count < 0) {
    throw_input(fmt::format("token file {} declares a negative token count {}", path, count));
  }
  if (payload_bytes < token_bytes * count) {
    throw_input(
        fmt::format("token file {} is truncated: the header declares {} tokens ({} "
                    "bytes) but only {} bytes follow it",
                    path, count, token_bytes * count, payload_bytes));
  }
  if (payload_bytes > token_bytes * count) {
    throw_input(
        fmt::format("token file {} has {} trailing bytes after the {} tokens its header "
                    "declares",
                    path, payload_bytes - token_bytes * count, count));
  }

  TokenFile file;
  file.path_ = path;
  file.version_ = version;
  file.wide_ = wide;
  void* data = nullptr;
  if (wide) {
    file.wide_tokens_.resize(static_cast<size_t>(count));
    data = file.wide_tokens_.data();
  } else {
    file.tokens_.resize(static_cast<size_t>(count));
    data = file.tokens_.data();
  }
  const size_t bytes = static_cast<size_t>(count * width);
  ssize_t got = read_all(in.fd, data, bytes);
  if (got < 0) {
    throw_system(fmt::format("error reading token file {}: {}", path, std::strerror(errno)));
  }
  if (static_cast<size_t>(got) != bytes) {  // shrank between fstat and read
    throw_input(fmt::format("token file {} is truncated: expected {} token bytes, read {}", path,
                            bytes, got));
  }
  if (packed) {
    file.packed_length_ = header[4];
    file.flags_.resize(static_cast<size_t>(count));
    got = read_all(in.fd, file.flags_.data(), file.flags_.size());
    if (got < 0) {
      throw_system(fmt::format("error reading token file {}: {}", path, std::strerror(errno)));
    }
    if (static_cast<size_t>(got) != file.flags_.size()) {
      throw_input(fmt::format("token file {} is truncated: expected {} flag bytes, read {}", path,
                              file.flags_.size(), got));
    }
    if (auto problem = flag_problem(file.flags_, file.packed_length_)) {
      throw_input(fmt::format("token file {}: {}", path, *problem));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if (file.at(i) < 0 || file.at(i) >= vocab_size) {  // a uint32 past INT32_MAX reads negative
      throw_input(
          fmt::format("token file {}: token id {} at position {} is not below the "
                      "vocabulary size {}",
                      path,
                      wide ? file.wide_tokens_[static_cast<size_t>(i)]
                           : uint32_t{file.tokens_[static_cast<size_t>(i)]},
                      i, vocab_size));
    }
  }
  return file;
}

void TokenFile::copy(int64_t begin, int64_t n, int32_t* dst) const {
  if (wide_)
    std::copy_n(wide_tokens_.begin() + begin, n, dst);
  else
    std::copy_n(tokens_.begin() + begin, n, dst);
}

int64_t TokenFile::loss_tokens(int64_t begin, int64_t n) const {
  if (!has_flags()) return n;
  const auto first = flags_.begin() + begin;
  return std::count_if(first, first + n, [](uint8_t f) { return (f & kTokenLoss) != 0; });
}

std::vector<int64_t> shuffled_rounds(int64_t n, uint64_t seed, int64_t epoch) {
  // std::seed_seq and mt19937_64 are fully specified by the standard, so every rank and
  // every platform draws the same permutation.
  const auto e = static_cast<uint64_t>(epoch);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    auto j = static_cast<int64_t>(draw_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DataLoader::DataLoader(const TokenFile& file, int64_t B, int64_t T, int rank, int world,
                       bool shuffle, uint64_t seed)
    : file_(file), B_(B), T_(T), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed) {
  if (B < 1 || T < 1) {
    throw_input(
        fmt::format("data loader for {}: batch size B and sequence length T must be "
                    ">= 1; got B={} T={}",
                    file.path(), B, T));
  }
  ZT_ASSERT(world >= 1 && rank >= 0 && rank < world, "rank={} world={}", rank, world);
  const int64_t L = file.packed_length();
  if (file.has_flags() && T % L != 0) {
    throw_input(
        fmt::format("data loader for {}: seq_len T={} is not a multiple of the file's "
                    "packed length {}, so rows would cut examples; use T = {}, {}, "
                    "{}, ... or prepare the file again with zt-prep --seq-len {}",
                    file.path(), T, L, L, 2 * L, 3 * L, T));
  }
  int64_t round_tokens = 0;  // world*B*T
  const bool overflow = __builtin_mul_overflow(B, T, &round_tokens) ||
                        __builtin_mul_overflow(round_tokens, int64_t{world}, &round_tokens);
  rounds_ = overflow ? 0 : std::max<int64_t>(file.size() - 1, 0) / round_tokens;
  if (rounds_ == 0) {
    throw_input(
        fmt::format("token file {} is too small for B={} T={} world={}: one round needs "
                    "world*B*T+1 tokens, the file has {}",
                    file.path(), B, T, world, file.size()));
  }
}

const std::vector<int64_t>& DataLoader::round_order(int64_t epoch) const {
  if (epoch != order_epoch_) {
    order_ = shuffled_rounds(rounds_, seed_, epoch);
    order_epoch_ = epoch;
  }
  return order_;
}

int64_t DataLoader::batch_start(int64_t batch_index) const {
  ZT_ASSERT(batch_index >= 0, "batch_index={}", batch_index);
  const int64_t step = batch_index % rounds_;
  const int64_t round = shuffle_ ? round_order(batch_index / rounds_)[step] : step;
  return (round * world_ + rank_) * B_ * T_;
}

void DataLoader::next(int32_t* inputs, int32_t* targets, int32_t* positions) {
  const int64_t start = batch_start(position_);
  const int64_t n = B_ * T_;
  // The window of B*T + 1 tokens: inputs its first B*T, targets its last.
  file_.copy(start, n, inputs);
  file_.copy(start + 1, n, targets);
  if (file_.has_flags()) {
    for (int64_t i = 0; i < n; ++i) {
      if (!(file_.flag(start + 1 + i) & kTokenLoss)) targets[i] = kIgnoreTarget;
    }
  }
  if (positions != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      const bool restart =
          i % T_ == 0 || (file_.has_flags() && (file_.flag(start + i) & kTokenDocStart));
      positions[i] = restart ? 0 : positions[i - 1] + 1;
    }
  }
  ++position_;
}

void DataLoader::seek(int64_t batch_index) {
  if (batch_index < 0) {
    throw_input(
        fmt::format("data position must be >= 0; got {} for {}", batch_index, file_.path()));
  }
  position_ = batch_index;
}

}  // namespace zt
