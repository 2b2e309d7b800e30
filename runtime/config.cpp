// Config loading and validation. Each block is read through a table of (key, member, bound)
// rows plus a few hand-read keys (enums, nested blocks); the table's keys are also the block's
// allowed keys, so an unknown key is caught before any value is read. Every error is one line,
// "<source>: <message>", thrown as kInput. Reads JSON only: no allocation beyond the structs.
#include "runtime/config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <sstream>
#include <string_view>
#include <variant>

#include "runtime/status.h"

namespace zt {

using nlohmann::json;

namespace {

// ---- names and suggestions -------------------------------------------------------------------

std::string join(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

// Levenshtein distance, case-insensitive: "Stage" is distance 0 from "stage".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// True when `a` can be made from `b` by deleting characters (case-insensitive).
bool is_subsequence(std::string_view a, std::string_view b) {
  size_t i = 0;
  for (char c : b) {
    if (i < a.size() && lower(a[i]) == lower(c)) ++i;
  }
  return i == a.size();
}

// The option nearest to `word`, when it is close: within a third of the word's length (at least
// one edit). Among close options, one that differs only by dropped characters wins ("warmup_steps"
// -> "warmup_num_steps", not "warmup_type"), then the smallest edit distance.
// "zero_optimisation" -> "zero_optimization"; "learning_rate" suggests nothing.
std::optional<std::string_view> nearest(std::string_view word,
                                        std::span<const std::string_view> options) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::optional<std::string_view> best;
  std::pair<bool, size_t> best_score;  // (not related by dropped characters, distance)
  for (std::string_view option : options) {
    size_t d = edit_distance(word, option);
    if (d > limit) continue;
    bool related = is_subsequence(word, option) || is_subsequence(option, word);
    std::pair<bool, size_t> score{!related, d};
    if (!best || score < best_score) best = option, best_score = score;
  }
  return best;
}

// "string \"fast\"", "integer -1", "number 1.5", "boolean true", "array [1,2]", "null".
std::string describe_value(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (v.type()) {
    case json::value_t::string: return "string " + text;
    case json::value_t::boolean: return "boolean " + text;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + text;
    case json::value_t::number_float: return "number " + text;
    case json::value_t::array: return "array " + text;
    case json::value_t::object: return "object " + text;
    case json::value_t::null: return "null";
    default: return text;
  }
}

// ---- the reader: typed access with errors naming the key path --------------------------------

enum class Bound { kAny, kPositive, kNonNegative, kUnitInterval };
enum class Case { kSensitive, kInsensitive };

template <class E>
struct Choice {
  std::string_view name;
  E value;
};

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw_input(fmt::format("{}: {}", source_, message));
  }
  [[noreturn]] void type_error(const json& v, const std::string& path, std::string_view expected) const {
    fail(fmt::format("'{}' must be {}, got {}", path, expected, describe_value(v)));
  }

  // obj[key], or nullptr when absent or null (null means "use the default", as in DeepSpeed).
  static const json* find(const json& obj, std::string_view key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const json& obj, std::string_view path, std::string_view key) const {
    if (const json* v = find(obj, key)) return *v;
    fail(fmt::format("missing required key '{}'", join(path, key)));
  }

  void expect_object(const json& v, const std::string& path) const {
    if (!v.is_object()) type_error(v, path, "an object");
  }

  // Every key of `obj` must be in `allowed`; `note` follows the key in the message.
  void check_keys(const json& obj, std::string_view path, std::span<const std::string_view> allowed,
                  std::string_view note = {}) const {
    for (const auto& item : obj.items()) {
      const std::string& key = item.key();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string message = fmt::format("unknown key '{}'{}", join(path, key), note);
      if (auto near = nearest(key, allowed)) message += fmt::format(" (did you mean '{}'?)", join(path, *near));
      fail(message);
    }
  }

