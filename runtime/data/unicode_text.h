// UTF-8 and Unicode helpers for the tokenizer's normalizers, pre-tokenizers and decoders:
// decoding one character, character classes as Hugging Face's Rust `tokenizers` tests them
// (char::is_whitespace, char::is_numeric, ...), the four normalisation forms and lowercasing.
// The tables are utf8proc's. Text that is not valid UTF-8 is handled a byte at a time: a stray
// byte is a character of its own that belongs to no class and is left as it is. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

// The character starting at text[pos] (pos < size): sets `code_point` (-1 for a byte that does
// not start valid UTF-8) and returns its length in bytes (1 for such a byte).
size_t utf8_char(std::string_view text, size_t pos, int32_t& code_point);
// Appends `code_point` as UTF-8.
void append_utf8(std::string& out, int32_t code_point);
// The number of characters (stray bytes count one each).
size_t utf8_length(std::string_view text);

bool is_whitespace(int32_t code_point);   // the White_Space property
bool is_numeric(int32_t code_point);      // general category Nd, Nl or No
bool is_punctuation(int32_t code_point);  // ASCII punctuation, or general category P*
bool is_mark(int32_t code_point);         // general category Mn, Mc or Me
bool is_word_char(int32_t code_point);    // letters, marks, Nd, Pc (a regex's Unicode \w)

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// `text` in normal form `form`; runs that are not valid UTF-8 are copied as they are.
std::string normalize_unicode(std::string_view text, NormalForm form);
// Every character lowercased on its own (U+0130 becomes "i" + U+0307, as Rust's to_lowercase).
std::string lowercase(std::string_view text);

}  // namespace zt
