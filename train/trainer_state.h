// The trainer_state of a zt-train checkpoint's manifest: what the loop writes with each save
// (step, data positions, the shape of the run, the config's source, the engine's state) and
// reads back on --resume, and how a data position maps onto a run of another shape.
// What it does not do: save or load the engine's shards (Checkpointer, Engine::load_state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/data/token_data.h"
#include "zero/checkpoint/reader.h"
#include "zero/precision.h"

namespace zt {

// Where a checkpoint's trainer_state says training stopped (written by trainer_state below).
struct ResumePoint {
  int64_t step = 0;            // the last step trained
  int64_t train_position = 0;  // the training DataLoader's position() after it
  int64_t val_position = 0;
  int world = 1;            // the saving run's world size, micro-batch and sequence length:
  int64_t micro_batch = 1;  // the data position is remapped when they differ
  int64_t seq_len = 1;
  uint64_t seed = 0;
  nlohmann::json engine;  // Engine::save_state's
};

// The checkpoint's trainer_state, checked: kInput naming manifest.json and the key otherwise.
ResumePoint resume_point(const CheckpointReader& reader);

// The trainer_state after `step` but for "engine" (the Checkpointer adds Engine::save_state's).
nlohmann::json trainer_state(const Config& config, int world, int64_t step,
                             const DataLoader& train_loader,
                             const std::optional<DataLoader>& val_loader,
                             const Precision& precision);

// The training data position to resume at in a run of `world` ranks x micro-batch `B` x `T`
// tokens: the same batch index when the shape is the saving run's, else the same tokens of the
// whole job as this run's batches (rounded down); a note saying so is added to `notes`.
int64_t resumed_train_position(const ResumePoint& point, int world, int64_t B, int64_t T,
                               std::vector<std::string>& notes);

}  // namespace zt
