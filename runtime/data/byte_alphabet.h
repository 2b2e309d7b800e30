// GPT-2's byte alphabet (bytes_to_unicode in OpenAI's encoder.py, Hugging Face's ByteLevel):
// every byte stands for one printable code point so vocabulary files stay printable. Printable
// Latin-1 bytes keep their code point; the other 68 (controls, space, DEL, NBSP, soft hyphen)
// take U+0100, U+0101, ... in ascending byte order. Pure string functions; no state.
#pragma once

#include <string>
#include <string_view>

namespace zt {

// Decodes one vocabulary-file token ("Ġworld") to the raw bytes it stands for (" world").
// Returns false, leaving `bytes` unspecified, when the token is empty or not UTF-8 over the
// alphabet.
bool alphabet_to_bytes(std::string_view token, std::string& bytes);

}  // namespace zt
