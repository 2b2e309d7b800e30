// What the runtime/config suites (config_test.cpp, config_values_test.cpp) share: the smallest
// valid config, parse, the kInput message parse_config throws (checked to be one line naming the
// file), JSON edits by pointer, a case of an edit and its error, and EXPECT_CONTAINS. Helpers
// only; no tests here.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/config.h"
#include "runtime/status.h"

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace zt::config_test {

using nlohmann::json;

inline const std::string kSource = "configs/x.json";

// The smallest valid config: one batch key and the required zt keys.
inline json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

inline Config parse(const json& j, int world = 1) { return parse_config(j, kSource, world); }

// The message of the kInput error parse_config throws; checks the error is one line and names
// the file.
inline std::string input_error(const json& j, int world = 1) {
  try {
    parse(j, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_EQ(e.message().rfind(kSource + ": ", 0), 0u) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return {};
}

// `j` with `value` set at the JSON pointer `pointer` ("/zt/seq_len").
inline json with(json j, const std::string& pointer, const json& value) {
  j[json::json_pointer(pointer)] = value;
  return j;
}
inline json without(json j, const std::string& pointer) {
  json::json_pointer p(pointer);
  j[p.parent_pointer()].erase(p.back());
  return j;
}

// A value set at a JSON pointer of the minimal config, and the error it gives.
struct TypeCase {
  std::string pointer;
  json value;
  std::string message;  // after "configs/x.json: "
};

}  // namespace zt::config_test
