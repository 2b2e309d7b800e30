// Weights in and out as safetensors with the models' Hugging Face names and shapes (fp32). Reads
// and writes the engine's full unit buffers through the model's FlatLayouts; padded vocabulary rows
// are left out on export and zero on import. Knows no model beyond the Unit interface.
#pragma once

#include <functional>
#include <string>

#include "runtime/formats/safetensors.h"
#include "runtime/formats/safetensors_set.h"
#include "zero/engine.h"

namespace zt {

// What save_weights writes: the fp32 master (consolidated across shards), or the working
// parameters in the engine's 16-bit compute dtype (stage3_gather_16bit_weights_on_model_save;
// the same as kMaster in fp32 training).
enum class WeightsDtype { kMaster, kWorking };

// A parameter's shape in a weights file: dim 0 trimmed to the rows that hold real values
// (ParamSpec::exported_rows(): GPT-2's padded vocabulary rows are left out).
std::vector<int64_t> exported_shape(const ParamSpec& spec);

// Writes every parameter of every unit (atomic: temp file, fsync, rename). Collective: every
// rank calls it (stage 3 gathers each unit); rank 0 writes. `before_unit(u)`, when given, is
// called on every rank before its part in unit u (zt-train's test-only fault injection).
void save_weights(Engine& engine, const std::string& path,
                  WeightsDtype dtype = WeightsDtype::kMaster,
                  const std::function<void(int unit)>& before_unit = {});
// Loads every parameter (every rank reads the file and keeps what it holds) from a safetensors
// file or a Hugging Face model directory (model.safetensors, or an index and its shards:
// runtime/formats/safetensors_set.h), each tensor in the dtype its file holds (F32, F16, BF16)
// converted on load; a missing tensor, a wrong shape or an unexpected tensor is an input error
// naming the file and the tensor. Accepts the "transformer." prefix of GPT2LMHeadModel
// exports and ignores the buffers and tied head exports carry (attn.bias, attn.masked_bias,
// rotary_emb.inv_freq, lm_head.weight where the model ties it).
void load_weights(Engine& engine, const std::string& path);
// The trainable units' tensors (adapters included) from a file of this model's names, such as
// a consolidated checkpoint of a run with frozen units; the frozen units are left as they are
// (their base loaded by load_weights first). Every trainable tensor must be there, shaped as
// the model's; other tensors are refused. Collective under stage 3.
void load_trainable_weights(Engine& engine, const std::string& path);
// The checks of load_weights without loading: for validating a job before allocating a model.
void check_weights_file(const std::string& path, Model& model);
// Those checks on an open file: the file's entry for each tensor of each unit of `model`, units
// and tensors in the model's (FlatLayout) order. Entries hold the exported shape (dim 0 trimmed
// to ParamSpec::exported_rows()); read them into the unit buffer at the tensor's offset. An
// adapter's tensor (ParamSpec::adapter) is no file's: its entry is null. save_weights leaves
// adapters out; load_weights keeps their values.
std::vector<std::vector<const SafetensorsEntry*>> match_weight_entries(
    const SafetensorsSet& weights, Model& model);

}  // namespace zt
