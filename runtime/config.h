// The job configuration: DeepSpeed's JSON keys plus our `zt` block, read into plain structs with
// DeepSpeed's defaults. load_config_json reads a file and applies `--set key.path=value`
// overrides; parse_config validates every key (unknown keys, JSON types, ranges, batch-size
// arithmetic) and throws one zt::Error of kind kInput naming the key path and the source file.
// Every documented DeepSpeed key is implemented (a field here), accepted with one start-up note
// saying why it has no effect (Config::notes), or refused with a reason; the Hugging Face
// Trainer's "auto" is resolved where it can be derived, else named with the --set that fixes it.
// Pure validation: allocates nothing but the structs, opens no device, never prints, knows no
// model (zoo names and the model's own shape limits are checked by model_zoo/; "auto" values
// that depend on the model are resolved by resolve_auto_from_model). Implementation:
// runtime/config/ (reader, key_rules, auto_values, deepspeed_blocks, optimizer_blocks,
// zt_block, tuning_block, load).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tuning.h"

namespace zt {

// optimizer {type, params}. DeepSpeed's "Adam" is decoupled (AdamW) unless adam_w_mode is false.
enum class OptimizerType { kAdam, kAdamW, kSGD };
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;  // no optimizer block: AdamW with these defaults
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};  // Adam/AdamW only
  double eps = 1e-8;                        // Adam/AdamW only
  double weight_decay = 0.0;
  double momentum = 0.0;        // SGD only
  bool adam_w_mode = true;      // Adam only; DeepSpeed's ADAM_W_MODE_DEFAULT
  bool bias_correction = true;  // Adam/AdamW: DeepSpeed's default; false: no bias correction
  // True when weight decay is applied to the weights, not added to the gradient.
  bool decoupled_weight_decay() const {
    return type == OptimizerType::kAdamW || (type == OptimizerType::kAdam && adam_w_mode);
  }
};

// scheduler {type, params}: DeepSpeed's schedules. zero/lr_schedule.h evaluates them.
enum class SchedulerType {
  kNone,
  kWarmupLR,
  kWarmupDecayLR,
  kWarmupCosineLR,
  kOneCycle,
  kLRRangeTest
};
enum class WarmupType { kLog, kLinear };
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;  // kNone: constant optimizer lr
  // WarmupLR / WarmupDecayLR
  double warmup_min_lr = 0.0;
  // Resolved by parse_config when absent: WarmupLR takes the optimizer's lr, WarmupDecayLR 0.001
  // (the defaults of DeepSpeed's constructors).
  double warmup_max_lr = 1e-3;
  // All three. As given (> 0); the schedule uses max(2, warmup_num_steps) as DeepSpeed does.
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;  // WarmupDecayLR / WarmupCosineLR: required, > 0
  // WarmupCosineLR: ratios of the optimizer's lr, in [0, 1].
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  // OneCycle: one triangle from cycle_min_lr up to cycle_max_lr (first step size) and back down
  // (second step size, default the first), optionally in stairs, then decay from cycle_min_lr.
  // Momentum cycling (cycle_momentum, cycle_min_mom, ...) is accepted with a note: no effect.
  double cycle_min_lr = 0.0;              // required
  double cycle_max_lr = 0.0;              // required
  double decay_lr_rate = 0.0;             // 0: no decay after the cycle
  int64_t cycle_first_step_size = 2000;   // > 0
  int64_t cycle_second_step_size = -1;    // >= 0; -1 (absent): cycle_first_step_size
  int64_t cycle_first_stair_count = 0;    // 0: continuous
  int64_t cycle_second_stair_count = -1;  // -1 (absent): cycle_first_stair_count
  int64_t decay_step_size = 0;            // 0: no decay after the cycle
  // LRRangeTest: lr_range_test_min_lr * (1 + step_rate * (step + 1) / step_size), the ratio
  // floored when staircase.
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;  // > 0
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

enum class OffloadDevice { kNone, kCpu, kNvme };
// offload_optimizer / offload_param, as DeepSpeed names them; train/offload_plan.h turns them
// into the engine's one OffloadPlan value.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;  // required when device is nvme
  bool pin_memory = false;
  int buffer_count = 4;                // DeepSpeed: 4 for offload_optimizer, 5 for offload_param
  int64_t buffer_size = 100'000'000;   // offload_param only: elements per NVMe buffer
  int64_t max_in_cpu = 1'000'000'000;  // offload_param only: elements kept in host memory (NVMe)
  bool pipeline_read = false;          // offload_optimizer only: overlap the next tile's read
  bool pipeline_write = false;         // offload_optimizer only: overlap the last tile's write
  bool fast_init = false;              // offload_optimizer only
  double ratio = 1.0;                  // offload_optimizer only: fraction offloaded, [0, 1]
};

