// TensorBoard's event files, as much of the format as zt-train writes and reads back: TFRecord
// framing (a little-endian uint64 length, the masked CRC32C of those 8 bytes, the record, the
// masked CRC32C of the record; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8) around
// tensorflow.Event messages in protobuf's wire format:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// No protobuf library: these few fields are encoded by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zt::tfevents {

uint32_t masked_crc32c(std::string_view bytes);
// One record framed for the file.
std::string frame(std::string_view record);
// The Event that starts a file: wall_time, file_version "brain.Event:2".
std::string version_event(double wall_time);
// A step's Event: wall_time, step, a Summary of (tag, simple_value) in order.
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values);
// The records of a file's bytes, each checked (lengths, both CRCs); nullopt at the first record
// that is not whole or whose CRC does not match, with `why` set.
std::optional<std::vector<std::string>> records(std::string_view file, std::string* why);
// An Event's step field (0 when absent, as protobuf reads it); nullopt when it does not parse.
std::optional<int64_t> event_step(std::string_view event);

}  // namespace zt::tfevents
