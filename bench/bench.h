// zt-bench subcommands. Each fills in the timing harness of bench/harness.h: it measures in
// rounds, prints its tables and writes them as Markdown (--markdown PATH) and its figures as JSON
// (--json PATH). Figures are compared with a reference measured in the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offload/async_io.h"
#include "runtime/model.h"

namespace zt {

struct Precision;

// zt-bench's precision names: fp32; bf16, fp16 (mixed, fp32 master); bf16-pure, fp16-pure (no
// master). Unchecked: the subcommands' option parsing checks the name.
Precision bench_precision(const std::string& name);

// B x T random tokens and targets below `vocab` (a fixed seed: every row and run trains on the
// same batch), for the benchmarks that train.
struct RandomBatch {
  RandomBatch(int vocab, int64_t B, int64_t T);
  std::vector<int32_t> inputs, targets;
  int64_t B, T;
  Batch batch() const { return Batch{inputs.data(), targets.data(), B, T}; }
};

struct BenchTrainOptions {
  std::string model = "gpt2-124M";
  int batch = 4;
  int seq_len = 64;
  int steps = 8;
  int warmup = 2;
  bool checkpoint = false;
  // Each is measured in turn in the same run: fp32, bf16, fp16 (mixed, fp32 master), bf16-pure,
  // fp16-pure (no master).
  std::vector<std::string> precisions = {"fp32"};
  std::string device = "cpu";  // "cuda": GPU 0; MFU against peak_tflops instead
  double peak_tflops = 989.0;  // the GPU's dense 16-bit peak (H100/H200 SXM: 989)
  bool allow_tf32 = false;
  // Time per Kernels entry per step (runtime/profiling_kernels.h), one table per precision.
  bool profile = false;
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

// GPT-2 training steps (AdamW) against the cores' peak FMA rate measured in the same run, next
// to oneDNN's GEMM rate on the model's own matmul shapes, for each precision asked, with peak
// memory per category: apex's O0 / O2 / O3 side by side.
int bench_train(const BenchTrainOptions& options);

struct BenchCommOptions {
  int64_t min_bytes = int64_t(1) << 10;    // sizes: powers of 2 from min to max (whole buffer,
  int64_t max_bytes = int64_t(256) << 20;  // as nccl-tests counts it)
  int iters = 20;  // timed calls per round; each implementation is timed in two rounds
  int warmup = 5;
  // Seconds of timed calls per size and implementation: fewer than `iters` calls (at least 2
  // per round) where calls are slow, so that the default sweep to 256 MiB stays near a minute.
  // 0: no cap.
  double budget_seconds = 0.4;
  std::string dtype = "fp32";
  std::vector<std::string> ops;  // all_reduce, reduce_scatter, all_gather, broadcast; empty: all
  size_t chunk_bytes = 0;        // MpiCommunicator's pipeline chunk; 0: its default
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

// Under mpirun: each collective of MpiCommunicator next to the same collective of raw MPI on the
// same buffers (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast), one table
// per collective with algbw/busbw as nccl-tests reports them; every result is checked. Starts
// and ends MPI itself. Returns 0, or 1 when a result was wrong on any rank.
int bench_comm(const BenchCommOptions& options);

// "4096", "64K", "256M", "1G" (powers of 1024) -> bytes; kInput on anything else.
int64_t parse_byte_size(std::string_view text);

struct BenchZeroOptions {
  std::string model = "gpt2-tiny";
  int batch = 8;
  int seq_len = 64;
  int steps = 6;
  int warmup = 2;
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

int bench_zero(const BenchZeroOptions& options);

struct BenchAdamOptions {
  int64_t params = 124439808;      // GPT-2 124M
  std::string precision = "bf16";  // the working copy written by the step: none, bf16, fp16
  int steps = 10;                  // timed rounds (triad, fused step, two-pass step each)
  int warmup = 1;
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

// The fused CPU Adam step (offload/cpu_adam.h) on one shard of `params` fp32 parameters, next
// to Kernels::adamw + cast and to STREAM's triad over arrays of the same size, in the same run.
int bench_adam(const BenchAdamOptions& options);

struct BenchOffloadOptions {
  bool io = true;             // the swap store against raw O_DIRECT (--no-io skips it)
  bool step = true;           // GPT-2 stage-2 steps with and without optimizer offload (--no-step)
  std::string path = "/tmp";  // the directory measured (swap files go to <path>/zt_swap/rank0)
  int64_t bytes = int64_t(1) << 30;
  int64_t unit_bytes = int64_t(64) << 20;  // bytes per swap key (a unit's shard)
  int64_t raw_block = int64_t(16) << 20;   // bytes per pwrite/pread of the raw reference
  int repeats = 3;
  AioOptions aio;
  std::string backend;  // io_uring, libaio, threads; empty: default_aio_backend()
  // The step-time section: one process (SelfCommunicator), ZeRO stage 2, AdamW.
  std::string model = "gpt2-124M";
  int batch = 4;
  int seq_len = 64;
  int steps = 5;                   // timed steps per row
  int warmup = 1;                  // untimed steps first
  std::string precision = "fp32";  // fp32, bf16 or fp16 (mixed: offload needs an fp32 master)
  // gradient_clipping of every row; 0: off, and the host updates then start in the backward.
  float gradient_clipping = 1.0f;
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

// The NVMe swap store's write and read throughput (offload/swap_store.h: O_DIRECT, async I/O,
// a CRC32C per block) against raw sequential O_DIRECT pwrite/pread of the same bytes in the same
// directory, alternating in each repeat; every read is checked against what was written. Then
// the step time of GPT-2 under ZeRO stage 2 without offload and with the optimizer offloaded to
// the host, with peak memory per tier; the offloaded run's parameters are checked bitwise
// against the run without. Returns 1 when they differ.
int bench_offload(const BenchOffloadOptions& options);

struct BenchCheckpointOptions {
  std::string model = "gpt2-124M";
  int batch = 4;
  int seq_len = 64;
  std::string precision = "fp32";  // bench_precision's names
  int repeats = 3;                 // rounds, each a synchronous and an asynchronous save
  std::string path = "/tmp";       // checkpoints go to <path>/zt_bench_checkpoint_<pid>, removed
  std::string json_path;
  std::string markdown_path;  // the tables as Markdown (bench/harness.h)
};

// A rank's checkpoint save of GPT-2 (one rank, ZeRO stage 0, AdamW, after one step), alternating
// in each round: synchronous (save_state straight into the shard file, fsync, commit: training
// waits for all of it) and asynchronous (save_state into a host snapshot, the only time training
// waits; the shard file written by a thread while training steps run; then the commit). Reports
// the time training was blocked by each against the synchronous save's, the background write
// time, and the step time while the writer runs against a step without it.
int bench_checkpoint(const BenchCheckpointOptions& options);

struct BenchScaleOptions {
  std::string config = "configs/gpt2-tiny.json";  // the base every point starts from
  std::string model;                              // zt.model; empty: the config's
  int batch = 0;    // train_micro_batch_size_per_gpu, fixed per rank; 0: the config's
  int seq_len = 0;  // zt.seq_len; 0: the config's
  int steps = 6;    // zt.steps of every point
  int warmup = 2;   // its first steps, not timed
  std::vector<int> stages = {0, 1, 2, 3};
  std::vector<int> ranks = {1, 2, 4};
  std::vector<std::string> precisions = {"fp32"};  // bench_precision's names
  std::vector<bool> checkpointing = {false};       // activation checkpointing of every block
  std::vector<std::string> offload = {"none"};     // offload_optimizer.device: none, cpu, nvme
  std::string hostfile;                            // passed to zt-run; empty: this machine
  std::string path = "/tmp";   // nvme points' swap files go under <path>/zt_bench_scale_<pid>
  std::string device = "cpu";  // or "cuda": MFU against peak_tflops x ranks
  double peak_tflops = 0.0;    // cuda: one GPU's dense peak; 0: no MFU
  std::string out_dir = "runs/scale";
  std::string json_path;      // empty: <out_dir>/scale.json
  std::string markdown_path;  // empty: <out_dir>/scale.md
};

// A weak-scaling sweep of real zt-train runs, one `zt-run -np R --cpu -- zt-train ...` per point
// of stages x ranks x precisions x checkpointing x offload (combinations the engine refuses are
// skipped with a note): step time, tokens/s in total and per rank, MFU against the whole
// machine's peak FMA rate (measured once at the start), peak bytes per rank per tier,
// communication and inter-node bytes per step, final loss. Writes <out>/scale.json, scale.md and,
// with gnuplot, throughput.png and memory.png (their .dat/.gp always). Not run under mpirun.
// Returns 1 when any point failed (the sweep goes on past it), else 0.
int bench_scale(const BenchScaleOptions& options);

}  // namespace zt
