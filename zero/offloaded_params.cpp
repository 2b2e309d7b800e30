// OffloadedParams: host-memory shards, or swap files with a pool of host buffers.
#include "zero/offloaded_params.h"

#include <algorithm>
#include <cstring>

#include "runtime/status.h"

namespace zt {

namespace {

// Pool buffers start on a kAioAlignment boundary, so O_DIRECT reads and writes go straight
// between them and the file (async_io.h stages only an unaligned tail).
std::byte* aligned(const Buffer& b) {
  const auto at = reinterpret_cast<uintptr_t>(b.data());
  const auto a = static_cast<uintptr_t>(kAioAlignment);
  return reinterpret_cast<std::byte*>((at + a - 1) / a * a);
}

}  // namespace

OffloadedParams::OffloadedParams(Device& host, SwapStore* swap, int buffers, size_t largest)
    : host_(host), swap_(swap), buffers_(buffers), largest_(largest) {
  ZT_ASSERT(!swap || buffers >= 1, "offloaded parameters on NVMe need a pool buffer; got {}",
            buffers);
}

OffloadedParams::~OffloadedParams() {
  for (PoolBuffer& b : pool_) {
    try {
      settle(b);
    } catch (...) {  // the store reports I/O errors when closed
    }
  }
}

int OffloadedParams::add(std::string unit, size_t bytes) {
  ZT_ASSERT(bytes <= largest_, "unit {}: a {}-byte shard, above the {} bytes announced", unit,
            bytes, largest_);
  Slot s;
  s.key = unit + ".params";
  s.bytes = bytes;
  if (!swap_) s.own = host_.alloc(bytes, MemCategory::kParams);
  slots_.push_back(std::move(s));
  return static_cast<int>(slots_.size()) - 1;
}

void OffloadedParams::make_pool() {
  if (!pool_.empty()) return;
  // Every buffer at once, so the host tier's bytes are buffers x largest shard from the first
  // use on, whatever the order of use.
  const size_t a = static_cast<size_t>(kAioAlignment);
  const size_t size = (largest_ + a - 1) / a * a + a;
  pool_.resize(static_cast<size_t>(buffers_));
  for (PoolBuffer& b : pool_) b.memory = host_.alloc(size, MemCategory::kParams);
}

void OffloadedParams::settle(PoolBuffer& b) {
  if (b.pending.valid()) {
    SwapHandle h = std::move(b.pending);
    b.pending = SwapHandle();
    swap_->wait(h);
  }
}

int OffloadedParams::take_buffer(int slot, std::span<const int> keep) {
  make_pool();
  int best = -1;  // a free buffer, else the least recently used one that may be dropped
  for (size_t i = 0; i < pool_.size(); ++i) {
    const PoolBuffer& b = pool_[i];
    if (b.slot < 0) {
      best = static_cast<int>(i);
      break;
    }
    if (b.pins > 0 || std::find(keep.begin(), keep.end(), b.slot) != keep.end()) continue;
    if (best < 0 || b.used < pool_[static_cast<size_t>(best)].used) best = static_cast<int>(i);
  }
  if (best < 0) return -1;
  PoolBuffer& b = pool_[static_cast<size_t>(best)];
  settle(b);  // a write still in flight finishes before its buffer takes other bytes
  if (b.slot >= 0) slots_[b.slot].buffer = -1;  // clean: its file has the same bytes
  b.slot = slot;
  b.used = ++clock_;
  slots_[slot].buffer = best;
  return best;
}

void OffloadedParams::prefetch(std::span<const int> slots) {
  if (!swap_) return;
  for (int slot : slots) {
    Slot& s = slots_[slot];
    if (s.buffer >= 0 || !s.written) continue;  // in host memory (or in flight) already
    if (take_buffer(slot, slots) < 0) return;   // every buffer holds a shard in use or wanted
    PoolBuffer& b = holder(slot);
    b.pending = swap_->read(s.key, aligned(b.memory), static_cast<int64_t>(s.bytes));
    ++reads_;
  }
}

const void* OffloadedParams::fetch(int slot) {
  Slot& s = slots_[slot];
  ZT_ASSERT(s.written, "shard {} fetched before it was written", s.key);
  if (!swap_) return s.own.data();
  if (s.buffer < 0) {
    const int one[] = {slot};
    ZT_ASSERT(take_buffer(slot, one) >= 0, "no free buffer for {}: {} of {} in use", s.key,
              pool_.size(), pool_.size());
    PoolBuffer& b = holder(slot);
    b.pending = swap_->read(s.key, aligned(b.memory), static_cast<int64_t>(s.bytes));
    ++reads_;
  }
  PoolBuffer& b = holder(slot);
  settle(b);  // its read (or the last write, which is quick to finish by now)
  ++b.pins;
  b.used = ++clock_;
  return aligned(b.memory);
}

void OffloadedParams::release(int slot) {
  if (!swap_) return;
  PoolBuffer& b = holder(slot);
  ZT_ASSERT(b.pins > 0, "shard {} released without a fetch", slots_[slot].key);
  --b.pins;
}

void* OffloadedParams::begin_write(int slot) {
  Slot& s = slots_[slot];
  if (!swap_) return s.own.data();
  if (s.buffer < 0) {
    const int one[] = {slot};
    ZT_ASSERT(take_buffer(slot, one) >= 0, "no free buffer for {}", s.key);
  }
  PoolBuffer& b = holder(slot);
  settle(b);  // its bytes are about to change: the read or write using them finishes first
  ++b.pins;
  b.used = ++clock_;
  return aligned(b.memory);
}

void OffloadedParams::finish_write(int slot) {
  Slot& s = slots_[slot];
  s.written = true;
  if (!swap_) return;
  PoolBuffer& b = holder(slot);
  ZT_ASSERT(b.pins > 0, "shard {}: finish_write without begin_write", s.key);
  --b.pins;
  b.pending = swap_->write(s.key, aligned(b.memory), static_cast<int64_t>(s.bytes));
}

void OffloadedParams::read(int slot, void* dst) {
  const void* src = fetch(slot);
  std::memcpy(dst, src, slots_[slot].bytes);
  release(slot);
}

int64_t OffloadedParams::nvme_bytes() const {
  if (!swap_) return 0;
  int64_t total = 0;
  for (const Slot& s : slots_) total += static_cast<int64_t>(s.bytes);
  return total;
}

}  // namespace zt
