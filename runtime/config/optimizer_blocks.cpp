// The optimizer and scheduler blocks: {type, params}. The type picks which params are allowed
// (the keys of the DeepSpeed or torch constructor); documented keys ZeroTrain does not use get
// a note or a refusal (key_rules.cpp), and optimizer types ZeroTrain does not build are refused
// by name with what to use instead. Does not resolve "auto" (auto_values.cpp runs first).
#include <fmt/format.h>

#include <array>

#include "runtime/config/blocks.h"
#include "runtime/config/key_rules.h"

namespace zt::config_detail {

namespace {

// ---- optimizer -------------------------------------------------------------------------------

constexpr Choice<OptimizerType> kOptimizerTypes[] = {
    {"Adam", OptimizerType::kAdam}, {"AdamW", OptimizerType::kAdamW}, {"SGD", OptimizerType::kSGD}};

// DeepSpeed optimizers ZeroTrain does not build, matched case-insensitively as DeepSpeed does.
struct RefusedOptimizer {
  std::string_view name, reason;
};
constexpr std::string_view kCompressed =
    "compresses gradient communication to 1 bit with error feedback, which ZeroTrain does not "
    "build; use \"Adam\" or \"AdamW\" (communication_data_type chooses a 16-bit reduction)";
constexpr RefusedOptimizer kRefusedOptimizers[] = {
    {"OneBitAdam", kCompressed},
    {"ZeroOneAdam", kCompressed},
    {"OneBitLamb", kCompressed},
    {"Lamb",
     "needs a trust ratio per tensor, that is per-tensor norms across shards, which ZeroTrain "
     "does not build; use \"AdamW\""},
    {"FusedLamb", "is LAMB, which needs per-tensor norms across shards (not built); use \"AdamW\""},
    {"Muon", "orthogonalises whole weight matrices, which shards do not hold; use \"AdamW\""},
    {"Lion", "is not built; use \"AdamW\""},
    {"Adagrad", "is not built; use \"AdamW\""},
};

constexpr Field<OptimizerConfig> kOptimizerFields[] = {
    {"lr", &OptimizerConfig::lr, Bound::kNonNegative},
    {"eps", &OptimizerConfig::eps, Bound::kNonNegative},
    {"weight_decay", &OptimizerConfig::weight_decay, Bound::kNonNegative},
    {"momentum", &OptimizerConfig::momentum, Bound::kNonNegative},
    {"adam_w_mode", &OptimizerConfig::adam_w_mode},
    {"bias_correction", &OptimizerConfig::bias_correction},
};

// The implemented params of each type; their rule keys are allowed too.
std::vector<std::string_view> optimizer_params(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdam:
      return concat({"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction"},
                    rule_keys(adam_param_rules(false)));
    case OptimizerType::kAdamW:
      return concat({"lr", "betas", "eps", "weight_decay", "bias_correction"},
                    rule_keys(adam_param_rules(true)));
    case OptimizerType::kSGD:
      return concat({"lr", "momentum", "weight_decay"}, rule_keys(sgd_param_rules()));
  }
  return {};
}

std::span<const KeyRule> param_rules(OptimizerType type) {
  return type == OptimizerType::kSGD ? sgd_param_rules()
                                     : adam_param_rules(type == OptimizerType::kAdamW);
}

std::array<double, 2> read_betas(const Reader& r, const json& v, const std::string& path) {
  if (!v.is_array() || v.size() != 2) r.type_error(v, path, "an array of 2 numbers");
  std::array<double, 2> betas{};
  for (size_t i = 0; i < 2; ++i) {
    std::string item_path = fmt::format("{}[{}]", path, i);
    betas[i] = r.number(v[i], item_path);
    if (betas[i] < 0 || betas[i] >= 1) {
      r.fail(fmt::format("'{}' must be >= 0 and < 1, got {}", item_path, v[i].dump()));
    }
  }
  return betas;
}

}  // namespace

