// runtime/data/unicode_text.h's UTF-8 checks: is_valid_utf8 and utf8_lossy, whose replacement
// of ill-formed bytes must be String::from_utf8_lossy's (and the WHATWG decoder's: the
// expectations below are what node's TextDecoder gives), since decode() hands its text to
// users as Hugging Face's tokenizers would. The character classes and normal forms are pinned
// through the normalizers and pre-tokenizers in tokenizer_parts_test.cpp.
#include "runtime/data/unicode_text.h"

#include <gtest/gtest.h>

#include <string>

namespace zt {
namespace {

const std::string kR = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8Test, ValidTextIsKept) {
  for (const std::string text : {"", "abc", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xEF\xBB\xBFx",
                                 "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF", "\xE4\xBD\xA0 ok"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(is_valid_utf8(text));
    EXPECT_EQ(utf8_lossy(text), text);
  }
}

TEST(Utf8Test, EachMaximalSubpartIsOneReplacement) {
  struct Case {
    std::string bytes, lossy;
  };
  const Case cases[] = {
      {"\xC3", kR},          // a cut 2-byte character
      {"\xF0\x9F\x98", kR},  // a cut emoji: one, not three
      {"a\xF0\x9F\x98\xF0\x9F\x98\x80", "a" + kR + "\xF0\x9F\x98\x80"},  // cut, then whole
      {"\xE4\xBD\xA0\xF0", "\xE4\xBD\xA0" + kR},  // whole, then a lone lead byte
      {std::string("\xE2\x82") + "a", kR + "a"},  // an ASCII byte ends the subpart
      {"\x80\x80", kR + kR},                      // stray continuation bytes
      {"\xFF\xFE", kR + kR},                      // never in UTF-8
      {"\xF5", kR},                               // past U+10FFFF as a lead
      {"\xC0\xAF", kR + kR},                      // overlong lead C0
      {"\xE0\x80\x80", kR + kR + kR},             // overlong 3-byte form
      {"\xED\xA0\x80", kR + kR + kR},             // a surrogate
      {"\xF4\x90\x80\x80", kR + kR + kR + kR},    // past U+10FFFF
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.bytes));
    EXPECT_FALSE(is_valid_utf8(c.bytes));
    EXPECT_EQ(utf8_lossy(c.bytes), c.lossy);
  }
}

}  // namespace
}  // namespace zt
