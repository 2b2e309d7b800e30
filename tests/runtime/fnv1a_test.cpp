// runtime/fnv1a.h: FNV-1a 64 with the standard basis gives the published test vectors (bytes at
// and above 0x80 read as unsigned), is usable at compile time, and with kNameHashOffset gives
// the values the name hashes of zero/param_init.cpp and model_zoo/lora.cpp computed before they
// shared this header (their own loop: h = 1469598103934665603; h = (h ^ unsigned byte) *
// 1099511628211), so parameter initialisation and LoRA dropout masks keep their bits.
#include "runtime/fnv1a.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace zt {
namespace {

using namespace std::string_view_literals;

static_assert(fnv1a64("") == 0xcbf29ce484222325ull);
static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
static_assert(fnv1a64("", kNameHashOffset) == kNameHashOffset);

TEST(Fnv1aTest, StandardVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  // The defaults are the standard basis and prime.
  EXPECT_EQ(fnv1a64("foobar", 14695981039346656037ull, 1099511628211ull), 0x85944171f73967e8ull);
}

TEST(Fnv1aTest, HighBytesAreUnsigned) {
  EXPECT_EQ(fnv1a64("\xff\x80"sv), 0x0a9a2607b6f6e56aull);
  // An embedded NUL is a byte like any other.
  EXPECT_NE(fnv1a64("a\0b"sv), fnv1a64("a"));
}

TEST(Fnv1aTest, NameHashOffsetKeepsTheOldValues) {
  EXPECT_EQ(kNameHashOffset, 1469598103934665603ull);
  // Values of the former hash_name (zero/param_init.cpp, model_zoo/lora.cpp), computed from it.
  EXPECT_EQ(fnv1a64("", kNameHashOffset), 0x14650fb0739d0383ull);
  EXPECT_EQ(fnv1a64("a", kNameHashOffset), 0x44bd8ad473cd9906ull);
  EXPECT_EQ(fnv1a64("wte.weight", kNameHashOffset), 0x82f53633c3765487ull);
  EXPECT_EQ(fnv1a64("h.0.attn.c_attn.weight", kNameHashOffset), 0x0d244ed0026b252bull);
  EXPECT_EQ(fnv1a64("model.layers.0.self_attn.q_proj", kNameHashOffset), 0x9d82955c19268a21ull);
  EXPECT_EQ(fnv1a64("model.layers.0.self_attn.q_proj.lora_A.weight", kNameHashOffset),
            0x232340e2eaf86959ull);
  EXPECT_EQ(fnv1a64("\xff\x80"sv, kNameHashOffset), 0x9a50c900c533a95cull);
  EXPECT_EQ(fnv1a64("a\0b"sv, kNameHashOffset), 0xe02908510caa06f0ull);
  // From a std::string, as the callers pass it.
  EXPECT_EQ(fnv1a64(std::string("wte.weight"), kNameHashOffset), 0x82f53633c3765487ull);
}

}  // namespace
}  // namespace zt