// zero_optimization. Sizes are element counts, as in DeepSpeed. Each "stage3_" key is also
// accepted without its prefix (DeepSpeed's aliases); giving both spellings is an error. Keys
// with no effect here (contiguous_gradients, reduce_scatter, allgather_partitions,
// sub_group_size, ...) are not fields: they become start-up notes (runtime/config/key_rules.cpp).
struct ZeroConfig {
  int stage = 0;              // 0..3
  bool overlap_comm = false;  // absent: true at stage 3, false below (DeepSpeed)
  // Gradient elements reduced per bucket (stages 0/1 reduce after the last micro-batch).
  int64_t reduce_bucket_size = 500'000'000;
  // Working-param elements all-gathered per bucket after the optimizer step (stages 0-2 refresh
  // the full working params from the updated shards). Engine: the lead wires it.
  int64_t allgather_bucket_size = 500'000'000;
  // Stage 3: elements of the next units gathered ahead of use.
  int64_t stage3_prefetch_bucket_size = 50'000'000;  // alias prefetch_bucket_size
  // Stage 3: a unit with fewer elements stays full on every rank. >= 0.
  int64_t stage3_param_persistence_threshold = 100'000;  // alias param_persistence_threshold
  // Stage 3: the most parameter elements held full (gathered) on a rank at once beyond the unit
  // in use: prefetches and kept units stay within it (zero/unit_schedule.h). Alias
  // max_live_parameters. >= 0.
  int64_t stage3_max_live_parameters = 1'000'000'000;
  // Stage 3: a unit used again before this many elements of other units are gathered stays
  // full after use instead of being released. Alias max_reuse_distance. >= 0.
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  // zt.save_weights writes the gathered 16-bit working weights (in the fp16/bf16 compute dtype)
  // rather than the fp32 master, in any stage; no effect in fp32 training. Alias
  // gather_16bit_weights_on_model_save, older name stage3_gather_fp16_weights_on_model_save.
  bool stage3_gather_16bit_weights_on_model_save = false;
  // Older spellings: cpu_offload = offload_optimizer {"device": "cpu"}, cpu_offload_param =
  // offload_param {"device": "cpu"}, cpu_offload_use_pin_memory = pin_memory of both.
  OffloadConfig offload_optimizer{OffloadDevice::kNone, "", false, 4};  // needs stage >= 1
  OffloadConfig offload_param{OffloadDevice::kNone, "", false, 5};      // needs stage 3
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;       // 0: dynamic loss scaling; > 0: this fixed scale
  int initial_scale_power = 16;  // dynamic: the first scale is 2^initial_scale_power
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // Pure 16-bit: no fp32 master copy; the optimizer updates the fp16 parameters (DeepSpeed's
  // key; it keeps the optimizer states fp32, as we do).
  bool fp16_master_weights_and_grads = false;
};
struct Bf16Config {
  bool enabled = false;                        // block "bf16" or its alias "bfloat16"
  bool bf16_master_weights_and_grads = false;  // pure 16-bit, as the fp16 key
};
struct DataTypesConfig {
  std::optional<DType> grad_accum_dtype;  // absent: the engine's choice
};

// activation_checkpointing. Absent block: kNone. Block without number_checkpoints: every
// transformer block (kEveryUnit). number_checkpoints = k: the first k blocks (kCount; the model
// clamps k to its block count).
struct ActivationCheckpointing {
  enum class Policy { kNone, kEveryUnit, kCount };
  Policy policy = Policy::kNone;
  int count = 0;  // kCount only
  // partition_activations and cpu_checkpointing are refused when true (not supported yet);
  // contiguous_memory_optimization, synchronize_checkpoint_boundary and profile are notes.
};

// aio: asynchronous I/O tuning for NVMe offload (the swap files of offload/swap_store.h; zt-train
// maps it onto AioOptions). Without NVMe offload, a present aio block gets a note saying it has
// no effect. thread_count is also read as intra_op_parallelism (its newer name); use_gds is
// refused.
struct AioConfig {
  int64_t block_size = 1'048'576;  // bytes
  int queue_depth = 8;
  int thread_count = 1;
  bool single_submit = false;
  bool overlap_events = true;
};

