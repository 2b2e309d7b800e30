// OffloadedParams: shards in host memory, or in swap files through a pool of host buffers that
// prefetches the shards named next, keeps clean ones while there is room and drops the least
// recently used; a corrupted swap file is refused naming it.
#include "zero/offloaded_params.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "tests/offload/offload_test_util.h"

namespace zt {
namespace {

std::vector<std::byte> pattern(size_t bytes, int seed) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return v;
}

void write_shard(OffloadedParams& p, int slot, const std::vector<std::byte>& values) {
  std::memcpy(p.begin_write(slot), values.data(), values.size());
  p.finish_write(slot);
}

bool fetch_equals(OffloadedParams& p, int slot, const std::vector<std::byte>& values) {
  const bool same = std::memcmp(p.fetch(slot), values.data(), values.size()) == 0;
  p.release(slot);
  return same;
}

TEST(OffloadedParams, HostShardsAreTheirOwnBuffers) {
  CpuDevice host;
  OffloadedParams p(host, nullptr, 1, 1000);
  const int a = p.add("h0", 1000), b = p.add("h1", 10);
  EXPECT_EQ(host.memory().current(MemCategory::kParams), 1010u);
  const auto va = pattern(1000, 1), vb = pattern(10, 2);
  write_shard(p, a, va);
  write_shard(p, b, vb);
  EXPECT_TRUE(fetch_equals(p, a, va));
  EXPECT_TRUE(fetch_equals(p, b, vb));
  EXPECT_EQ(p.nvme_bytes(), 0);
}

class SwappedParams : public testing::Test {
 protected:
  SwappedParams() {
    SwapStoreOptions o;
    o.nvme_path = dir_.str();
    store_.emplace(o);
  }
  test::ScratchDir dir_;
  CpuDevice host_;
  std::optional<SwapStore> store_;
};

TEST_F(SwappedParams, PrefetchedAndKeptShardsAreNotReadAgain) {
  const size_t bytes = 10000;
  OffloadedParams p(host_, &*store_, 2, bytes);
  std::vector<std::vector<std::byte>> values;
  for (int u = 0; u < 3; ++u) {
    EXPECT_EQ(p.add("h" + std::to_string(u), bytes), u);
    values.push_back(pattern(bytes, u));
  }
  for (int u = 0; u < 3; ++u) write_shard(p, u, values[u]);
  // Two buffers, each rounded up to 4 KiB and aligned: 12 KiB + 4 KiB.
  EXPECT_EQ(host_.memory().current(MemCategory::kParams), 2u * (12288 + 4096));
  EXPECT_EQ(p.nvme_bytes(), 3 * static_cast<int64_t>(bytes));
  // The pool holds h1 and h2 (written last); h0 must be read.
  EXPECT_EQ(p.reads(), 0);
  EXPECT_TRUE(fetch_equals(p, 0, values[0]));
  EXPECT_EQ(p.reads(), 1);
  // h0 (used last) and h2 are kept; a prefetch of h1 drops h2, which the list does not name.
  const int next[] = {1};
  p.prefetch(next);
  EXPECT_EQ(p.reads(), 2);
  EXPECT_TRUE(fetch_equals(p, 1, values[1]));
  EXPECT_TRUE(fetch_equals(p, 0, values[0]));
  EXPECT_EQ(p.reads(), 2) << "a prefetched or kept shard was read again";
  // A prefetch never drops a shard it names, nor one in use.
  const void* in_use = p.fetch(0);
  const int both[] = {1, 2};
  p.prefetch(both);
  EXPECT_EQ(p.reads(), 2) << "h2 took a buffer from h0 (in use) or h1 (named)";
  EXPECT_EQ(std::memcmp(in_use, values[0].data(), bytes), 0);
  p.release(0);
  EXPECT_TRUE(fetch_equals(p, 2, values[2]));
  EXPECT_EQ(p.reads(), 3);
  // An update replaces the file's bytes: read back after being dropped.
  const auto changed = pattern(bytes, 9);
  write_shard(p, 1, changed);
  EXPECT_TRUE(fetch_equals(p, 0, values[0]));
  EXPECT_TRUE(fetch_equals(p, 2, values[2]));
  EXPECT_TRUE(fetch_equals(p, 1, changed));
}

TEST_F(SwappedParams, ACorruptedSwapFileIsRefusedNamingIt) {
  const size_t bytes = 8192;
  OffloadedParams p(host_, &*store_, 1, bytes);
  p.add("h0", bytes);
  p.add("h1", bytes);
  write_shard(p, 0, pattern(bytes, 1));
  write_shard(p, 1, pattern(bytes, 2));  // drops h0 from the only buffer
  const std::string path = store_->path_of("h0.params");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('\x5a');
  }
  const std::string message = test::thrown([&] { p.fetch(0); }).message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

}  // namespace
}  // namespace zt
