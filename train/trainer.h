// The trainer of zt-train, in two phases. prepare_training() reads and checks everything a
// job's input can get wrong (config, model shape, data files, output directory) and allocates
// no model memory; zt-train agrees across ranks on its outcome before anything else, so a bad
// input on any rank ends every rank with that rank's message. train() then wires data, model,
// engine, schedule, evaluation, progress lines, metrics.jsonl, sharded checkpoints (zt.checkpoint,
// --resume), preemption (SIGTERM, SIGUSR1) and weight export.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "launch/cpu_binding.h"
#include "launch/logger.h"
#include "model_zoo/model_spec.h"
#include "runtime/config.h"
#include "runtime/data/token_data.h"
#include "train/checkpointer.h"
#include "train/preemption.h"
#include "zero/checkpoint/reader.h"
#include "zero/engine.h"

namespace zt {

struct TrainSetup {
  Config config;
  ModelSpec model;
  TokenFile train_file;
  std::optional<TokenFile> val_file;
  std::string checkpoint_root;             // zt.checkpoint.dir, or <zt.output_dir>/checkpoints
  std::optional<CheckpointReader> resume;  // --resume: the validated checkpoint to continue
  std::optional<nlohmann::ordered_json>
      restart;  // zt-run's restart row (ZT_RESTART), written first
};

// The model a config names (zt.model: a zoo name or an object; else zt.init_from's
// config.json, which must agree with zt.model where both are given), validated, with
// zt.seq_len within its positions (kInput naming config.source otherwise).
ModelSpec resolve_model(const Config& config);
// The engine's options for `config` and `model` (the offload plan, whose tiers are devices, is
// left empty: train() sets it, train/offload_plan.h). zt-estimate plans from the same options.
EngineOptions engine_options(const Config& config, Model& model);
// The optimizer a tool's --optimizer names (adamw, adam, sgd-momentum, sgd), for the tools that
// plan or import without a config (zt-estimate, zt-ckpt); anything else is a kInput error.
OptimizerOptions optimizer_named(const std::string& name);

// `resume`: unset, no --resume; empty, --resume alone (the checkpoint root's `latest`); else the
// directory given (a checkpoint root or one step directory). The checkpoint is validated whole
// here (every file's size and checksum, the model's units, the trainer state), so that a bad
// checkpoint is one line naming the file before anything is allocated.
TrainSetup prepare_training(const std::string& config_path,
                            const std::vector<std::string>& overrides, int rank, int world,
                            const std::optional<std::string>& resume = std::nullopt);

// The Checkpointer's test-only fault hook for this rank: ZT_TEST_FAULT's checkpoint and commit
// points (train/test_fault.h), as zt-train and zt-bench checkpoint install it; empty when the
// variable is unset.
SaveFaultHook checkpoint_fault_hook(Model& model, int rank);

struct TrainResult {
  double first_val_loss = 0.0;  // before the first step; NaN without validation data
  double last_val_loss = 0.0;
  double last_loss = 0.0;
  // Non-zero when training stopped early for a reason every rank agrees on: every rank exits
  // with this code without aborting the job, and `failure`, where non-empty, is the line to
  // print:
  // - the model states did not fit the device on some rank (zt.device_memory_limit, or a GPU's
  //   memory): every rank stops before the first step, exit 1; the lowest such rank has already
  //   printed its error ("zt-train: rank r: out of device memory on ..."), `failure` is empty;
  // - the loss, which is reduced across ranks, became NaN or inf: exit 1, `failure` set on
  //   rank 0 only;
  // - the checkpoint to resume from does not load into this run (another optimizer, ...):
  //   exit 2 before the first step, the lowest failing rank has printed its line;
  // - SIGTERM or SIGUSR1 reached some rank (preemption): after the step in progress every rank
  //   saves a checkpoint and stops, exit kExitPreempted (launch/tool_frame.h), `failure` on
  //   rank 0 saying where the checkpoint is.
  int exit_code = 0;
  std::string failure;
};

// Called from train()'s handler of any error, with that exception current, while the engine
// and its CommQueue are still alive (nothing has waited for peers yet). zt-train's ends the job
// there (abort_job) when world > 1; if it returns, the error propagates.
using TrainErrorHandler = std::function<void()>;

// Collective over `comm` (one call per rank), whose group must be MPI_COMM_WORLD's (the ranks
// agree over it on model states that do not fit). metrics.jsonl (rank 0) is a log written as
// the run goes: every row is one checked write, so a failed write (a full disk) ends the run in
// the step it happened, naming the file and the OS error; rows before it stay, the failed one
// may be cut short. The weights file is written atomically (it is complete under its name, or
// absent). `cpus` is this process's bind_local_cpus(): its thread count is the default for
// zt.num_threads, and rank 0's start-up line reports every local rank's threads and CPUs.
TrainResult train(const TrainSetup& setup, const CpuBinding& cpus, Device& device,
                  Communicator& comm, const Logger& log, const TrainErrorHandler& on_error = {});

}  // namespace zt