// zt.model: a zoo name ("gpt2-tiny", "llama-tiny"), or an object: Hugging Face GPT2Config names
// whose missing keys take GPT2Config's defaults, or, with a "model_type" other than "gpt2", the
// keys of that family's config.json (LlamaConfig's, Qwen2Config's), kept as they are in
// hf_config for model_zoo/hf_config.h to read as it reads a model directory's config.json. Zoo
// names and hf_config are validated by model_zoo/, not here.
struct ModelChoice {
  std::string zoo_name;  // empty when has_object
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int n_positions = 1024;
  bool has_object = false;
  nlohmann::json hf_config;  // null unless the object has a non-gpt2 model_type
};

// The zt block: what is ours. Precision comes from the fp16/bf16 blocks, not from here.
// zt.checkpoint: sharded checkpoints (zero/checkpoint/) written by zt-train, and where
// `zt-train --resume` looks by default. Without the block nothing is saved on a schedule, but a
// preempted run (SIGTERM, SIGUSR1) still saves into `dir` before it exits.
struct CheckpointConfig {
  bool given = false;  // the block is present: a checkpoint is also saved after the last step
  std::string dir;     // empty: <zt.output_dir>/checkpoints
  int64_t every_n_steps = 0;  // a checkpoint after every n-th step; 0: none on a schedule
  int keep_last = 0;   // committed checkpoints kept, newest by step; 0: all (DeepSpeed's way)
  bool async = false;  // save behind training: only the host snapshot blocks it
};

// zt.save_pretrained: "DIR", or {"dir": DIR, "dtype": "fp32" | "bf16" | "fp16",
// "max_shard_size": bytes or "5GB", "merge_adapter": bool}: after the last step, a Hugging Face
// model directory (pretrained/save_pretrained.h). dtype: what the weights are written in (default
// fp32; rounded from the fp32 master). merge_adapter: with zt.lora, each adapted weight is
// written as W + s·B·A (required under zt.lora, refused without it).
struct SavePretrainedConfig {
  std::string dir;  // empty: none
  std::string dtype = "fp32";
  uint64_t max_shard_size = 5'000'000'000;
  bool merge_adapter = false;
};

struct ZtConfig {
  // Required, unless zt.init_from is a Hugging Face model directory: its config.json then
  // shapes the model (and, when both are given, they must agree).
  ModelChoice model;
  int seq_len = 0;         // required, > 0
  std::string train_data;  // required
  std::string val_data;    // empty: no validation set
  int64_t steps = 0;       // required, > 0 optimizer steps
  int64_t eval_every = 0;  // 0: never
  int eval_batches = 8;
  uint64_t seed = 1337;
  std::string output_dir = "runs/default";
  std::string init_from;     // empty: fresh initialisation
  std::string save_weights;  // empty: do not export
  SavePretrainedConfig save_pretrained;
  // zt.lora only (pretrained/adapter_io.h): a PEFT adapter directory the adapters start from
  // (after zt.init_from's weights), and one written after the last step. Empty: none.
  std::string init_adapter;
  std::string save_adapter;
  bool shuffle = false;
  int num_threads = 0;  // 0: automatic
  // How the CPU back end chooses each 16-bit GEMM's path (train/gemm_choice.h): "auto",
  // "measure", "flags", "native", "packed" or "widened". ZT_CPU_GEMM overrides it.
  std::string cpu_gemm = "auto";
  std::string device = "cpu";          // "cpu" or "cuda" (one GPU per rank: local rank -> GPU)
  bool allow_tf32 = false;             // CUDA: fp32 GEMMs may use TF32 tensor cores
  std::string comm_backend = "auto";   // "auto", "mpi" or "nccl"
  double comm_timeout_s = 1800.0;      // a collective stuck longer ends the job (exit 3); 30 min,
                                       // DeepSpeed's default (PyTorch's NCCL default: 10 min)
  double comm_init_timeout_s = 120.0;  // NCCL's communicator init may take this long (its own
                                       // deadline: a first init in a VM takes many seconds)
  // The most bytes the device's buffers may hold at once, on any back end (Device::
  // set_memory_limit): the CPU back end stands in for a GPU of that size. An integer or a string
  // with a unit ("6GB" = 6 * 10^9, "6GiB" = 6 * 2^30). 0 (absent): the device's own capacity.
  uint64_t device_memory_limit = 0;
  CheckpointConfig checkpoint;
  // zt.freeze (glob patterns over Hugging Face tensor names) and zt.lora (PEFT LoraConfig's keys
  // inline, or the path of a PEFT adapter_config.json): which parameters train. Default: all.
  Tuning tuning;
};

