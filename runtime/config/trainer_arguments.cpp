// "auto" from the Hugging Face Trainer's arguments in the zt block (trainer_arguments.h).
#include "runtime/config/trainer_arguments.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "runtime/config/blocks.h"

namespace zt::config_detail {

namespace {

// The arguments, read and checked (each is taken out of the zt block).
struct TrainerArguments {
  std::optional<json> learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon,
      max_grad_norm, warmup_ratio;
  std::optional<int64_t> max_steps, warmup_steps, per_device_train_batch_size,
      gradient_accumulation_steps;
  std::optional<bool> fp16, bf16;
  std::optional<std::string> lr_scheduler_type;
};

TrainerArguments take_arguments(const Reader& r, json& zt) {
  TrainerArguments a;
  auto take = [&](const char* name) -> std::optional<json> {
    auto it = zt.find(name);
    if (it == zt.end()) return std::nullopt;
    json v = *it;
    zt.erase(it);
    return v;
  };
  const std::string p = "zt";
  for (auto [name, out, bound] :
       {std::tuple{"learning_rate", &a.learning_rate, Bound::kNonNegative},
        std::tuple{"weight_decay", &a.weight_decay, Bound::kNonNegative},
        std::tuple{"adam_beta1", &a.adam_beta1, Bound::kUnitInterval},
        std::tuple{"adam_beta2", &a.adam_beta2, Bound::kUnitInterval},
        std::tuple{"adam_epsilon", &a.adam_epsilon, Bound::kPositive},
        std::tuple{"max_grad_norm", &a.max_grad_norm, Bound::kNonNegative},
        std::tuple{"warmup_ratio", &a.warmup_ratio, Bound::kUnitInterval}})
    if (auto v = take(name)) {
      r.number(*v, join(p, name));
      r.check_bound(*v, bound, join(p, name));
      *out = *v;
    }
  for (auto [name, out, bound] :
       {std::tuple{"max_steps", &a.max_steps, Bound::kPositive},
        std::tuple{"warmup_steps", &a.warmup_steps, Bound::kNonNegative},
        std::tuple{"per_device_train_batch_size", &a.per_device_train_batch_size, Bound::kPositive},
        std::tuple{"gradient_accumulation_steps", &a.gradient_accumulation_steps,
                   Bound::kPositive}})
    if (auto v = take(name)) {
      *out = r.integer(*v, join(p, name));
      r.check_bound(*v, bound, join(p, name));
    }
  if (auto v = take("fp16")) a.fp16 = r.boolean(*v, "zt.fp16");
  if (auto v = take("bf16")) a.bf16 = r.boolean(*v, "zt.bf16");
  if (a.fp16.value_or(false) && a.bf16.value_or(false))
    r.fail("'zt.fp16' and 'zt.bf16' are both true; give at most one");
  if (auto v = take("lr_scheduler_type"))
    a.lr_scheduler_type = r.string(*v, "zt.lr_scheduler_type");
  return a;
}

class Filler {
 public:
  Filler(const Reader& r, std::vector<Config::FromArgument>& rows) : r_(r), rows_(rows) {}

  // obj[key] = value where it is "auto"; a value given that differs is refused naming both.
  void fill(json* obj, const std::string& path, std::string_view key, const json& value,
            const std::string& from) {
    if (!obj) return;
    auto it = obj->find(key);
    if (it == obj->end()) return;
    if (is_auto(*it)) {
      *it = value;
      rows_.push_back({path, value.dump(), from});
    } else if (!same(*it, value)) {
      r_.fail(fmt::format("'{}' is {} but '{}' gives {}; they must agree (or make '{}' \"auto\")",
                          path, it->dump(), from, value.dump(), path));
    }
  }
  json* object(json* parent, std::string_view key) {
    if (!parent) return nullptr;
    auto it = parent->find(key);
    return it != parent->end() && it->is_object() ? &*it : nullptr;
  }

 private:
  static bool same(const json& a, const json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    if (a.is_array() && b.is_array() && a.size() == b.size()) {
      for (size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i])) return false;
      return true;
    }
    return a == b;
  }
  const Reader& r_;
  std::vector<Config::FromArgument>& rows_;
};

// The DeepSpeed scheduler block that computes the Trainer's lr_scheduler_type; null for
// "constant" (no scheduler).
json scheduler_for(const Reader& r, const std::string& type) {
  const json warmup = {{"warmup_num_steps", "auto"}, {"warmup_type", "linear"}};
  if (type == "linear")
    return {{"type", "WarmupDecayLR"},
            {"params",
             {{"warmup_min_lr", 0},
              {"warmup_max_lr", "auto"},
              {"warmup_num_steps", "auto"},
              {"warmup_type", "linear"},
              {"total_num_steps", "auto"}}}};
  if (type == "cosine")
    return {{"type", "WarmupCosineLR"},
            {"params",
             {{"warmup_min_ratio", 0},
              {"cos_min_ratio", 0},
              {"warmup_num_steps", "auto"},
              {"warmup_type", "linear"},
              {"total_num_steps", "auto"}}}};
  if (type == "constant_with_warmup")
    return {{"type", "WarmupLR"},
            {"params",
             {{"warmup_min_lr", 0},
              {"warmup_max_lr", "auto"},
              {"warmup_num_steps", "auto"},
              {"warmup_type", "linear"}}}};
  if (type == "constant") return nullptr;
  r.fail(
      fmt::format("'zt.lr_scheduler_type' is '{}'; zt-train builds linear, cosine, "
                  "constant_with_warmup and constant (a DeepSpeed scheduler block gives any of "
                  "its own)",
                  type));
}

}  // namespace

