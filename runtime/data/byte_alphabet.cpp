// The byte alphabet's inverse, built once (byte_alphabet.h).
#include "runtime/data/byte_alphabet.h"

#include <array>

namespace zt {

namespace {

bool byte_is_printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<int, 512> code_point_to_byte;  // -1 where a code point is not in the alphabet
  ByteAlphabet() {
    code_point_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) code_point_to_byte[byte_is_printable(b) ? b : next++] = b;
  }
};

}  // namespace

bool alphabet_to_bytes(std::string_view token, std::string& bytes) {
  static const ByteAlphabet alphabet;
  bytes.clear();
  size_t i = 0;
  while (i < token.size()) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    int code_point;
    if (c < 0x80) {
      code_point = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      code_point = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // the alphabet ends at U+0143: two UTF-8 bytes at most
    }
    if (code_point >= 512 || alphabet.code_point_to_byte[code_point] < 0) return false;
    bytes.push_back(static_cast<char>(alphabet.code_point_to_byte[code_point]));
  }
  return !bytes.empty();
}

}  // namespace zt