  bool boolean(const json& v, const std::string& path) const {
    if (!v.is_boolean()) type_error(v, path, "a boolean (true or false)");
    return v.get<bool>();
  }
  double number(const json& v, const std::string& path) const {
    if (!v.is_number()) type_error(v, path, "a number");
    return v.get<double>();
  }
  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) type_error(v, path, "a string");
    return v.get<std::string>();
  }
  // Integers; an integral float such as 5e8 is accepted (DeepSpeed configs write bucket sizes
  // that way), 1.5 is not.
  int64_t integer(const json& v, const std::string& path) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) {
      fail(fmt::format("'{}' must be <= {}, got {}", path, INT64_MAX, v.dump()));
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (d == std::trunc(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
    }
    type_error(v, path, "an integer");
  }
  uint64_t unsigned_integer(const json& v, const std::string& path) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    int64_t x = integer(v, path);
    if (x < 0) fail(fmt::format("'{}' must be >= 0, got {}", path, v.dump()));
    return static_cast<uint64_t>(x);
  }
  int int32(const json& v, const std::string& path) const {
    int64_t x = integer(v, path);
    if (x > INT_MAX || x < INT_MIN) {
      fail(fmt::format("'{}' must be between {} and {}, got {}", path, INT_MIN, INT_MAX, v.dump()));
    }
    return static_cast<int>(x);
  }

  void check_bound(const json& v, Bound bound, const std::string& path) const {
    double x = v.get<double>();
    bool ok = bound == Bound::kAny || (bound == Bound::kPositive && x > 0) ||
              (bound == Bound::kNonNegative && x >= 0) ||
              (bound == Bound::kUnitInterval && x >= 0 && x <= 1);
    if (ok) return;
    const char* rule = bound == Bound::kPositive      ? "> 0"
                       : bound == Bound::kNonNegative ? ">= 0"
                                                      : "between 0 and 1";
    fail(fmt::format("'{}' must be {}, got {}", path, rule, v.dump()));
  }
  void check_range(int64_t x, int64_t lo, int64_t hi, const std::string& path) const {
    if (x < lo || x > hi) fail(fmt::format("'{}' must be between {} and {}, got {}", path, lo, hi, x));
  }

  // One of a fixed set of strings: `'optimizer.type' must be one of "Adam", ... got "Adamm"`.
  template <class E, size_t N>
  E choice(const json& v, const std::string& path, const Choice<E> (&choices)[N], Case match) const {
    std::vector<std::string_view> names;
    for (const Choice<E>& c : choices) names.push_back(c.name);
    std::string quoted = fmt::format("\"{}\"", fmt::join(names, "\", \""));
    if (!v.is_string()) type_error(v, path, "one of " + quoted);
    std::string s = v.get<std::string>();
    for (const Choice<E>& c : choices) {
      if (match == Case::kSensitive ? s == c.name : equal_ignoring_case(s, c.name)) return c.value;
    }
    std::string message = fmt::format("'{}' must be one of {}, got {}", path, quoted, describe_value(v));
    if (auto near = nearest(s, names)) message += fmt::format(" (did you mean \"{}\"?)", *near);
    fail(message);
  }

 private:
  const std::string& source_;
};

// ---- table-driven blocks ---------------------------------------------------------------------

// One row: a key, the member it fills and the bound its value must meet.
template <class T>
struct Field {
  std::string_view key;
  std::variant<bool T::*, int T::*, int64_t T::*, uint64_t T::*, double T::*, std::string T::*> member;
  Bound bound = Bound::kAny;
};

template <class T, size_t N>
std::vector<std::string_view> keys_of(const Field<T> (&fields)[N],
                                      std::initializer_list<std::string_view> extra = {}) {
  std::vector<std::string_view> keys(extra);
  for (const Field<T>& f : fields) keys.push_back(f.key);
  return keys;
}

