// TensorBoard event records (tfevents.h).
#include "train/tfevents.h"

#include <cstring>

#include "offload/crc32c.h"

namespace zt::tfevents {

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as x86 stores it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::optional<uint64_t> get_varint(std::string_view s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && at < s.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(s[at++]);
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return v;
  }
  return std::nullopt;
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame(std::string_view record) {
  std::string out, length;
  put_fixed<uint64_t>(length, record.size());
  out += length;
  put_fixed<uint32_t>(out, masked_crc32c(length));
  out.append(record);
  put_fixed<uint32_t>(out, masked_crc32c(record));
  return out;
}

std::string version_event(double wall_time) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed<double>(e, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);
    put_fixed<float>(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e;
  put_key(e, 1, 1);
  put_fixed<double>(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);
  return e;
}

std::optional<std::vector<std::string>> records(std::string_view file, std::string* why) {
  std::vector<std::string> out;
  auto fail = [&](const char* what, size_t at) {
    *why = std::string(what) + " at byte " + std::to_string(at);
    return std::optional<std::vector<std::string>>();
  };
  for (size_t at = 0; at < file.size();) {
    if (file.size() - at < 12) return fail("a record cut short", at);
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    if (length_crc != masked_crc32c(file.substr(at, 8))) return fail("a length CRC mismatch", at);
    if (file.size() - at - 12 < length + 4) return fail("a record cut short", at);
    const std::string_view record = file.substr(at + 12, length);
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    if (data_crc != masked_crc32c(record)) return fail("a record CRC mismatch", at);
    out.emplace_back(record);
    at += 12 + length + 4;
  }
  return out;
}

std::optional<int64_t> event_step(std::string_view e) {
  int64_t step = 0;
  for (size_t at = 0; at < e.size();) {
    const std::optional<uint64_t> key = get_varint(e, at);
    if (!key) return std::nullopt;
    const int wire = static_cast<int>(*key & 7);
    if (wire == 0) {
      const std::optional<uint64_t> v = get_varint(e, at);
      if (!v) return std::nullopt;
      if ((*key >> 3) == 2) step = static_cast<int64_t>(*v);
    } else if (wire == 1 || wire == 5) {
      at += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      const std::optional<uint64_t> n = get_varint(e, at);
      if (!n || *n > e.size() - at) return std::nullopt;
      at += *n;
    } else {
      return std::nullopt;
    }
    if (at > e.size()) return std::nullopt;
  }
  return step;
}

}  // namespace zt::tfevents
