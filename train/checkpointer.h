// Checkpointer: the one place where ranks save a sharded checkpoint and commit it together,
// synchronously or asynchronously. zt-train's loop and zt-bench checkpoint drive this object.
//
// The protocol (zero/checkpoint/ writes the files; the barriers and gathers are here):
//   rank 0: prepare_checkpoint_dir(root, N) -> step<N>.tmp        barrier
//   every rank: its shard file in step<N>.tmp (Engine::save_state)
//   gather every file's size and checksum; rank 0 commits (manifest, rename, `latest`, pruning)
//   barrier: no rank goes on before the commit is done
// A rank that dies on the way leaves the previous checkpoint as the latest.
// Asynchronous: training waits only while the state is copied into a host snapshot (kept from
// save to save, so its pages stay mapped); a thread of this rank writes the shard file from it
// while training goes on; the ranks commit together later (finish_pending), once they agree that
// every file is written, or before a new save, at the end of training or on preemption.
//
// What it does not do: decide when to save (the loop's cadence), print or write metrics rows
// (each committed save is handed to on_saved), agree on preemption, read checkpoints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "zero/checkpoint/directory.h"
#include "zero/checkpoint/snapshot.h"
#include "zero/engine.h"

namespace zt {

// A committed save, as the caller reports it (zt-train: a log line and a metrics.jsonl row).
struct SaveReport {
  int64_t step = 0;
  int64_t bytes = 0;  // every shard file of the checkpoint (rank 0; 0 on other ranks)
  bool async = false;
  double blocked_ms = 0.0;  // training waited: the whole save (sync), the snapshot (async)
  double write_ms = 0.0;    // async: the writer thread's shard file
  double save_ms = 0.0;     // from the save's start to its commit
  // step<N>.tmp directories a save that never committed had left, removed before this one
  // (rank 0; remove_unfinished_saves).
  std::vector<std::string> removed;
};

// Where a test fault may fire during a save (train/test_fault.h maps them to its points).
enum class SavePoint { kShardRecord, kCommit };
using SaveFaultHook = std::function<void(SavePoint, int64_t step, int unit)>;

struct CheckpointerOptions {
  std::string root;   // the checkpoint root: step<N>/, latest
  int keep_last = 0;  // committed checkpoints kept (<= 0: all)
  // Called on every rank with each committed save.
  std::function<void(const SaveReport&)> on_saved;
  // Test-only: called before each unit's records (kShardRecord; on the writer thread of an
  // asynchronous save) and after the files' sizes are gathered (kCommit, unit 0).
  SaveFaultHook fault;
};

class Checkpointer {
 public:
  Checkpointer(Engine& engine, Communicator& comm, CheckpointerOptions options);
  ~Checkpointer();  // joins a writer thread still running (its save is not committed)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: the checkpoint of step `step`, with `trainer_state` (its "engine" key is set
  // here to Engine::save_state's) in the manifest. save_sync returns once it is committed;
  // begin_async once the snapshot is taken (after committing a save still in flight).
  void save_sync(int64_t step, nlohmann::json trainer_state);
  void begin_async(int64_t step, nlohmann::json trainer_state);

  // Whether an asynchronous save is in flight, and whether this rank's writer has finished it.
  bool pending() const { return pending_ != nullptr; }
  bool pending_written() const { return pending_ && pending_->written.load(); }
  // Collective: waits for this rank's writer and commits the save in flight (none: nothing).
  // Every rank calls it at the same step. A writer's error is rethrown here.
  void finish_pending();

  // Maps the snapshot's memory once before training (an asynchronous save's snapshot thrown
  // away), so that no save blocks training for page faults. Not collective.
  struct SnapshotMapping {
    int64_t bytes = 0;  // host memory of this rank's snapshot
    double ms = 0.0;
  };
  SnapshotMapping map_snapshot();

  const std::string& root() const { return options_.root; }

 private:
  using Clock = std::chrono::steady_clock;
  struct PendingSave {
    int64_t step = 0;
    nlohmann::json state;  // the manifest's trainer_state, as of the snapshot
    ShardFileInfo info;
    std::exception_ptr error;
    std::atomic<bool> written{false};
    double blocked_ms = 0.0, write_ms = 0.0;
    std::vector<std::string> removed;
    Clock::time_point started;
    std::thread writer;
  };

  // Collective: rank 0 removes unfinished saves (into *removed) and makes step<N>.tmp.
  std::string begin_step_dir(int64_t step, std::vector<std::string>* removed);
  // Collective: every rank's file is written; rank 0 commits. Returns the checkpoint's bytes.
  int64_t commit(int64_t step, const ShardFileInfo& info, nlohmann::json state);
  void fault(SavePoint at, int64_t step, int unit) const;
  int unit_index(const std::string& name) const;

  Engine& engine_;
  Communicator& comm_;
  CheckpointerOptions options_;
  // The host copy of this rank's state, kept from save to save; declared before pending_, whose
  // writer thread reads it.
  ShardSnapshot snapshot_;
  std::unique_ptr<PendingSave> pending_;
};

}  // namespace zt
