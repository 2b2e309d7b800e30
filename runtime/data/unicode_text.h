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
// Whether `text` is well-formed UTF-8 (no stray byte, overlong form, surrogate or code point
// past U+10FFFF).
bool is_valid_utf8(std::string_view text);
// `bytes` with each maximal subpart of an ill-formed sequence replaced by one U+FFFD: the
// longest run that starts a well-formed character but does not complete it, else a single
// byte (Unicode's recommended practice, as Rust's String::from_utf8_lossy and the WHATWG
// decoder apply it: "\xF0\x9F\x98" is one U+FFFD, "\x80\x80" two). Valid text comes back as is.
std::string utf8_lossy(std::string_view bytes);

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