OptimizerConfig parse_optimizer(const Reader& r, const json* block) {
  OptimizerConfig o;
  if (!block) return o;
  r.check_keys(*block, "optimizer", concat({"type", "params"}, rule_keys(optimizer_block_rules())));
  apply_rules(r, *block, "optimizer", optimizer_block_rules());
  const json& type = r.require(*block, "optimizer", "type");
  if (type.is_string()) {
    for (const RefusedOptimizer& refused : kRefusedOptimizers) {
      if (equal_ignoring_case(type.get<std::string>(), refused.name)) {
        r.fail(fmt::format("'optimizer.type' \"{}\" is not supported: it {}", refused.name,
                           refused.reason));
      }
    }
  }
  o.type = r.choice(type, "optimizer.type", kOptimizerTypes, Case::kInsensitive);  // as DeepSpeed
  const json* params = find_block(r, *block, "optimizer", "params");
  if (!params) return o;
  r.check_keys(*params, "optimizer.params", optimizer_params(o.type),
               fmt::format(" (not a parameter of optimizer type {})", type.dump()));
  read_fields(r, *params, "optimizer.params", kOptimizerFields, o);
  if (o.type == OptimizerType::kAdamW) o.adam_w_mode = true;  // its rule refuses false
  if (const json* betas = Reader::find(*params, "betas"))
    o.betas = read_betas(r, *betas, "optimizer.params.betas");
  apply_rules(r, *params, "optimizer.params", param_rules(o.type));
  return o;
}

// ---- scheduler -------------------------------------------------------------------------------

namespace {

constexpr Choice<SchedulerType> kSchedulerTypes[] = {
    {"WarmupLR", SchedulerType::kWarmupLR},
    {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
    {"WarmupCosineLR", SchedulerType::kWarmupCosineLR},
    {"OneCycle", SchedulerType::kOneCycle},
    {"LRRangeTest", SchedulerType::kLRRangeTest}};
constexpr Choice<WarmupType> kWarmupTypes[] = {{"log", WarmupType::kLog},
                                               {"linear", WarmupType::kLinear}};

constexpr Field<SchedulerConfig> kSchedulerFields[] = {
    {"warmup_min_lr", &SchedulerConfig::warmup_min_lr, Bound::kNonNegative},
    {"warmup_max_lr", &SchedulerConfig::warmup_max_lr, Bound::kNonNegative},
    {"warmup_num_steps", &SchedulerConfig::warmup_num_steps, Bound::kPositive},
    {"total_num_steps", &SchedulerConfig::total_num_steps, Bound::kPositive},
    {"warmup_min_ratio", &SchedulerConfig::warmup_min_ratio, Bound::kUnitInterval},
    {"cos_min_ratio", &SchedulerConfig::cos_min_ratio, Bound::kUnitInterval},
    {"cycle_min_lr", &SchedulerConfig::cycle_min_lr, Bound::kNonNegative},
    {"cycle_max_lr", &SchedulerConfig::cycle_max_lr, Bound::kNonNegative},
    {"decay_lr_rate", &SchedulerConfig::decay_lr_rate, Bound::kNonNegative},
    {"cycle_first_step_size", &SchedulerConfig::cycle_first_step_size, Bound::kPositive},
    {"cycle_second_step_size", &SchedulerConfig::cycle_second_step_size, Bound::kNonNegative},
    {"cycle_first_stair_count", &SchedulerConfig::cycle_first_stair_count, Bound::kNonNegative},
    {"cycle_second_stair_count", &SchedulerConfig::cycle_second_stair_count, Bound::kNonNegative},
    {"decay_step_size", &SchedulerConfig::decay_step_size, Bound::kNonNegative},
    {"lr_range_test_min_lr", &SchedulerConfig::lr_range_test_min_lr, Bound::kNonNegative},
    {"lr_range_test_step_size", &SchedulerConfig::lr_range_test_step_size, Bound::kPositive},
    {"lr_range_test_step_rate", &SchedulerConfig::lr_range_test_step_rate, Bound::kNonNegative},
    {"lr_range_test_staircase", &SchedulerConfig::lr_range_test_staircase},
};

// OneCycle's momentum keys: accepted, no effect (the engine keeps betas and momentum fixed).
constexpr std::string_view kMomentumKeys[] = {"cycle_momentum", "cycle_min_mom", "cycle_max_mom",
                                              "decay_mom_rate"};

// The parameters each DeepSpeed scheduler constructor takes (last_batch_iteration is a rule).
std::vector<std::string_view> scheduler_params(SchedulerType type) {
  std::vector<std::string_view> keys;
  switch (type) {
    case SchedulerType::kWarmupLR:
      keys = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"};
      break;
    case SchedulerType::kWarmupDecayLR:
      keys = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
              "total_num_steps"};
      break;
    case SchedulerType::kWarmupCosineLR:
      keys = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
              "warmup_type"};
      break;
    case SchedulerType::kOneCycle:
      keys = {"cycle_min_lr",
              "cycle_max_lr",
              "decay_lr_rate",
              "cycle_first_step_size",
              "cycle_second_step_size",
              "cycle_first_stair_count",
              "cycle_second_stair_count",
              "decay_step_size"};
      keys.insert(keys.end(), std::begin(kMomentumKeys), std::end(kMomentumKeys));
      break;
    case SchedulerType::kLRRangeTest:
      keys = {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
              "lr_range_test_staircase"};
      break;
    case SchedulerType::kNone: break;
  }
  return concat(keys, rule_keys(scheduler_param_rules()));
}

