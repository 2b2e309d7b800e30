// SwappedState: the chunked swap files of an NVMe-offloaded optimizer and their streaming.
#include "zero/swapped_state.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {

SwappedState::SwappedState(SwapStore& store, Device& host, std::vector<std::string> units,
                           std::vector<int64_t> sizes, std::vector<std::string> kinds)
    : store_(store), units_(std::move(units)), sizes_(std::move(sizes)), kinds_(std::move(kinds)) {
  ZT_ASSERT(units_.size() == sizes_.size(), "{} unit names for {} sizes", units_.size(),
            sizes_.size());
  int64_t largest = 0;
  for (int64_t n : sizes_) largest = std::max(largest, n);
  const size_t chunk_bytes = static_cast<size_t>(std::min(largest, kChunk)) * sizeof(float);
  for (Set& set : sets_)
    for (int k = 0; k < num_kinds(); ++k)
      set.state.push_back(host.alloc(chunk_bytes, MemCategory::kWorkspace));
  if (kinds_.empty() || chunk_bytes == 0) return;
  // The optimizer's state starts at zero: written once, from one zeroed staging buffer.
  float* zeros = sets_[0].state[1].as<float>();
  std::fill(zeros, zeros + chunk_bytes / sizeof(float), 0.0f);
  std::vector<SwapHandle> pending;
  for (size_t u = 0; u < units_.size(); ++u)
    for (int k = 1; k < num_kinds(); ++k)
      for (int64_t c = 0; c < chunks(static_cast<int>(u)); ++c)
        pending.push_back(store_.write(key(static_cast<int>(u), k, c), zeros,
                                       chunk_size(static_cast<int>(u), c) * 4));
  for (SwapHandle& h : pending) store_.wait(h);
}

SwappedState::~SwappedState() {
  for (Set& set : sets_) {
    try {
      finish(set);
    } catch (...) {  // the store reports I/O errors when closed; nothing to add here
    }
  }
}

std::string SwappedState::key(int u, int kind, int64_t chunk) const {
  return fmt::format("{}.{}.{}", units_[u], kind == 0 ? std::string("master") : kinds_[kind - 1],
                     chunk);
}

void SwappedState::finish(Set& set) {
  for (SwapHandle& h : set.pending) store_.wait(h);
  set.pending.clear();
}

void SwappedState::start_reads(Set& set, int u, int64_t c) {
  for (int k = 0; k < num_kinds(); ++k)
    set.pending.push_back(store_.read(key(u, k, c), set.state[k].data(), chunk_size(u, c) * 4));
}

void SwappedState::write_part(int u, int kind, int64_t begin, const float* values, int64_t count) {
  ZT_ASSERT(begin >= 0 && count >= 0 && begin + count <= sizes_[u],
            "unit {}: master range [{}, {}) outside its {} elements", units_[u], begin,
            begin + count, sizes_[u]);
  Set& staging = sets_[0];
  finish(staging);
  float* chunk = staging.state[0].as<float>();
  std::vector<SwapHandle> pending;
  for (int64_t c = begin / kChunk; c * kChunk < begin + count; ++c) {
    const int64_t lo = std::max(begin, c * kChunk), hi = std::min(begin + count, (c + 1) * kChunk);
    const int64_t n = chunk_size(u, c);
    if (lo == c * kChunk && hi - lo == n) {  // a whole chunk: straight from the caller's values
      pending.push_back(store_.write(key(u, kind, c), values + (lo - begin), n * 4));
      continue;
    }
    for (SwapHandle& h : pending) store_.wait(h);  // the staging chunk is free again
    pending.clear();
    SwapHandle r = store_.read(key(u, kind, c), chunk, n * 4);
    store_.wait(r);
    std::memcpy(chunk + (lo - c * kChunk), values + (lo - begin),
                static_cast<size_t>(hi - lo) * sizeof(float));
    SwapHandle w = store_.write(key(u, kind, c), chunk, n * 4);
    store_.wait(w);
  }
  for (SwapHandle& h : pending) store_.wait(h);
}

void SwappedState::update(int u, const ChunkUpdate& f) {
  const int64_t n_chunks = chunks(u);
  if (n_chunks == 0) return;
  finish(sets_[0]);
  start_reads(sets_[0], u, 0);
  for (int64_t c = 0; c < n_chunks; ++c) {
    Set& now = sets_[c % 2];
    finish(now);  // this chunk's reads
    if (c + 1 < n_chunks) {
      Set& next = sets_[(c + 1) % 2];
      finish(next);  // chunk c-1's writes: its buffers take chunk c+1
      start_reads(next, u, c + 1);
    }
    float* state[8];
    ZT_ASSERT(num_kinds() <= 8, "{} state kinds", num_kinds());
    for (int k = 0; k < num_kinds(); ++k) state[k] = now.state[k].as<float>();
    f(c * kChunk, chunk_size(u, c), state);
    for (int k = 0; k < num_kinds(); ++k)
      now.pending.push_back(store_.write(key(u, k, c), state[k], chunk_size(u, c) * 4));
  }
  for (Set& set : sets_) finish(set);
}

void SwappedState::read(int u, int kind, float* dst) {
  for (Set& set : sets_) finish(set);
  std::vector<SwapHandle> pending;
  for (int64_t c = 0; c < chunks(u); ++c)
    pending.push_back(store_.read(key(u, kind, c), dst + c * kChunk, chunk_size(u, c) * 4));
  for (SwapHandle& h : pending) store_.wait(h);
}

void SwappedState::read_part(int u, int kind, int64_t begin, int64_t count, float* dst) {
  ZT_ASSERT(begin >= 0 && count >= 0 && begin + count <= sizes_[u],
            "unit {}: range [{}, {}) outside its {} elements", units_[u], begin, begin + count,
            sizes_[u]);
  for (Set& set : sets_) finish(set);
  float* chunk = sets_[0].state[0].as<float>();
  std::vector<SwapHandle> pending;
  for (int64_t c = begin / kChunk; c * kChunk < begin + count; ++c) {
    const int64_t lo = std::max(begin, c * kChunk), hi = std::min(begin + count, (c + 1) * kChunk);
    const int64_t n = chunk_size(u, c);
    if (lo == c * kChunk && hi - lo == n) {  // a whole chunk: straight into the caller's memory
      pending.push_back(store_.read(key(u, kind, c), dst + (lo - begin), n * 4));
      continue;
    }
    SwapHandle r = store_.read(key(u, kind, c), chunk, n * 4);
    store_.wait(r);
    std::memcpy(dst + (lo - begin), chunk + (lo - c * kChunk),
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
  for (SwapHandle& h : pending) store_.wait(h);
}

int64_t SwappedState::bytes() const {
  int64_t total = 0;
  for (int64_t n : sizes_) total += n * num_kinds() * static_cast<int64_t>(sizeof(float));
  return total;
}

}  // namespace zt
