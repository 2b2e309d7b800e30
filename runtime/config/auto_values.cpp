// "auto" placeholders: resolved the way the Hugging Face Trainer's DeepSpeed integration fills
// them where ZeroTrain can derive the value, recorded for the model where the value comes from
// the hidden size, and otherwise refused in one line that names every such key and the --set
// that fixes it. Rewrites a copy of the JSON; reads no block beyond the keys it resolves.
#include "runtime/config/auto_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/config/blocks.h"
#include "runtime/status.h"

namespace zt::config_detail {

namespace {

// A key whose "auto" cannot be derived: the --set that fixes it, or (empty fix) what it follows
// once another key has a value.
struct Unresolved {
  std::string key;
  std::string fix;
  std::string follows;
};

json* child_object(json& j, std::string_view key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

bool auto_at(const json* obj, std::string_view key) {
  if (!obj) return false;
  auto it = obj->find(key);
  return it != obj->end() && is_auto(*it);
}

// Present and not "auto" (its type is checked when the block is read).
bool given(const json& obj, std::string_view key) {
  const json* v = Reader::find(obj, key);
  return v && !is_auto(*v);
}

// The batch keys: an "auto" one is derived when the other two are known (an absent
// gradient_accumulation_steps is DeepSpeed's 1); else the fixes make two of them known.
AutoBatch batch_auto(json& j, std::vector<Unresolved>& out) {
  AutoBatch a{auto_at(&j, kTbs), auto_at(&j, kMicro), auto_at(&j, kGas)};
  if (!a.train_batch_size && !a.micro && !a.gas) return a;
  const bool tbs = given(j, kTbs), micro = given(j, kMicro),
             gas = given(j, kGas) || !Reader::find(j, kGas);
  if (int(tbs) + int(micro) + int(gas) >= 2) {
    for (std::string_view key : {kTbs, kMicro, kGas}) {
      if (auto_at(&j, key)) j.erase(std::string(key));
    }
    return a;
  }
  if (tbs) {  // only gradient_accumulation_steps can be missing here, and it is "auto"
    out.push_back({std::string(kGas), fmt::format("{}=1", kGas), ""});
    if (a.micro) out.push_back({std::string(kMicro), "", "the other batch sizes"});
    return a;
  }
  if (a.micro || !Reader::find(j, kMicro))
    out.push_back({std::string(kMicro), fmt::format("{}=8", kMicro), ""});
  if (a.gas) out.push_back({std::string(kGas), fmt::format("{}=1", kGas), ""});
  if (a.train_batch_size) out.push_back({std::string(kTbs), "", "the other batch sizes"});
  return a;
}

void optimizer_auto(json& j, std::vector<Unresolved>& out) {
  json* optimizer = child_object(j, "optimizer");
  json* params = optimizer ? child_object(*optimizer, "params") : nullptr;
  // The Trainer's defaults for learning_rate, adam_beta1/2, adam_epsilon and weight_decay.
  const std::pair<std::string_view, std::string_view> keys[] = {
      {"lr", "5e-05"}, {"betas", "[0.9,0.999]"}, {"eps", "1e-08"}, {"weight_decay", "0.0"}};
  for (auto [key, example] : keys) {
    if (!auto_at(params, key)) continue;
    std::string path = join("optimizer.params", key);
    out.push_back({path, fmt::format("{}={}", path, example), ""});
  }
}

// zt.steps, checked as parse_zt would check it (the scheduler is read before the zt block).
int64_t run_steps(const Reader& r, const json& j) {
  const json& zt = r.require(j, "", "zt");
  r.expect_object(zt, "zt");
  const json& steps = r.require(zt, "zt", "steps");
  int64_t n = r.integer(steps, "zt.steps");
  r.check_bound(steps, Bound::kPositive, "zt.steps");
  return n;
}

void scheduler_auto(const Reader& r, json& j, std::vector<Unresolved>& out) {
  json* scheduler = child_object(j, "scheduler");
  json* params = scheduler ? child_object(*scheduler, "params") : nullptr;
  if (!params) return;
  const std::string p = "scheduler.params";
  if (auto_at(params, "warmup_min_lr")) {
    (*params)["warmup_min_lr"] = 0;
    r.note(
        fmt::format("'{}.warmup_min_lr' is \"auto\": resolved to 0, as the Hugging Face "
                    "Trainer fills it in",
                    p));
  }
  if (auto_at(params, "warmup_max_lr")) {
    json* optimizer = child_object(j, "optimizer");
    json* optimizer_params = optimizer ? child_object(*optimizer, "params") : nullptr;
    const json* lr = optimizer_params ? Reader::find(*optimizer_params, "lr") : nullptr;
    if (lr && is_auto(*lr)) {
      out.push_back({p + ".warmup_max_lr", "", "optimizer.params.lr"});
    } else {
      json value = lr ? *lr : json(OptimizerConfig{}.lr);
      (*params)["warmup_max_lr"] = value;
      r.note(
          fmt::format("'{}.warmup_max_lr' is \"auto\": resolved to {}, the optimizer's lr{}, as "
                      "the Hugging Face Trainer fills it in",
                      p, value.dump(), lr ? "" : " (its default)"));
    }
  }
  if (auto_at(params, "total_num_steps")) {
    int64_t steps = run_steps(r, j);
    (*params)["total_num_steps"] = steps;
    r.note(
        fmt::format("'{}.total_num_steps' is \"auto\": resolved to {}, zt.steps (the run's "
                    "optimizer steps, which the Hugging Face Trainer fills in)",
                    p, steps));
  }
  if (auto_at(params, "warmup_num_steps")) {
    int64_t example = std::max<int64_t>(1, run_steps(r, j) / 10);
    out.push_back({p + ".warmup_num_steps", fmt::format("{}.warmup_num_steps={}", p, example), ""});
  }
}

// "enabled": "auto" in fp16 or bf16: the Trainer enables a block only for --fp16 / --bf16, which
// zt-train does not have, so "auto" is false (and must be when the other block is enabled).
void precision_auto(const Reader& r, json& j) {
  json* fp16 = child_object(j, "fp16");
  std::string_view bf16_name = j.contains("bf16") ? "bf16" : "bfloat16";
  json* bf16 = child_object(j, bf16_name);
  auto enabled = [](const json* block) {
    auto it = block ? block->find("enabled") : json::const_iterator{};
    return block && it != block->end() && it->is_boolean() && it->get<bool>();
  };
  struct Side {
    json* block;
    std::string_view name, flag;
    const json* other;
    std::string_view other_name;
  };
  const Side sides[] = {{fp16, "fp16", "--fp16", bf16, bf16_name},
                        {bf16, bf16_name, "--bf16", fp16, "fp16"}};
  // "amp" (Apex) is the Trainer's only with --fp16_backend apex; "auto" there is false too.
  if (json* amp = child_object(j, "amp"); auto_at(amp, "enabled")) {
    (*amp)["enabled"] = false;
    r.note(
        "'amp.enabled' is \"auto\": resolved to false, as the Hugging Face Trainer does without "
        "Apex (mixed precision comes from the fp16 or bf16 block)");
  }
  for (const Side& s : sides) {
    if (!auto_at(s.block, "enabled")) continue;
    (*s.block)["enabled"] = false;
    if (enabled(s.other)) {
      r.note(fmt::format("'{}.enabled' is \"auto\": resolved to false, since '{}.enabled' is true",
                         s.name, s.other_name));
    } else {
      r.note(
          fmt::format("'{}.enabled' is \"auto\": resolved to false, as the Hugging Face Trainer "
                      "does without {} (zt-train has no such flag; --set {}.enabled=true trains "
                      "in {})",
                      s.name, s.flag, s.name, s.name));
    }
  }
}

void zero_auto(const Reader& r, json& j, Config::AutoFromModel& from_model) {
  json* zero = child_object(j, "zero_optimization");
  if (!zero) return;
  const std::tuple<std::string_view, std::string_view, bool*> sized[] = {
      {"reduce_bucket_size", "", &from_model.reduce_bucket_size},
      {"stage3_prefetch_bucket_size", "prefetch_bucket_size",
       &from_model.stage3_prefetch_bucket_size},
      {"stage3_param_persistence_threshold", "param_persistence_threshold",
       &from_model.stage3_param_persistence_threshold}};
  for (auto [key, alias, flag] : sized) {
    bool both = Reader::find(*zero, key) && !alias.empty() && Reader::find(*zero, alias);
    if (both) continue;  // the block parser reports the two spellings
    for (std::string_view name : {key, alias}) {
      if (name.empty() || !auto_at(zero, name)) continue;
      zero->erase(std::string(name));
      *flag = true;  // resolve_auto_from_model fills it in and notes it
    }
  }
  for (std::string_view name :
       {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save"}) {
    if (!auto_at(zero, name)) continue;
    (*zero)[std::string(name)] = false;
    r.note(
        fmt::format("'zero_optimization.{}' is \"auto\": resolved to false, the default the "
                    "Hugging Face tools fill in (true saves gathered 16-bit weights)",
                    name));
  }
}

std::string quoted_list(const std::vector<Unresolved>& keys) {
  std::string text;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) text += i + 1 == keys.size() ? " and " : ", ";
    text += fmt::format("'{}'", keys[i].key);
  }
  return text;
}

}  // namespace

AutoBatch resolve_auto(const Reader& r, json& j, Config::AutoFromModel& from_model) {
  std::vector<Unresolved> unresolved;
  AutoBatch batch = batch_auto(j, unresolved);
  optimizer_auto(j, unresolved);
  scheduler_auto(r, j, unresolved);
  if (auto_at(&j, "gradient_clipping")) {
    unresolved.push_back({"gradient_clipping", "gradient_clipping=1.0", ""});
  }
  precision_auto(r, j);
  zero_auto(r, j, from_model);
  if (unresolved.empty()) return batch;
  std::string fixes, follows;
  for (const Unresolved& u : unresolved) {
    if (!u.fix.empty()) fixes += " --set " + u.fix;
    if (!u.follows.empty())
      follows +=
          fmt::format("{}'{}' then follows from {}", follows.empty() ? "" : ", ", u.key, u.follows);
  }
  r.fail(
      fmt::format("{} {} \"auto\", which the Hugging Face Trainer fills in from its own "
                  "arguments; zt-train has none, so give values, e.g.{}{}",
                  quoted_list(unresolved), unresolved.size() == 1 ? "is" : "are", fixes,
                  follows.empty() ? "" : fmt::format(" ({})", follows)));
}

void note_auto_batch(const Reader& r, const AutoBatch& batch, const Config& c, int world) {
  if (batch.train_batch_size) {
    r.note(fmt::format("'{}' is \"auto\": resolved to {} = {} {} * {} {} * world size {}", kTbs,
                       c.train_batch_size, kMicro, c.train_micro_batch_size_per_gpu, kGas,
                       c.gradient_accumulation_steps, world));
  }
  if (batch.micro) {
    r.note(fmt::format("'{}' is \"auto\": resolved to {} = {} {} / ({} {} * world size {})", kMicro,
                       c.train_micro_batch_size_per_gpu, kTbs, c.train_batch_size, kGas,
                       c.gradient_accumulation_steps, world));
  }
  if (batch.gas) {
    r.note(fmt::format("'{}' is \"auto\": resolved to {} = {} {} / ({} {} * world size {})", kGas,
                       c.gradient_accumulation_steps, kTbs, c.train_batch_size, kMicro,
                       c.train_micro_batch_size_per_gpu, world));
  }
}

}  // namespace zt::config_detail

namespace zt {

void resolve_auto_from_model(Config& config, int64_t hidden_size) {
  ZT_ASSERT(hidden_size > 0, "hidden_size={}", hidden_size);
  Config::AutoFromModel& a = config.auto_from_model;
  ZeroConfig& z = config.zero_optimization;
  const int64_t h = hidden_size;
  auto note = [&](std::string_view key, int64_t value, std::string_view rule) {
    config.notes.push_back(
        fmt::format("'zero_optimization.{}' is \"auto\": resolved to {} ({} for "
                    "hidden size {}, as the Hugging Face Trainer derives it)",
                    key, value, rule, h));
  };
  if (a.reduce_bucket_size) {
    z.reduce_bucket_size = h * h;
    note("reduce_bucket_size", z.reduce_bucket_size, "hidden * hidden");
  }
  if (a.stage3_prefetch_bucket_size) {
    z.stage3_prefetch_bucket_size =
        static_cast<int64_t>(std::floor(0.9 * static_cast<double>(h * h)));
    note("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, "0.9 * hidden * hidden");
  }
  if (a.stage3_param_persistence_threshold) {
    z.stage3_param_persistence_threshold = 10 * h;
    note("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, "10 * hidden");
  }
  a = {};
}

}  // namespace zt