void apply_trainer_arguments(const Reader& r, json& j, std::vector<Config::FromArgument>& rows) {
  auto zt_it = j.find("zt");
  if (zt_it == j.end() || !zt_it->is_object()) return;
  const TrainerArguments a = take_arguments(r, *zt_it);
  Filler f(r, rows);
  json* zt = &*zt_it;
  const auto arg = [](const char* name) { return std::string("zt.") + name; };

  if (a.lr_scheduler_type) {
    if (j.contains("scheduler")) {
      r.note(
          fmt::format("'zt.lr_scheduler_type' {} has no effect: the config's scheduler block "
                      "is used, as the Hugging Face Trainer uses it",
                      *a.lr_scheduler_type));
    } else if (json block = scheduler_for(r, *a.lr_scheduler_type); !block.is_null()) {
      j["scheduler"] = block;
      rows.push_back({"scheduler", block["type"].get<std::string>(), arg("lr_scheduler_type")});
    }
  }
  if (a.max_steps) {
    if (const json* steps = Reader::find(*zt, "steps"); steps && *steps != json(*a.max_steps))
      r.fail(fmt::format("'zt.steps' is {} but 'zt.max_steps' gives {}; give one", steps->dump(),
                         *a.max_steps));
    if (!zt->contains("steps"))
      rows.push_back({"zt.steps", std::to_string(*a.max_steps), arg("max_steps")});
    (*zt)["steps"] = *a.max_steps;
  }
  if (a.per_device_train_batch_size)
    f.fill(&j, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu",
           *a.per_device_train_batch_size, arg("per_device_train_batch_size"));
  if (a.gradient_accumulation_steps)
    f.fill(&j, "gradient_accumulation_steps", "gradient_accumulation_steps",
           *a.gradient_accumulation_steps, arg("gradient_accumulation_steps"));
  if (a.max_grad_norm)
    f.fill(&j, "gradient_clipping", "gradient_clipping", *a.max_grad_norm, arg("max_grad_norm"));

  json* optimizer = f.object(f.object(&j, "optimizer"), "params");
  if (a.learning_rate)
    f.fill(optimizer, "optimizer.params.lr", "lr", *a.learning_rate, arg("learning_rate"));
  if (a.adam_beta1 || a.adam_beta2)
    f.fill(optimizer, "optimizer.params.betas", "betas",
           json::array({a.adam_beta1.value_or(json(0.9)), a.adam_beta2.value_or(json(0.999))}),
           a.adam_beta1 && a.adam_beta2 ? "zt.adam_beta1, zt.adam_beta2"
           : a.adam_beta1               ? "zt.adam_beta1 (adam_beta2: the Trainer's 0.999)"
                                        : "zt.adam_beta2 (adam_beta1: the Trainer's 0.9)");
  if (a.adam_epsilon)
    f.fill(optimizer, "optimizer.params.eps", "eps", *a.adam_epsilon, arg("adam_epsilon"));
  if (a.weight_decay)
    f.fill(optimizer, "optimizer.params.weight_decay", "weight_decay", *a.weight_decay,
           arg("weight_decay"));

  json* scheduler = f.object(f.object(&j, "scheduler"), "params");
  if (a.learning_rate)
    f.fill(scheduler, "scheduler.params.warmup_max_lr", "warmup_max_lr", *a.learning_rate,
           arg("learning_rate"));
  if (a.max_steps)
    f.fill(scheduler, "scheduler.params.total_num_steps", "total_num_steps", *a.max_steps,
           arg("max_steps"));
  const std::optional<int64_t> steps =
      a.max_steps ? a.max_steps
                  : (zt->contains("steps") && (*zt)["steps"].is_number_integer()
                         ? std::optional<int64_t>((*zt)["steps"].get<int64_t>())
                         : std::nullopt);
  if (a.warmup_steps && *a.warmup_steps > 0)
    f.fill(scheduler, "scheduler.params.warmup_num_steps", "warmup_num_steps", *a.warmup_steps,
           arg("warmup_steps"));
  else if (a.warmup_ratio && steps)
    f.fill(scheduler, "scheduler.params.warmup_num_steps", "warmup_num_steps",
           static_cast<int64_t>(std::ceil(a.warmup_ratio->get<double>() * double(*steps))),
           "zt.warmup_ratio x steps");
  else if (a.warmup_steps)  // warmup_steps 0 and no ratio: the Trainer warms up for 0 steps
    f.fill(scheduler, "scheduler.params.warmup_num_steps", "warmup_num_steps", 0,
           arg("warmup_steps"));

  if (a.fp16) f.fill(f.object(&j, "fp16"), "fp16.enabled", "enabled", *a.fp16, arg("fp16"));
  if (a.bf16) {
    const char* name = j.contains("bfloat16") && !j.contains("bf16") ? "bfloat16" : "bf16";
    f.fill(f.object(&j, name), std::string(name) + ".enabled", "enabled", *a.bf16, arg("bf16"));
  }
}

}  // namespace zt::config_detail
