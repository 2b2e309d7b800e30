// DeepSpeed's blocks other than optimizer and scheduler: batch sizes, zero_optimization (with
// its offload sub-blocks, "stage3_" aliases and older spellings), fp16, bf16/bfloat16,
// data_types, communication_data_type, activation_checkpointing and aio. Each block is read
// through a table of (key, member, bound, alias) rows plus a few hand-read keys; the tables'
// keys and the block's rule keys (key_rules.cpp) are its allowed keys, so an unknown key is
// caught before any value is read. Does not resolve "auto" (auto_values.cpp runs first).
#include <fmt/format.h>

#include "runtime/config/blocks.h"
#include "runtime/config/key_rules.h"

namespace zt::config_detail {

namespace {

// ---- batch sizes -----------------------------------------------------------------------------

std::optional<int64_t> read_batch_key(const Reader& r, const json& j, std::string_view key) {
  const json* v = Reader::find(j, key);
  if (!v) return std::nullopt;
  std::string path(key);
  int64_t x = r.integer(*v, path);
  r.check_bound(*v, Bound::kPositive, path);
  return x;
}

int64_t product(const Reader& r, int64_t a, int64_t b) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p)) {
    r.fail(fmt::format("batch sizes too large: {} * {} overflows a 64-bit integer", a, b));
  }
  return p;
}

// a / b when exact, else an error quoting the numbers involved.
int64_t divide_exactly(const Reader& r, int64_t a, int64_t b, const std::string& what) {
  if (a % b != 0) {
    r.fail(fmt::format("inconsistent batch sizes: {} is not a whole number ({} / {})", what, a, b));
  }
  return a / b;
}

}  // namespace

// DeepSpeed's derivation (runtime/config.py, _set_batch_related_parameters). DeepSpeed rounds a
// derived value down and then fails its tbs == micro * gas * world assertion; here the division
// that is not exact is reported directly, with its numbers.
void resolve_batch(const Reader& r, const json& j, int world, Config& c) {
  auto tbs = read_batch_key(r, j, kTbs), micro = read_batch_key(r, j, kMicro),
       gas = read_batch_key(r, j, kGas);
  if (tbs && micro && gas) {
    if (*tbs != product(r, product(r, *micro, *gas), world)) {
      r.fail(fmt::format("inconsistent batch sizes: {} {} != {} {} * {} {} * world size {}", kTbs,
                         *tbs, kMicro, *micro, kGas, *gas, world));
    }
  } else if (tbs && micro) {
    gas = divide_exactly(r, *tbs, product(r, *micro, world),
                         fmt::format("{} = {} {} / ({} {} * world size {})", kGas, kTbs, *tbs,
                                     kMicro, *micro, world));
  } else if (tbs && gas) {
    micro = divide_exactly(
        r, *tbs, product(r, *gas, world),
        fmt::format("{} = {} {} / ({} {} * world size {})", kMicro, kTbs, *tbs, kGas, *gas, world));
  } else if (micro && gas) {
    tbs = product(r, product(r, *micro, *gas), world);
  } else if (tbs) {
    gas = 1;
    micro = divide_exactly(r, *tbs, world,
                           fmt::format("{} = {} {} / world size {}", kMicro, kTbs, *tbs, world));
  } else if (micro) {
    gas = 1;
    tbs = product(r, *micro, world);
  } else {
    r.fail(fmt::format("one of '{}' or '{}' is required", kTbs, kMicro));
  }
  c.train_batch_size = *tbs;
  c.train_micro_batch_size_per_gpu = *micro;
  c.gradient_accumulation_steps = *gas;
}

// ---- zero_optimization -----------------------------------------------------------------------