// DeepSpeed's monitor blocks, "tensorboard" and "csv_monitor": {enabled, output_path,
// job_name}. zt-train writes them from rank 0 under output_path/job_name (train/monitors.h);
// an empty output_path is zt.output_dir (DeepSpeed's default is under the home directory).
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";  // DeepSpeed's default
};

struct Config {
  std::string source;       // the file the config came from, as given
  nlohmann::json resolved;  // the JSON after overrides, for logging

  // Batch sizes after DeepSpeed's derivation: train_batch_size ==
  // train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 1;

  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  double gradient_clipping = 0.0;  // global norm; 0: off
  int steps_per_print = 10;
  // Time forward, backward, reduction and optimizer step separately and report them with the
  // step lines. Engine/trainer: the lead wires it.
  bool wall_clock_breakdown = false;
  ZeroConfig zero_optimization;
  Fp16Config fp16;
  Bf16Config bf16;
  DataTypesConfig data_types;
  std::optional<DType> communication_data_type;
  ActivationCheckpointing activation_checkpointing;
  AioConfig aio;
  MonitorConfig tensorboard;
  MonitorConfig csv_monitor;
  ZtConfig zt;

  // "auto" values filled from the Hugging Face Trainer's arguments in the zt block
  // (runtime/config/trainer_arguments.h): the key, its value, the argument it came from.
  // zt-train prints them once at start-up as a table.
  struct FromArgument {
    std::string key, value, from;
  };
  std::vector<FromArgument> from_arguments;

  // Start-up notes, one line each naming its key: DeepSpeed keys accepted with no effect, and
  // "auto" values resolved. zt-train prints them on rank 0; parse_config never prints.
  std::vector<std::string> notes;
  // zero_optimization keys given as "auto" whose value comes from the model's hidden size, as
  // the Hugging Face Trainer derives them; resolve_auto_from_model fills them in.
  struct AutoFromModel {
    bool reduce_bucket_size = false;                  // hidden * hidden
    bool stage3_prefetch_bucket_size = false;         // 0.9 * hidden * hidden
    bool stage3_param_persistence_threshold = false;  // 10 * hidden
    bool any() const {
      return reduce_bucket_size || stage3_prefetch_bucket_size ||
             stage3_param_persistence_threshold;
    }
  } auto_from_model;

  // The working precision: fp16 or bf16 when that block is enabled, else fp32.
  DType compute_dtype() const {
    return fp16.enabled ? DType::kF16 : bf16.enabled ? DType::kBF16 : DType::kF32;
  }
};

// Reads the JSON file at `path` and applies overrides in order, each "key.path=value": the value
// is parsed as JSON when it parses (numbers, true/false, null, arrays, objects, quoted strings),
// else taken as a plain string; missing intermediate objects are created. Throws kInput for an
// unreadable file, malformed JSON (with line and column), a duplicate key, a top level that is
// not an object, or a malformed override.
nlohmann::json load_config_json(const std::string& path, const std::vector<std::string>& overrides);

// Validates every key of `j` and resolves defaults and batch sizes for `world_size` ranks.
// Errors are one line, "<source>: <message naming the key path>", kind kInput.
Config parse_config(const nlohmann::json& j, const std::string& source, int world_size);

// Fills in the zero_optimization keys recorded in config.auto_from_model from the model's hidden
// size (n_embd for GPT-2), adding one note each; clears the record. hidden_size > 0.
void resolve_auto_from_model(Config& config, int64_t hidden_size);

// load_config_json then parse_config, with the path as the source.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size);

// A PEFT adapter_config.json, or the adapter directory holding one, read by zt.lora's file rules
// (inference_mode may be true; runtime/config/tuning_block.cpp). Errors are kInput naming the file.
LoraConfig read_peft_adapter_config(const std::string& path);

// Where the job's checkpoints go and `zt-train --resume` looks: zt.checkpoint.dir, or
// <zt.output_dir>/checkpoints (zt-train, and zt-run's restarts).
std::string checkpoint_root(const Config& config);

}  // namespace zt