// DeepSpeed's OneCycle cycles momentum (beta1) inversely to the lr unless cycle_momentum is
// false; ZeroTrain keeps it fixed, so the cycling is noted once, and each momentum key given.
void note_momentum_cycling(const Reader& r, const json& params) {
  const json* cycle = Reader::find(params, "cycle_momentum");
  bool cycling = !cycle || r.boolean(*cycle, "scheduler.params.cycle_momentum");
  if (cycling) {
    r.note(
        "'scheduler.params.cycle_momentum' (OneCycle cycles momentum unless it is false) has no "
        "effect in ZeroTrain: betas and momentum stay fixed for the run; only the lr cycles");
  }
  for (std::string_view key : kMomentumKeys) {
    if (key == "cycle_momentum") continue;
    if (const json* v = Reader::find(params, key)) {
      const std::string path = join("scheduler.params", key);
      r.number(*v, path);
      r.note(fmt::format("'{}' has no effect in ZeroTrain: momentum is not cycled", path));
    }
  }
}

}  // namespace

SchedulerConfig parse_scheduler(const Reader& r, const json* block, double optimizer_lr) {
  SchedulerConfig s;
  if (!block) return s;
  static constexpr std::string_view kKeys[] = {"type", "params"};
  r.check_keys(*block, "scheduler", kKeys);
  const json& type = r.require(*block, "scheduler", "type");
  s.type = r.choice(type, "scheduler.type", kSchedulerTypes, Case::kSensitive);  // as DeepSpeed
  // DeepSpeed's constructor defaults: WarmupLR peaks at the optimizer's lr, WarmupDecayLR at 0.001.
  s.warmup_max_lr = s.type == SchedulerType::kWarmupLR ? optimizer_lr : 1e-3;
  static const json kEmpty = json::object();
  const json* found = find_block(r, *block, "scheduler", "params");
  const json& params = found ? *found : kEmpty;
  r.check_keys(params, "scheduler.params", scheduler_params(s.type),
               fmt::format(" (not a parameter of scheduler type {})", type.dump()));
  read_fields(r, params, "scheduler.params", kSchedulerFields, s);
  if (const json* v = Reader::find(params, "warmup_type")) {
    s.warmup_type = r.choice(*v, "scheduler.params.warmup_type", kWarmupTypes, Case::kSensitive);
  }
  apply_rules(r, params, "scheduler.params", scheduler_param_rules());
  switch (s.type) {
    case SchedulerType::kWarmupDecayLR:
    case SchedulerType::kWarmupCosineLR:
      r.require(params, "scheduler.params", "total_num_steps");
      break;
    case SchedulerType::kOneCycle:
      r.require(params, "scheduler.params", "cycle_min_lr");
      r.require(params, "scheduler.params", "cycle_max_lr");
      if (s.cycle_second_step_size < 0) s.cycle_second_step_size = s.cycle_first_step_size;
      if (s.cycle_second_stair_count < 0) s.cycle_second_stair_count = s.cycle_first_stair_count;
      note_momentum_cycling(r, params);
      break;
    default: break;
  }
  return s;
}

}  // namespace zt::config_detail
