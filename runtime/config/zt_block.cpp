// The zt block: what is ours (model, data, steps, output, device, its memory limit, the
// communication back end and the checkpoint sub-block; freeze and lora: tuning_block.cpp).
// Required keys: model, seq_len, train_data, steps. Zoo model names are checked by model_zoo/,
// not here. (zt.comm_backend "auto" is ours: the back end follows zt.device.)
#include <algorithm>
#include <iterator>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "runtime/config/blocks.h"

namespace zt::config_detail {

namespace {

constexpr Field<ModelChoice> kModelFields[] = {
    {"n_layer", &ModelChoice::n_layer, Bound::kPositive},
    {"n_head", &ModelChoice::n_head, Bound::kPositive},
    {"n_embd", &ModelChoice::n_embd, Bound::kPositive},
    {"vocab_size", &ModelChoice::vocab_size, Bound::kPositive},
    {"n_positions", &ModelChoice::n_positions, Bound::kPositive},
};

ModelChoice parse_model(const Reader& r, const json& v) {
  ModelChoice m;
  if (v.is_string()) {
    m.zoo_name = v.get<std::string>();
    if (m.zoo_name.empty()) r.fail("'zt.model' must not be empty");
    return m;
  }
  if (!v.is_object()) {
    r.type_error(v, "zt.model",
                 "a string (a model zoo name) or an object (GPT2Config keys, or a config.json's "
                 "with its model_type)");
  }
  m.has_object = true;
  if (const json* type = Reader::find(v, "model_type");
      type && !(type->is_string() && type->get<std::string>() == "gpt2")) {
    // Another family's config.json keys (LlamaConfig's, Qwen2Config's): model_zoo/hf_config.h reads
    // them with the reader of a Hugging Face directory's config.json, which knows every family.
    m.hf_config = v;
    return m;
  }
  r.check_keys(v, "zt.model", keys_of(kModelFields, {"model_type"}));
  read_fields(r, v, "zt.model", kModelFields, m);
  if (m.n_embd % m.n_head != 0) {
    r.fail(fmt::format("'zt.model.n_embd' {} must be a multiple of 'zt.model.n_head' {}", m.n_embd,
                       m.n_head));
  }
  return m;
}

constexpr Field<ZtConfig> kZtFields[] = {
    {"seq_len", &ZtConfig::seq_len, Bound::kPositive},
    {"train_data", &ZtConfig::train_data},
    {"val_data", &ZtConfig::val_data},
    {"steps", &ZtConfig::steps, Bound::kPositive},
    {"eval_every", &ZtConfig::eval_every, Bound::kNonNegative},
    {"eval_batches", &ZtConfig::eval_batches, Bound::kPositive},
    {"seed", &ZtConfig::seed},
    {"output_dir", &ZtConfig::output_dir},
    {"init_from", &ZtConfig::init_from},
    {"save_weights", &ZtConfig::save_weights},
    {"init_adapter", &ZtConfig::init_adapter},
    {"save_adapter", &ZtConfig::save_adapter},
    {"shuffle", &ZtConfig::shuffle},
    {"num_threads", &ZtConfig::num_threads, Bound::kNonNegative},
    {"cpu_gemm", &ZtConfig::cpu_gemm},
    {"device", &ZtConfig::device},
    {"allow_tf32", &ZtConfig::allow_tf32},
    {"comm_backend", &ZtConfig::comm_backend},
    {"comm_timeout_s", &ZtConfig::comm_timeout_s, Bound::kPositive},
    {"comm_init_timeout_s", &ZtConfig::comm_init_timeout_s, Bound::kPositive},
};

constexpr Field<CheckpointConfig> kCheckpointFields[] = {
    {"dir", &CheckpointConfig::dir},
    {"every_n_steps", &CheckpointConfig::every_n_steps, Bound::kNonNegative},
    {"keep_last", &CheckpointConfig::keep_last, Bound::kNonNegative},
    {"async", &CheckpointConfig::async},
};

CheckpointConfig parse_checkpoint(const Reader& r, const json& v) {
  r.expect_object(v, "zt.checkpoint");
  r.check_keys(v, "zt.checkpoint", keys_of(kCheckpointFields));
  CheckpointConfig c;
  c.given = true;
  read_fields(r, v, "zt.checkpoint", kCheckpointFields, c);
  return c;
}

SavePretrainedConfig parse_save_pretrained(const Reader& r, const json& v) {
  SavePretrainedConfig c;
  if (v.is_string()) {
    c.dir = v.get<std::string>();
  } else {
    if (!v.is_object())
      r.type_error(v, "zt.save_pretrained",
                   "a directory or an object {dir, dtype, max_shard_size, merge_adapter}");
    static constexpr std::string_view kKeys[] = {"dir", "dtype", "max_shard_size", "merge_adapter"};
    r.check_keys(v, "zt.save_pretrained", kKeys);
    c.dir = r.string(r.require(v, "zt.save_pretrained", "dir"), "zt.save_pretrained.dir");
    if (const json* d = Reader::find(v, "dtype"))
      c.dtype = r.string(*d, "zt.save_pretrained.dtype");
    if (const json* m = Reader::find(v, "max_shard_size"))
      c.max_shard_size = r.byte_size(*m, "zt.save_pretrained.max_shard_size");
    if (const json* m = Reader::find(v, "merge_adapter"))
      c.merge_adapter = r.boolean(*m, "zt.save_pretrained.merge_adapter");
  }
  if (c.dir.empty()) r.fail("'zt.save_pretrained' names no directory");
  if (c.dtype != "fp32" && c.dtype != "bf16" && c.dtype != "fp16")
    r.fail(fmt::format("'zt.save_pretrained.dtype' is '{}'; use fp32, bf16 or fp16", c.dtype));
  if (c.max_shard_size == 0) r.fail("'zt.save_pretrained.max_shard_size' must be > 0");
  return c;
}

// The adapter keys go with zt.lora: the adapter files (zt.init_adapter, zt.save_adapter) and the
// merged export (zt.save_pretrained.merge_adapter, which a LoRA run's save_pretrained needs: the
// base weights alone would drop what was trained).
void check_adapter_keys(const Reader& r, const ZtConfig& z) {
  const bool lora = z.tuning.lora.enabled;
  for (const auto& [key, value] : {std::pair{"zt.init_adapter", &z.init_adapter},
                                   std::pair{"zt.save_adapter", &z.save_adapter}})
    if (!value->empty() && !lora)
      r.fail(fmt::format(
          "'{}' is '{}', but there is no 'zt.lora': adapter files go with LoRA runs; add a "
          "zt.lora block or remove the key",
          key, *value));
  const SavePretrainedConfig& hf = z.save_pretrained;
  if (hf.merge_adapter && !lora)
    r.fail(
        "'zt.save_pretrained.merge_adapter' is true, but there is no 'zt.lora': there are no "
        "adapters to merge; remove it or add a zt.lora block");
  if (!z.save_weights.empty() && lora)
    r.fail(fmt::format(
        "'zt.save_weights' ('{}') writes the base model's tensors, which a LoRA run does not "
        "train: use 'zt.save_adapter' (PEFT's adapter files) or 'zt.save_pretrained' with "
        "'merge_adapter' (the merged model)",
        z.save_weights));
  if (!hf.dir.empty() && lora && !hf.merge_adapter)
    r.fail(fmt::format(
        "'zt.save_pretrained' ('{}') under zt.lora writes the merged model: set "
        "'zt.save_pretrained.merge_adapter' to true (each adapted weight W + s·B·A), or use "
        "'zt.save_adapter' for PEFT's adapter files",
        hf.dir));
}

}  // namespace

ZtConfig parse_zt(const Reader& r, const json& j) {
  const json& block = r.require(j, "", "zt");
  r.expect_object(block, "zt");
  r.check_keys(block, "zt",
               keys_of(kZtFields, {"model", "device_memory_limit", "checkpoint", "save_pretrained",
                                   "freeze", "lora"}));
  for (std::string_view key : {"seq_len", "train_data", "steps"}) r.require(block, "zt", key);
  // zt.model may be left to a Hugging Face model directory's config.json (zt.init_from); the
  // trainer says so when zt.init_from is not one.
  if (!Reader::find(block, "init_from")) r.require(block, "zt", "model");
  ZtConfig z;
  if (const json* model = Reader::find(block, "model")) z.model = parse_model(r, *model);
  if (const json* save = Reader::find(block, "save_pretrained"))
    z.save_pretrained = parse_save_pretrained(r, *save);
  read_fields(r, block, "zt", kZtFields, z);
  if (const json* limit = Reader::find(block, "device_memory_limit"))
    z.device_memory_limit = r.byte_size(*limit, "zt.device_memory_limit");
  if (const json* checkpoint = Reader::find(block, "checkpoint"))
    z.checkpoint = parse_checkpoint(r, *checkpoint);
  z.tuning = parse_tuning(r, block);
  check_adapter_keys(r, z);
  if (z.train_data.empty()) r.fail("'zt.train_data' must not be empty");
  if (z.output_dir.empty()) r.fail("'zt.output_dir' must not be empty");
  if (z.device != "cpu" && z.device != "cuda")
    r.fail(fmt::format("'zt.device' is '{}'; use cpu or cuda", z.device));
  if (static constexpr std::string_view kGemm[] = {"auto", "measure", "flags", "native", "packed",
                                                   "widened", "packed_b"};
      std::find(std::begin(kGemm), std::end(kGemm), z.cpu_gemm) == std::end(kGemm))
    r.fail(fmt::format(
        "'zt.cpu_gemm' is '{}'; use auto, measure, flags, native, packed, widened or packed_b",
        z.cpu_gemm));
  if (z.comm_backend != "auto" && z.comm_backend != "mpi" && z.comm_backend != "nccl")
    r.fail(fmt::format("'zt.comm_backend' is '{}'; use auto, mpi or nccl", z.comm_backend));
  return z;
}

}  // namespace zt::config_detail