namespace {

constexpr Choice<OffloadDevice> kOffloadDevices[] = {
    {"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}};

constexpr Field<OffloadConfig> kOffloadParamFields[] = {
    {"nvme_path", &OffloadConfig::nvme_path},
    {"pin_memory", &OffloadConfig::pin_memory},
    {"buffer_count", &OffloadConfig::buffer_count, Bound::kPositive},
    {"buffer_size", &OffloadConfig::buffer_size, Bound::kPositive},
    {"max_in_cpu", &OffloadConfig::max_in_cpu, Bound::kNonNegative},
};
constexpr Field<OffloadConfig> kOffloadOptimizerFields[] = {
    {"nvme_path", &OffloadConfig::nvme_path},
    {"pin_memory", &OffloadConfig::pin_memory},
    {"buffer_count", &OffloadConfig::buffer_count, Bound::kPositive},
    {"pipeline_read", &OffloadConfig::pipeline_read},
    {"pipeline_write", &OffloadConfig::pipeline_write},
    {"fast_init", &OffloadConfig::fast_init},
    {"ratio", &OffloadConfig::ratio, Bound::kUnitInterval},
};

template <size_t N>
void parse_offload(const Reader& r, const json& zero, std::string_view key,
                   const Field<OffloadConfig> (&fields)[N], OffloadConfig& out) {
  std::string path = join("zero_optimization", key);
  const json* block = find_block(r, zero, "zero_optimization", key);
  if (!block) return;
  r.check_keys(*block, path, keys_of(fields, {"device"}));
  if (const json* device = Reader::find(*block, "device")) {
    out.device = r.choice(*device, join(path, "device"), kOffloadDevices, Case::kSensitive);
  }
  read_fields(r, *block, path, fields, out);
  // The optimizer tier's NVMe tuning that ZeroTrain's streaming step does not take: it always
  // overlaps reads and writes within a unit, through two chunk-sized staging sets.
  if (key == "offload_optimizer")
    for (const char* k : {"buffer_count", "pipeline_read", "pipeline_write", "fast_init"})
      if (Reader::find(*block, k))
        r.note(
            fmt::format("'{}.{}' has no effect in ZeroTrain: the NVMe optimizer step always "
                        "reads the next chunk and writes the last while it updates one, "
                        "through two staging sets",
                        path, k));
  // The parameter tier's pool: buffer_count buffers, each sized to the largest unit's shard, so
  // no shard ever misses its buffer; the shards in host memory are those buffers' at most.
  if (key == "offload_param") {
    if (Reader::find(*block, "buffer_size"))
      r.note(
          fmt::format("'{}.buffer_size' has no effect in ZeroTrain: each of the buffer_count "
                      "parameter buffers is sized to the largest unit's shard",
                      path));
    if (Reader::find(*block, "max_in_cpu"))
      r.note(
          fmt::format("'{}.max_in_cpu' has no effect in ZeroTrain: with nvme, host memory "
                      "holds the buffer_count parameter buffers and no other shard",
                      path));
  }
  if (out.device == OffloadDevice::kNvme && out.nvme_path.empty()) {
    r.fail(fmt::format("'{}.nvme_path' is required when '{}.device' is \"nvme\"", path, path));
  }
}

// DeepSpeed's older spellings of offload: cpu_offload (optimizer), cpu_offload_param, and
// cpu_offload_use_pin_memory (both). Each is an error beside the block it stands for.
void parse_older_offload(const Reader& r, const json& zero, ZeroConfig& z) {
  struct Older {
    std::string_view key, block;
    OffloadConfig* out;
  };
  const Older older[] = {{"cpu_offload", "offload_optimizer", &z.offload_optimizer},
                         {"cpu_offload_param", "offload_param", &z.offload_param}};
  for (const Older& o : older) {
    const json* v = Reader::find(zero, o.key);
    if (!v) continue;
    const std::string path = join("zero_optimization", o.key);
    bool on = r.boolean(*v, path);
    if (Reader::find(zero, o.block)) {
      r.fail(fmt::format("'{}' is the older spelling of 'zero_optimization.{}'; give only one",
                         path, o.block));
    }
    if (on) o.out->device = OffloadDevice::kCpu;
  }
  if (const json* v = Reader::find(zero, "cpu_offload_use_pin_memory")) {
    const std::string path = "zero_optimization.cpu_offload_use_pin_memory";
    bool pin = r.boolean(*v, path);
    for (std::string_view block : {"offload_optimizer", "offload_param"}) {
      const json* b = Reader::find(zero, block);
      if (b && b->is_object() && b->contains("pin_memory")) {
        r.fail(
            fmt::format("'{}' is the older spelling of 'zero_optimization.{}.pin_memory'; give "
                        "only one",
                        path, block));
      }
    }
    z.offload_optimizer.pin_memory = z.offload_param.pin_memory = pin;
  }
}

constexpr Field<ZeroConfig> kZeroFields[] = {
    {"stage", &ZeroConfig::stage},
    {"overlap_comm", &ZeroConfig::overlap_comm},
    {"reduce_bucket_size", &ZeroConfig::reduce_bucket_size, Bound::kPositive},
    {"allgather_bucket_size", &ZeroConfig::allgather_bucket_size, Bound::kPositive},
    {"stage3_prefetch_bucket_size", &ZeroConfig::stage3_prefetch_bucket_size, Bound::kPositive,
     "prefetch_bucket_size"},
    {"stage3_param_persistence_threshold", &ZeroConfig::stage3_param_persistence_threshold,
     Bound::kNonNegative, "param_persistence_threshold"},
    {"stage3_max_live_parameters", &ZeroConfig::stage3_max_live_parameters, Bound::kNonNegative,
     "max_live_parameters"},
    {"stage3_max_reuse_distance", &ZeroConfig::stage3_max_reuse_distance, Bound::kNonNegative,
     "max_reuse_distance"},
    {"stage3_gather_16bit_weights_on_model_save",
     &ZeroConfig::stage3_gather_16bit_weights_on_model_save, Bound::kAny,
     "gather_16bit_weights_on_model_save"},
};
constexpr std::string_view kGatherFp16 = "stage3_gather_fp16_weights_on_model_save";  // older name

// Offload tiers the stage cannot use are errors, not silent no-ops; except at stage 0, where
// DeepSpeed ignores both offload blocks (ZeRO is off), and so does ZeroTrain, with a note.
void check_offload_stage(const Reader& r, ZeroConfig& z) {
  if (z.stage == 0) {
    for (OffloadConfig* o : {&z.offload_optimizer, &z.offload_param}) {
      if (o->device == OffloadDevice::kNone) continue;
      r.note(fmt::format(
          "'zero_optimization.{}' has no effect at zero_optimization.stage 0: ZeRO is off, so "
          "DeepSpeed does not offload, and neither does ZeroTrain (offload needs stage >= 1; "
          "offload_param stage 3)",
          o == &z.offload_optimizer ? "offload_optimizer" : "offload_param"));
      *o = OffloadConfig{};
    }
  }
  if (z.offload_param.device != OffloadDevice::kNone && z.stage != 3) {
    r.fail(fmt::format(
        "'zero_optimization.offload_param' needs zero_optimization.stage 3, got stage {}",
        z.stage));
  }
  if (z.offload_param.device != OffloadDevice::kNone &&
      z.offload_optimizer.device == OffloadDevice::kNone) {
    r.fail(
        "'zero_optimization.offload_param' needs 'zero_optimization.offload_optimizer' too "
        "(device \"cpu\" or \"nvme\"): the optimizer writes the updated parameter shards where "
        "it runs, on the host");
  }
}

}  // namespace

ZeroConfig parse_zero(const Reader& r, const json* block) {
  ZeroConfig z;
  if (!block) return z;
  const std::string path = "zero_optimization";
  r.check_keys(
      *block, path,
      concat(keys_of(kZeroFields, {"offload_optimizer", "offload_param", "cpu_offload",
                                   "cpu_offload_param", "cpu_offload_use_pin_memory", kGatherFp16}),
             rule_keys(zero_rules())));
  read_fields(r, *block, path, kZeroFields, z);
  if (const json* v = Reader::find(*block, kGatherFp16)) {
    if (find_field(r, *block, path, kZeroFields[std::size(kZeroFields) - 1], nullptr)) {
      r.fail(fmt::format(
          "'{}.{}' is the older spelling of '{}.stage3_gather_16bit_weights_on_model_save'; "
          "give only one",
          path, kGatherFp16, path));
    }
    z.stage3_gather_16bit_weights_on_model_save = r.boolean(*v, join(path, kGatherFp16));
  }
  r.check_range(z.stage, 0, 3, "zero_optimization.stage");
  if (!Reader::find(*block, "overlap_comm")) z.overlap_comm = z.stage == 3;  // DeepSpeed's default
  parse_offload(r, *block, "offload_optimizer", kOffloadOptimizerFields, z.offload_optimizer);
  parse_offload(r, *block, "offload_param", kOffloadParamFields, z.offload_param);
  parse_older_offload(r, *block, z);
  check_offload_stage(r, z);
  apply_rules(r, *block, path, zero_rules());
  return z;
}

// ---- precision -------------------------------------------------------------------------------

namespace {

constexpr Field<Fp16Config> kFp16Fields[] = {
    {"enabled", &Fp16Config::enabled},
    {"loss_scale", &Fp16Config::loss_scale, Bound::kNonNegative},
    {"initial_scale_power", &Fp16Config::initial_scale_power, Bound::kNonNegative},
    {"loss_scale_window", &Fp16Config::loss_scale_window, Bound::kPositive},
    {"hysteresis", &Fp16Config::hysteresis, Bound::kPositive},
    {"consecutive_hysteresis", &Fp16Config::consecutive_hysteresis},
    {"min_loss_scale", &Fp16Config::min_loss_scale, Bound::kPositive},
    {"fp16_master_weights_and_grads", &Fp16Config::fp16_master_weights_and_grads},
};

// DeepSpeed's DtypeEnum spellings.
constexpr Choice<DType> kDTypes[] = {{"fp32", DType::kF32},    {"float32", DType::kF32},
                                     {"float", DType::kF32},   {"fp16", DType::kF16},
                                     {"float16", DType::kF16}, {"half", DType::kF16},
                                     {"bf16", DType::kBF16},   {"bfloat16", DType::kBF16}};

Fp16Config parse_fp16(const Reader& r, const json* block) {
  Fp16Config f;
  if (!block) return f;
  r.check_keys(*block, "fp16", concat(keys_of(kFp16Fields), rule_keys(fp16_rules())));
  read_fields(r, *block, "fp16", kFp16Fields, f);
  r.check_range(f.initial_scale_power, 0, 63, "fp16.initial_scale_power");
  apply_rules(r, *block, "fp16", fp16_rules());
  return f;
}

// "bf16", or DeepSpeed's alias "bfloat16"; error messages use the name the file used.
Bf16Config parse_bf16(const Reader& r, const json& j) {
  Bf16Config b;
  const json* bf16 = find_block(r, j, "", "bf16");
  const json* bfloat16 = find_block(r, j, "", "bfloat16");
  if (bf16 && bfloat16) r.fail("'bf16' and 'bfloat16' name the same block; give only one");
  const json* block = bf16 ? bf16 : bfloat16;
  if (!block) return b;
  std::string_view name = bf16 ? "bf16" : "bfloat16";
  static constexpr Field<Bf16Config> kFields[] = {
      {"enabled", &Bf16Config::enabled},
      {"bf16_master_weights_and_grads", &Bf16Config::bf16_master_weights_and_grads},
  };
  r.check_keys(*block, name, concat(keys_of(kFields), rule_keys(bf16_rules())));
  read_fields(r, *block, name, kFields, b);
  apply_rules(r, *block, name, bf16_rules());
  return b;
}

DataTypesConfig parse_data_types(const Reader& r, const json* block) {
  DataTypesConfig d;
  if (!block) return d;
  static constexpr std::string_view kKeys[] = {"grad_accum_dtype"};
  r.check_keys(*block, "data_types", kKeys);
  if (const json* v = Reader::find(*block, "grad_accum_dtype")) {
    d.grad_accum_dtype = r.choice(*v, "data_types.grad_accum_dtype", kDTypes, Case::kSensitive);
  }
  return d;
}

}  // namespace

void parse_precision(const Reader& r, const json& j, Config& c) {
  c.fp16 = parse_fp16(r, find_block(r, j, "", "fp16"));
  c.bf16 = parse_bf16(r, j);
  if (c.fp16.enabled && c.bf16.enabled) {
    r.fail("'fp16.enabled' and 'bf16.enabled' are both true; enable at most one");
  }
  c.data_types = parse_data_types(r, find_block(r, j, "", "data_types"));
  if (const json* v = Reader::find(j, "communication_data_type")) {
    c.communication_data_type = r.choice(*v, "communication_data_type", kDTypes, Case::kSensitive);
  }
}

void parse_monitors(const Reader& r, const json& j, Config& c) {
  static constexpr Field<MonitorConfig> kFields[] = {
      {"enabled", &MonitorConfig::enabled},
      {"output_path", &MonitorConfig::output_path},
      {"job_name", &MonitorConfig::job_name},
  };
  for (auto [name, out] :
       {std::pair{"tensorboard", &c.tensorboard}, std::pair{"csv_monitor", &c.csv_monitor}}) {
    const json* block = find_block(r, j, "", name);
    if (!block) continue;
    r.check_keys(*block, name, keys_of(kFields));
    read_fields(r, *block, name, kFields, *out);
    if (out->enabled && out->job_name.empty())
      r.fail(fmt::format("'{}.job_name' is empty; it names the directory the files go to", name));
  }
}

// ---- activation checkpointing and aio --------------------------------------------------------

ActivationCheckpointing parse_checkpointing(const Reader& r, const json* block) {
  ActivationCheckpointing a;
  if (!block) return a;
  const std::string path = "activation_checkpointing";
  std::vector<std::string_view> keys = rule_keys(checkpointing_rules());
  keys.push_back("number_checkpoints");
  r.check_keys(*block, path, keys);
  apply_rules(r, *block, path, checkpointing_rules());
  a.policy = ActivationCheckpointing::Policy::kEveryUnit;
  if (const json* v = Reader::find(*block, "number_checkpoints")) {
    a.count = r.int32(*v, path + ".number_checkpoints");
    r.check_bound(*v, Bound::kNonNegative, path + ".number_checkpoints");
    a.policy = ActivationCheckpointing::Policy::kCount;
  }
  return a;
}

AioConfig parse_aio(const Reader& r, const json* block, bool nvme_offload) {
  static constexpr Field<AioConfig> kAioFields[] = {
      {"block_size", &AioConfig::block_size, Bound::kPositive},
      {"queue_depth", &AioConfig::queue_depth, Bound::kPositive},
      {"intra_op_parallelism", &AioConfig::thread_count, Bound::kPositive},
      {"thread_count", &AioConfig::thread_count, Bound::kPositive},  // its older name
      {"single_submit", &AioConfig::single_submit},
      {"overlap_events", &AioConfig::overlap_events},
  };
  AioConfig a;
  if (!block) return a;
  r.check_keys(*block, "aio", keys_of(kAioFields, {"use_gds"}));
  if (Reader::find(*block, "intra_op_parallelism") && Reader::find(*block, "thread_count"))
    r.fail("'aio.thread_count' is the older name of 'aio.intra_op_parallelism': give one of them");
  if (const json* gds = Reader::find(*block, "use_gds"); gds && r.boolean(*gds, "aio.use_gds"))
    r.fail(
        "'aio.use_gds' is true: GPUDirect Storage (NVMe straight to GPU memory) is not "
        "supported; swap files go through host memory (set it false)");
  read_fields(r, *block, "aio", kAioFields, a);
  if (a.block_size % 4096 != 0)
    r.fail(fmt::format("'aio.block_size' is {}: O_DIRECT I/O needs a multiple of 4096 bytes",
                       a.block_size));
  if (!nvme_offload)
    r.note(
        "'aio' has no effect in ZeroTrain here: it tunes NVMe offload "
        "(zero_optimization.offload_optimizer or offload_param with device \"nvme\"), which "
        "this config does not use");
  return a;
}

}  // namespace zt::config_detail
