// DeepSpeed keys ZeroTrain accepts without effect or refuses: a table of rules per block, each
// naming the key, the JSON type its value must have, the values that are harmless, and why. A
// harmless value is accepted with one start-up note ("'contiguous_gradients' has no effect in
// ZeroTrain: ..."); any other value is refused with a one-line error saying why and what to use
// instead. Implemented keys are not here: they are read by the block parsers. Pure validation.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/config/reader.h"

namespace zt::config_detail {

enum class Expect { kAny, kBool, kNumber, kInteger, kString, kObject };

// Which values of a key are harmless (accepted with a note); the rest are refused.
enum class Harmless {
  kAlways,    // any value: a no-effect note
  kNever,     // any value is refused (a block ZeroTrain does not have)
  kFalse,     // false is a note, true refused
  kTrue,      // true is a note, false refused
  kDisabled,  // a block with "enabled": false is a note; otherwise refused
  kOne,       // 1 (or absent inside the block, see tensor_parallel) is a note
  kMinusOne,  // -1 is a note
  kZero,      // 0 is a note
  kMean,      // the string "mean" is a note
  kTpOne,     // tensor_parallel: autotp_size absent or <= 1 is a note
};

struct KeyRule {
  std::string_view key;
  Expect expect;
  Harmless harmless;
  std::string_view why;       // the note: "'<key>' has no effect in ZeroTrain: <why>"
  std::string_view refusal;   // the error: "'<key>' <refusal>" (reason and what to do instead)
  Bound bound = Bound::kAny;  // numbers: the range DeepSpeed accepts, checked before the note
};

// The rule keys, to add to a block's allowed keys.
std::vector<std::string_view> rule_keys(std::span<const KeyRule> rules);

// Checks every rule key present in `block`: its type, then a note or a refusal.
void apply_rules(const Reader& r, const json& block, std::string_view path,
                 std::span<const KeyRule> rules);

std::span<const KeyRule> top_level_rules();
std::span<const KeyRule> zero_rules();
std::span<const KeyRule> fp16_rules();
std::span<const KeyRule> bf16_rules();
std::span<const KeyRule> optimizer_block_rules();  // beside optimizer.type and params
std::span<const KeyRule> adam_param_rules(bool adamw);
std::span<const KeyRule> sgd_param_rules();
std::span<const KeyRule> scheduler_param_rules();  // every scheduler type
std::span<const KeyRule> checkpointing_rules();

}  // namespace zt::config_detail
