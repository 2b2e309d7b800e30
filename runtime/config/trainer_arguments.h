// The Hugging Face Trainer's own arguments in the zt block (zt.learning_rate, zt.max_steps,
// zt.per_device_train_batch_size, ...): "auto" in the DeepSpeed keys resolved from them the way
// the Trainer's DeepSpeed integration fills its config (transformers' HfTrainerDeepSpeedConfig):
//   per_device_train_batch_size  train_micro_batch_size_per_gpu
//   gradient_accumulation_steps  gradient_accumulation_steps (train_batch_size then follows)
//   max_grad_norm                gradient_clipping
//   learning_rate                optimizer.params.lr, scheduler.params.warmup_max_lr
//   adam_beta1, adam_beta2       optimizer.params.betas (one given: the Trainer's default for
//                                the other, 0.9 or 0.999)
//   adam_epsilon, weight_decay   optimizer.params.eps, optimizer.params.weight_decay
//   max_steps                    zt.steps, scheduler.params.total_num_steps
//   warmup_steps, warmup_ratio   scheduler.params.warmup_num_steps (warmup_steps when > 0, else
//                                ceil(warmup_ratio * max_steps))
//   fp16, bf16                   fp16.enabled, bf16.enabled
//   lr_scheduler_type            without a scheduler block, the DeepSpeed scheduler that
//                                computes the Trainer's: linear -> WarmupDecayLR, cosine ->
//                                WarmupCosineLR (to 0), constant_with_warmup -> WarmupLR,
//                                constant -> none; others refused naming the type
// Only "auto" is filled, as the Trainer fills it: a key given a value that an argument
// contradicts is refused naming both, and an absent key stays absent (zt.steps excepted: max_steps
// gives it). Where no argument gives a value, "auto" is left to resolve_auto (auto_values.h),
// which derives it or names it. The arguments are taken out of the zt block here.
#pragma once

#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/config/reader.h"

namespace zt::config_detail {

// Rewrites `j` in place; each value filled becomes a row of `rows`.
void apply_trainer_arguments(const Reader& r, json& j, std::vector<Config::FromArgument>& rows);

}  // namespace zt::config_detail
