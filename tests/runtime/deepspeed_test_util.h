// What the DeepSpeed-config suites (deepspeed_keys_test.cpp, deepspeed_auto_test.cpp) share: the
// smallest valid config, JSON edits by pointer, parse, the kInput message parse_config throws
// (checked to be one line naming the file), the start-up notes that name a key, and
// EXPECT_CONTAINS. Helpers only; no tests here.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/status.h"

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace zt::deepspeed_test {

using nlohmann::json;

inline const std::string kSource = "configs/ds.json";

inline json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

inline json with(json j, const std::string& pointer, const json& value) {
  j[json::json_pointer(pointer)] = value;
  return j;
}

inline Config parse(const json& j, int world = 1) { return parse_config(j, kSource, world); }

inline std::string input_error(const json& j, int world = 1) {
  try {
    parse(j, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_EQ(e.message().rfind(kSource + ": ", 0), 0u) << e.message();
    return e.message().substr(kSource.size() + 2);
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return {};
}

// The notes that name `key` (quoted, as every note quotes its key).
inline std::vector<std::string> notes_naming(const Config& c, const std::string& key) {
  std::vector<std::string> found;
  for (const std::string& n : c.notes) {
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
    if (n.find("'" + key + "'") != std::string::npos) found.push_back(n);
  }
  return found;
}

}  // namespace zt::deepspeed_test
