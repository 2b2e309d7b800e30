// Monitors: DeepSpeed's "csv_monitor" and "tensorboard" blocks, written by rank 0 from the step
// rows zt-train writes to metrics.jsonl (MetricsWriter hands each row on), under
// <output_path>/<job_name>/ (output_path empty: zt.output_dir). As DeepSpeed's engine logs
// them, the x axis is the global sample count (step x train_batch_size) and the tags are
//   Train/Samples/train_loss, Train/Samples/lr, Train/Samples/loss_scale (fp16)
// and ours: Train/Samples/grad_norm, Train/Samples/tokens_per_s, Train/Samples/val_loss, and
// Train/Samples/peak_bytes_<category> per memory category.
//   csv_monitor  one file per tag, its '/' made '_' (Train_Samples_train_loss.csv): a header
//                "step,<the tag's last part>", then "samples,value" rows (DeepSpeed's layout);
//   tensorboard  an event file events.out.tfevents.<unix time>.<host>.<pid>: TFRecord records
//                (length, masked CRC32C of the length, the Event, masked CRC32C of the Event),
//                the first Event with file_version "brain.Event:2", then one Event per step
//                with a Summary of simple_value scalars, encoded by hand (tfevents.h).
// Every write is a checked write (a full disk ends the run naming the file), nothing buffered.
// A fresh run replaces these files; a resumed run keeps in each only what comes through its
// resumed step (CSV rows and events rewritten atomically) and appends after it, so no step is
// there twice; a restart from step 0 keeps nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/file_io.h"

namespace zt {

class Monitors {
 public:
  // Rank 0 opens what `config` enables; other ranks and disabled blocks write nothing.
  // kept_through as MetricsWriter's: the resumed step (-1: none kept), nullopt: a fresh run.
  Monitors(const Config& config, int rank, std::optional<int64_t> kept_through,
           int64_t test_write_limit = -1);
  ~Monitors();
  // A metrics.jsonl row: a step's values go to every enabled monitor; rows without a step
  // (checkpoints, restarts, the summary) are passed over.
  void write(const nlohmann::ordered_json& row);
  void close();  // checked

 private:
  struct Csv;
  struct TensorBoard;
  int64_t samples_per_step_;
  std::optional<int64_t> kept_through_;
  int64_t test_write_limit_;
  std::unique_ptr<Csv> csv_;
  std::unique_ptr<TensorBoard> tensorboard_;
};

}  // namespace zt