template <class T>
void read_field(const Reader& r, const json& v, const std::string& path, const Field<T>& field,
                T& out) {
  std::visit(
      [&](auto member) {
        using V = std::remove_reference_t<decltype(out.*member)>;
        if constexpr (std::is_same_v<V, bool>) {
          out.*member = r.boolean(v, path);
        } else if constexpr (std::is_same_v<V, std::string>) {
          out.*member = r.string(v, path);
        } else {
          if constexpr (std::is_same_v<V, double>) out.*member = r.number(v, path);
          if constexpr (std::is_same_v<V, int>) out.*member = r.int32(v, path);
          if constexpr (std::is_same_v<V, int64_t>) out.*member = r.integer(v, path);
          if constexpr (std::is_same_v<V, uint64_t>) out.*member = r.unsigned_integer(v, path);
          r.check_bound(v, field.bound, path);
        }
      },
      field.member);
}

// Reads every row whose key is present in `obj`; absent rows keep their defaults.
template <class T, size_t N>
void read_fields(const Reader& r, const json& obj, std::string_view path,
                 const Field<T> (&fields)[N], T& out) {
  for (const Field<T>& f : fields) {
    if (const json* v = Reader::find(obj, f.key)) read_field(r, *v, join(path, f.key), f, out);
  }
}

// An optional sub-block: nullptr when absent, else checked to be an object.
const json* find_block(const Reader& r, const json& parent, std::string_view path, std::string_view key) {
  const json* block = Reader::find(parent, key);
  if (block) r.expect_object(*block, join(path, key));
  return block;
}

// ---- batch sizes -----------------------------------------------------------------------------

constexpr std::string_view kTbs = "train_batch_size";
constexpr std::string_view kMicro = "train_micro_batch_size_per_gpu";
constexpr std::string_view kGas = "gradient_accumulation_steps";

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
    micro = divide_exactly(r, *tbs, product(r, *gas, world),
                           fmt::format("{} = {} {} / ({} {} * world size {})", kMicro, kTbs, *tbs,
                                       kGas, *gas, world));
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

// ---- optimizer -------------------------------------------------------------------------------

constexpr Choice<OptimizerType> kOptimizerTypes[] = {
    {"Adam", OptimizerType::kAdam}, {"AdamW", OptimizerType::kAdamW}, {"SGD", OptimizerType::kSGD}};

constexpr Field<OptimizerConfig> kOptimizerFields[] = {
    {"lr", &OptimizerConfig::lr, Bound::kNonNegative},
    {"eps", &OptimizerConfig::eps, Bound::kNonNegative},
    {"weight_decay", &OptimizerConfig::weight_decay, Bound::kNonNegative},
    {"momentum", &OptimizerConfig::momentum, Bound::kNonNegative},
    {"adam_w_mode", &OptimizerConfig::adam_w_mode},
};

