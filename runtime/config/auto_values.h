// The Hugging Face Trainer's "auto": a placeholder it replaces with values from its own
// arguments and the model before DeepSpeed reads the file. zt-train resolves, in a copy of the
// JSON and before any block is read, the "auto" values it can derive the way the Trainer does
// (from the other batch sizes, zt.steps, the optimizer's lr, the other precision block), records
// the zero_optimization sizes that come from the model's hidden size (resolved later by
// resolve_auto_from_model), and refuses the rest with one line naming every such key and the
// --set that fixes each. "auto" on any other key is a type error saying so (reader.cpp).
#pragma once

#include "runtime/config.h"
#include "runtime/config/reader.h"

namespace zt::config_detail {

// Which batch keys were "auto" and are derived by resolve_batch from the other two.
struct AutoBatch {
  bool train_batch_size = false, micro = false, gas = false;
};

// Rewrites `j` in place; adds a note for each value resolved here.
AutoBatch resolve_auto(const Reader& r, json& j, Config::AutoFromModel& from_model);

// One note per batch key of `batch`, once resolve_batch has derived it.
void note_auto_batch(const Reader& r, const AutoBatch& batch, const Config& c, int world);

}  // namespace zt::config_detail
