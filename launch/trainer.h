// The trainer loop of zt-train: wires config, data, model, engine, schedule, evaluation,
// progress lines, metrics.jsonl and weight export. Everything it needs is validated before
// the first allocation of model memory.
#pragma once

#include <string>
#include <vector>

#include "launch/logger.h"
#include "runtime/config.h"

namespace zt {

struct TrainResult {
  double first_val_loss = 0.0;  // before the first step; NaN without validation data
  double last_val_loss = 0.0;
  double last_loss = 0.0;
};

TrainResult train(const Config& config, const Logger& log);

}  // namespace zt