std::span<const std::string_view> optimizer_params(OptimizerType type) {
  static constexpr std::string_view kAdam[] = {"lr", "betas", "eps", "weight_decay", "adam_w_mode"};
  static constexpr std::string_view kAdamW[] = {"lr", "betas", "eps", "weight_decay"};
  static constexpr std::string_view kSgd[] = {"lr", "momentum", "weight_decay"};
  switch (type) {
    case OptimizerType::kAdam: return kAdam;
    case OptimizerType::kAdamW: return kAdamW;
    case OptimizerType::kSGD: return kSgd;
  }
  return {};
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

OptimizerConfig parse_optimizer(const Reader& r, const json* block) {
  OptimizerConfig o;
  if (!block) return o;
  static constexpr std::string_view kKeys[] = {"type", "params"};
  r.check_keys(*block, "optimizer", kKeys);
  const json& type = r.require(*block, "optimizer", "type");
  o.type = r.choice(type, "optimizer.type", kOptimizerTypes, Case::kInsensitive);  // as DeepSpeed
  const json* params = find_block(r, *block, "optimizer", "params");
  if (!params) return o;
  r.check_keys(*params, "optimizer.params", optimizer_params(o.type),
               fmt::format(" (not a parameter of optimizer type {})", type.dump()));
  read_fields(r, *params, "optimizer.params", kOptimizerFields, o);
  if (const json* betas = Reader::find(*params, "betas")) o.betas = read_betas(r, *betas, "optimizer.params.betas");
  return o;
}

// ---- scheduler -------------------------------------------------------------------------------

constexpr Choice<SchedulerType> kSchedulerTypes[] = {
    {"WarmupLR", SchedulerType::kWarmupLR},
    {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
    {"WarmupCosineLR", SchedulerType::kWarmupCosineLR}};
constexpr Choice<WarmupType> kWarmupTypes[] = {{"log", WarmupType::kLog}, {"linear", WarmupType::kLinear}};

constexpr Field<SchedulerConfig> kSchedulerFields[] = {
    {"warmup_min_lr", &SchedulerConfig::warmup_min_lr, Bound::kNonNegative},
    {"warmup_max_lr", &SchedulerConfig::warmup_max_lr, Bound::kNonNegative},
    {"warmup_num_steps", &SchedulerConfig::warmup_num_steps, Bound::kPositive},
    {"total_num_steps", &SchedulerConfig::total_num_steps, Bound::kPositive},
    {"warmup_min_ratio", &SchedulerConfig::warmup_min_ratio, Bound::kUnitInterval},
    {"cos_min_ratio", &SchedulerConfig::cos_min_ratio, Bound::kUnitInterval},
};

// The parameters each DeepSpeed scheduler constructor takes.
std::span<const std::string_view> scheduler_params(SchedulerType type) {
  static constexpr std::string_view kWarmup[] = {"warmup_min_lr", "warmup_max_lr",
                                                 "warmup_num_steps", "warmup_type"};
  static constexpr std::string_view kDecay[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                "warmup_type", "total_num_steps"};
  static constexpr std::string_view kCosine[] = {"total_num_steps", "warmup_min_ratio",
                                                 "warmup_num_steps", "cos_min_ratio", "warmup_type"};
  switch (type) {
    case SchedulerType::kWarmupLR: return kWarmup;
    case SchedulerType::kWarmupDecayLR: return kDecay;
    case SchedulerType::kWarmupCosineLR: return kCosine;
    case SchedulerType::kNone: break;
  }
  return {};
}

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
  if (s.type != SchedulerType::kWarmupLR) r.require(params, "scheduler.params", "total_num_steps");
  return s;
}

// ---- zero_optimization -----------------------------------------------------------------------

constexpr Choice<OffloadDevice> kOffloadDevices[] = {
    {"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}};

constexpr Field<OffloadConfig> kOffloadFields[] = {
    {"nvme_path", &OffloadConfig::nvme_path},
    {"pin_memory", &OffloadConfig::pin_memory},
    {"buffer_count", &OffloadConfig::buffer_count, Bound::kPositive},
};

void parse_offload(const Reader& r, const json& zero, std::string_view key, OffloadConfig& out) {
  std::string path = join("zero_optimization", key);
  const json* block = find_block(r, zero, "zero_optimization", key);
  if (!block) return;
  r.check_keys(*block, path, keys_of(kOffloadFields, {"device"}));
  if (const json* device = Reader::find(*block, "device")) {
    out.device = r.choice(*device, join(path, "device"), kOffloadDevices, Case::kSensitive);
  }
  read_fields(r, *block, path, kOffloadFields, out);
  if (out.device == OffloadDevice::kNvme && out.nvme_path.empty()) {
    r.fail(fmt::format("'{}.nvme_path' is required when '{}.device' is \"nvme\"", path, path));
  }
}

constexpr Field<ZeroConfig> kZeroFields[] = {
    {"stage", &ZeroConfig::stage},
    {"overlap_comm", &ZeroConfig::overlap_comm},
    {"contiguous_gradients", &ZeroConfig::contiguous_gradients},
    {"reduce_scatter", &ZeroConfig::reduce_scatter},
    {"reduce_bucket_size", &ZeroConfig::reduce_bucket_size, Bound::kPositive},
    {"allgather_partitions", &ZeroConfig::allgather_partitions},
    {"allgather_bucket_size", &ZeroConfig::allgather_bucket_size, Bound::kPositive},
    {"stage3_prefetch_bucket_size", &ZeroConfig::stage3_prefetch_bucket_size, Bound::kPositive},
    {"stage3_param_persistence_threshold", &ZeroConfig::stage3_param_persistence_threshold,
     Bound::kNonNegative},
    {"stage3_max_live_parameters", &ZeroConfig::stage3_max_live_parameters, Bound::kPositive},
    {"stage3_max_reuse_distance", &ZeroConfig::stage3_max_reuse_distance, Bound::kNonNegative},
    {"sub_group_size", &ZeroConfig::sub_group_size, Bound::kPositive},
};

// Offload tiers the stage cannot use are errors, not silent no-ops.
void check_offload_stage(const Reader& r, const ZeroConfig& z) {
  if (z.offload_optimizer.device != OffloadDevice::kNone && z.stage < 1) {
    r.fail("'zero_optimization.offload_optimizer' needs zero_optimization.stage >= 1, got stage 0");
  }
  if (z.offload_param.device != OffloadDevice::kNone && z.stage != 3) {
    r.fail(fmt::format("'zero_optimization.offload_param' needs zero_optimization.stage 3, got stage {}",
                       z.stage));
  }
}

ZeroConfig parse_zero(const Reader& r, const json* block) {
  ZeroConfig z;
  if (!block) return z;
  r.check_keys(*block, "zero_optimization", keys_of(kZeroFields, {"offload_optimizer", "offload_param"}));
  read_fields(r, *block, "zero_optimization", kZeroFields, z);
  r.check_range(z.stage, 0, 3, "zero_optimization.stage");
  if (!Reader::find(*block, "overlap_comm")) z.overlap_comm = z.stage == 3;  // DeepSpeed's default
  parse_offload(r, *block, "offload_optimizer", z.offload_optimizer);
  parse_offload(r, *block, "offload_param", z.offload_param);
  check_offload_stage(r, z);
  return z;
}

// ---- precision -------------------------------------------------------------------------------

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
constexpr Choice<DType> kDTypes[] = {
    {"fp32", DType::kF32}, {"float32", DType::kF32}, {"float", DType::kF32},
    {"fp16", DType::kF16}, {"float16", DType::kF16}, {"half", DType::kF16},
    {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16}};

Fp16Config parse_fp16(const Reader& r, const json* block) {
  Fp16Config f;
  if (!block) return f;
  r.check_keys(*block, "fp16", keys_of(kFp16Fields));
  read_fields(r, *block, "fp16", kFp16Fields, f);
  r.check_range(f.initial_scale_power, 0, 63, "fp16.initial_scale_power");
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
  static constexpr std::string_view kKeys[] = {"enabled", "bf16_master_weights_and_grads"};
  r.check_keys(*block, name, kKeys);
  if (const json* v = Reader::find(*block, "enabled")) b.enabled = r.boolean(*v, join(name, "enabled"));
  if (const json* v = Reader::find(*block, "bf16_master_weights_and_grads"))
    b.bf16_master_weights_and_grads = r.boolean(*v, join(name, "bf16_master_weights_and_grads"));
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

// ---- activation checkpointing and aio --------------------------------------------------------

constexpr Field<ActivationCheckpointing> kCheckpointingFields[] = {
    {"contiguous_memory_optimization", &ActivationCheckpointing::contiguous_memory_optimization},
    {"synchronize_checkpoint_boundary", &ActivationCheckpointing::synchronize_checkpoint_boundary},
    {"profile", &ActivationCheckpointing::profile},
};

ActivationCheckpointing parse_checkpointing(const Reader& r, const json* block) {
  ActivationCheckpointing a;
  if (!block) return a;
  const std::string path = "activation_checkpointing";
  r.check_keys(*block, path,
               keys_of(kCheckpointingFields,
                       {"partition_activations", "cpu_checkpointing", "number_checkpoints"}));
  for (std::string_view key : {"partition_activations", "cpu_checkpointing"}) {
    const json* v = Reader::find(*block, key);
    if (v && r.boolean(*v, join(path, key))) {
      r.fail(fmt::format("'{}' is not supported yet; set it to false", join(path, key)));
    }
  }
  read_fields(r, *block, path, kCheckpointingFields, a);
  a.policy = ActivationCheckpointing::Policy::kEveryUnit;
  if (const json* v = Reader::find(*block, "number_checkpoints")) {
    a.count = r.int32(*v, path + ".number_checkpoints");
    r.check_bound(*v, Bound::kNonNegative, path + ".number_checkpoints");
    a.policy = ActivationCheckpointing::Policy::kCount;
  }
  return a;
}

constexpr Field<AioConfig> kAioFields[] = {
    {"block_size", &AioConfig::block_size, Bound::kPositive},
    {"queue_depth", &AioConfig::queue_depth, Bound::kPositive},
    {"thread_count", &AioConfig::thread_count, Bound::kPositive},
    {"single_submit", &AioConfig::single_submit},
    {"overlap_events", &AioConfig::overlap_events},
};

AioConfig parse_aio(const Reader& r, const json* block) {
  AioConfig a;
  if (!block) return a;
  r.check_keys(*block, "aio", keys_of(kAioFields));
  read_fields(r, *block, "aio", kAioFields, a);
  return a;
}

// ---- the zt block ----------------------------------------------------------------------------

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
    r.type_error(v, "zt.model", "a string (a model zoo name) or an object (GPT2Config keys)");
  }
  r.check_keys(v, "zt.model", keys_of(kModelFields));
  read_fields(r, v, "zt.model", kModelFields, m);
  m.has_object = true;
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
    {"shuffle", &ZtConfig::shuffle},
    {"num_threads", &ZtConfig::num_threads, Bound::kNonNegative},
    {"device", &ZtConfig::device},
    {"allow_tf32", &ZtConfig::allow_tf32},
    {"comm_backend", &ZtConfig::comm_backend},
    {"comm_timeout_s", &ZtConfig::comm_timeout_s, Bound::kPositive},
};

ZtConfig parse_zt(const Reader& r, const json& j) {
  const json& block = r.require(j, "", "zt");
  r.expect_object(block, "zt");
  r.check_keys(block, "zt", keys_of(kZtFields, {"model"}));
  for (std::string_view key : {"model", "seq_len", "train_data", "steps"}) r.require(block, "zt", key);
  ZtConfig z;
  z.model = parse_model(r, block.at("model"));
  read_fields(r, block, "zt", kZtFields, z);
  if (z.train_data.empty()) r.fail("'zt.train_data' must not be empty");
  if (z.output_dir.empty()) r.fail("'zt.output_dir' must not be empty");
  if (z.device != "cpu" && z.device != "cuda")
    r.fail(fmt::format("'zt.device' is '{}'; use cpu or cuda", z.device));
  if (z.comm_backend != "auto" && z.comm_backend != "mpi" && z.comm_backend != "nccl")
    r.fail(fmt::format("'zt.comm_backend' is '{}'; use auto, mpi or nccl", z.comm_backend));
  return z;
}

// ---- top level -------------------------------------------------------------------------------

constexpr Field<Config> kTopFields[] = {
    {"gradient_clipping", &Config::gradient_clipping, Bound::kNonNegative},
    {"steps_per_print", &Config::steps_per_print, Bound::kPositive},
    {"wall_clock_breakdown", &Config::wall_clock_breakdown},
    {"prescale_gradients", &Config::prescale_gradients},
    {"gradient_predivide_factor", &Config::gradient_predivide_factor, Bound::kPositive},
};

std::vector<std::string_view> top_level_keys() {
  return keys_of(kTopFields, {kTbs, kMicro, kGas, "optimizer", "scheduler", "zero_optimization",
                              "fp16", "bf16", "bfloat16", "data_types", "communication_data_type",
                              "activation_checkpointing", "aio", "zt"});
}

// ---- loading ---------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw_input(fmt::format("{}: is a directory, not a config file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(fmt::format("{}: cannot open config file: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_input(fmt::format("{}: cannot read config file", path));
  return text.str();
}

// Remembers the first key repeated inside one object. nlohmann keeps the last value silently;
// DeepSpeed rejects duplicates, and so do we.
class DuplicateKeyFinder {
 public:
  bool on_event(json::parse_event_t event, const json& parsed) {
    using E = json::parse_event_t;
    if (event == E::object_start || event == E::array_start) frames_.push_back({});
    if (event == E::object_end || event == E::array_end) frames_.pop_back();
    if (event == E::key && !frames_.empty()) note_key(parsed.get<std::string>());
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string current;
  };
  void note_key(const std::string& key) {
    Frame& top = frames_.back();
    if (!top.keys.insert(key).second && duplicate_.empty()) {
      std::string path;
      for (size_t i = 0; i + 1 < frames_.size(); ++i) {
        if (!frames_[i].current.empty()) path = join(path, frames_[i].current);
      }
      duplicate_ = join(path, key);
    }
    top.current = key;
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

json parse_json_text(const std::string& text, const std::string& path) {
  DuplicateKeyFinder finder;
  json j;
  try {
    j = json::parse(text, [&finder](int, json::parse_event_t event, json& parsed) {
      return finder.on_event(event, parsed);
    });
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string detail = e.what();
    if (size_t end = detail.find("] "); detail.starts_with("[json.exception") && end != std::string::npos) {
      detail = detail.substr(end + 2);
    }
    throw_input(fmt::format("{}: malformed JSON: {}", path, detail));
  }
  if (!finder.duplicate().empty()) throw_input(fmt::format("{}: duplicate key '{}'", path, finder.duplicate()));
  if (!j.is_object()) throw_input(fmt::format("{}: the top level must be an object, got {}", path, describe_value(j)));
  return j;
}

std::vector<std::string> split_key_path(const std::string& key_path, const std::string& spec) {
  std::vector<std::string> keys;
  size_t start = 0;
  while (true) {
    size_t dot = key_path.find('.', start);
    keys.push_back(key_path.substr(start, dot - start));
    if (keys.back().empty()) throw_input(fmt::format("--set '{}': empty key in '{}'", spec, key_path));
    if (dot == std::string::npos) return keys;
    start = dot + 1;
  }
}

// "key.path=value": the value is JSON when it parses, else a plain string.
void apply_override(json& root, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw_input(fmt::format("--set '{}': expected key.path=value", spec));
  }
  std::vector<std::string> keys = split_key_path(spec.substr(0, eq), spec);
  std::string text = spec.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  json* node = &root;
  std::string path;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    path = join(path, keys[i]);
    json& child = (*node)[keys[i]];
    if (child.is_null()) child = json::object();
    if (!child.is_object()) {
      throw_input(fmt::format("--set '{}': '{}' is {}, not an object", spec, path, describe_value(child)));
    }
    node = &child;
  }
  (*node)[keys.back()] = std::move(value);
}

}  // namespace

json load_config_json(const std::string& path, const std::vector<std::string>& overrides) {
  json j = parse_json_text(read_file(path), path);
  for (const std::string& spec : overrides) apply_override(j, spec);
  return j;
}

Config parse_config(const json& j, const std::string& source, int world_size) {
  ZT_ASSERT(world_size > 0, "world_size={}", world_size);
  Reader r(source);
  if (!j.is_object()) r.fail(fmt::format("the top level must be an object, got {}", describe_value(j)));
  r.check_keys(j, "", top_level_keys());
  Config c;
  c.source = source;
  resolve_batch(r, j, world_size, c);
  c.optimizer = parse_optimizer(r, find_block(r, j, "", "optimizer"));
  c.scheduler = parse_scheduler(r, find_block(r, j, "", "scheduler"), c.optimizer.lr);
  read_fields(r, j, "", kTopFields, c);
  c.zero_optimization = parse_zero(r, find_block(r, j, "", "zero_optimization"));
  parse_precision(r, j, c);
  c.activation_checkpointing = parse_checkpointing(r, find_block(r, j, "", "activation_checkpointing"));
  c.aio = parse_aio(r, find_block(r, j, "", "aio"));
  c.zt = parse_zt(r, j);
  c.resolved = j;
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size) {
  return parse_config(load_config_json(path, overrides), path, world_size);
}

}  // namespace zt
