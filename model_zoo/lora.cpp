// LoraProduct (lora.h).
#include "model_zoo/lora.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/fnv1a.h"
#include "runtime/glob.h"

namespace zt::zoo {

bool lora_targets(const LoraConfig& lora, const std::string& module) {
  for (const std::string& t : lora.target_modules) {
    if (t == "all-linear" || module == t) return true;
    if (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
        module[module.size() - t.size() - 1] == '.')
      return true;
  }
  return false;
}

namespace {

// The module a tensor belongs to: its name without the last component ("model.embed_tokens" of
// "model.embed_tokens.weight").
std::string module_of(const std::string& tensor) {
  const size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}

// `module` is `name` or ends with "." + name (PEFT's matching of module names).
bool names_module(const std::string& name, const std::string& module) {
  return module == name || (module.size() > name.size() && module.ends_with(name) &&
                            module[module.size() - name.size() - 1] == '.');
}

}  // namespace

bool lora_saves_whole(const LoraConfig& lora, const std::string& tensor) {
  const std::string module = module_of(tensor);
  return std::any_of(lora.modules_to_save.begin(), lora.modules_to_save.end(),
                     [&](const std::string& m) { return names_module(m, module); });
}

bool frozen_by(const Tuning& tuning, const ParamSpec& spec) {
  if (spec.adapter) return false;
  for (const std::string& pattern : tuning.freeze)
    if (glob_match(pattern, spec.name)) return true;
  const LoraConfig& lora = tuning.lora;
  if (!lora.enabled) return false;
  if (lora_saves_whole(lora, spec.name)) return false;
  const std::string kBias = ".bias";
  if (spec.name.size() > kBias.size() && spec.name.ends_with(kBias)) {
    if (lora.bias == "all") return false;
    if (lora.bias == "lora_only")
      return !lora_targets(lora, spec.name.substr(0, spec.name.size() - kBias.size()));
  }
  return true;
}

std::string describe_trainable(Model& model, const Tuning& tuning) {
  int64_t params = 0, trainable = 0;
  for (const Unit* u : model.units()) {
    params += u->layout().param_count();
    if (!u->frozen()) trainable += u->layout().param_count();
  }
  if (trainable == params) return {};
  const LoraConfig& lora = tuning.lora;
  return fmt::format(
      "trainable: {:.3f}M of {:.2f}M parameters ({:.2f}%){}", trainable / 1e6, params / 1e6,
      100.0 * static_cast<double>(trainable) / static_cast<double>(params),
      lora.enabled
          ? fmt::format(
                "; LoRA r={} alpha={} dropout={} on {}{}{}", lora.r, lora.alpha, lora.dropout,
                fmt::join(lora.target_modules, ", "), lora.use_rslora ? " (rsLoRA)" : "",
                lora.modules_to_save.empty()
                    ? ""
                    : fmt::format("; {} trained whole", fmt::join(lora.modules_to_save, ", ")))
          : "; the rest frozen by zt.freeze");
}

void LoraProduct::add(std::vector<ParamSpec>& specs, const std::string& module, int64_t col,
                      int64_t width) {
  Adapter a;
  a.col = col;
  a.width = width;
  a.salt = fnv1a64(module, kNameHashOffset);
  // PEFT: kaiming_uniform_(A, a=√5), the bound gain·√(3 / fan_in) with gain √(2 / (1 + 5)),
  // which is 1 / √in; B zeros, so the adapted model starts as the base.
  ParamSpec A{module + ".lora_A.weight",
              {r_, in_},
              Decay::kYes,
              ParamInit{ParamInit::Kind::kUniform, 1.0f / std::sqrt(static_cast<float>(in_))}};
  ParamSpec B{module + ".lora_B.weight", {width, r_}, Decay::kYes, ParamInit{}};
  A.adapter = B.adapter = true;
  a.a = static_cast<int>(specs.size());
  specs.push_back(std::move(A));
  a.b = static_cast<int>(specs.size());
  specs.push_back(std::move(B));
  adapters_.push_back(a);
}

std::vector<Operand> LoraProduct::alloc_saved(ActivationStore& acts, int64_t N) const {
  std::vector<Operand> saved;
  for (size_t i = 0; i < adapters_.size(); ++i) saved.push_back(acts.alloc_acts(N * r_));
  return saved;
}

void LoraProduct::forward(Kernels& k, const Table& t, Operand out, ConstOperand x, int64_t N,
                          const std::vector<Operand>& saved, Device& device, bool training,
                          uint64_t seed) const {
  constexpr WeightLayout kOutIn = WeightLayout::kOutIn;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const Adapter& a = adapters_[i];
    ActivationStore temp(device, saved[i].dtype);  // freed at the end of each adapter
    ConstOperand xd = x;
    if (drops(training)) {
      Operand dropped = temp.alloc_acts(N * in_);  // (N, in)
      k.dropout_forward(dropped, x, N * in_, dropout_, seed ^ a.salt);
      xd = dropped;
    }
    k.matmul_forward(saved[i], xd, t.param(a.a), nullptr, N, in_, r_, kOutIn);  // (N, r)
    Operand product = temp.alloc_acts(N * a.width);                             // (N, width)
    k.matmul_forward(product, saved[i], t.param(a.b), nullptr, N, r_, a.width, kOutIn);
    k.add_columns(out.at(a.col), stride_, product, a.width, N, a.width, scale_, GradOutput::kAdd);
  }
}

void LoraProduct::backward(Kernels& k, const Table& t, Operand dx, ConstOperand d_out,
                           ConstOperand x, int64_t N, const ActivationStore& acts,
                           size_t first_saved, ActivationStore& scratch, bool training,
                           uint64_t seed) const {
  constexpr WeightLayout kOutIn = WeightLayout::kOutIn;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const Adapter& a = adapters_[i];
    // d product = s · d_out's columns; then B's and A's gradients and the input's.
    Operand d_product = scratch.alloc_acts(N * a.width);  // (N, width)
    Operand d_xa = scratch.alloc_acts(N * r_);            // (N, r)
    k.add_columns(d_product, a.width, d_out.at(a.col), stride_, N, a.width, scale_,
                  GradOutput::kWrite);
    const ConstOperand xa = acts.at(first_saved + i);
    k.matmul_backward(d_xa, t.grad(a.b), Operand(), d_product, xa, t.param(a.b), N, r_, a.width,
                      kOutIn, GradOutput::kWrite);
    if (!drops(training)) {
      k.matmul_backward(dx, t.grad(a.a), Operand(), d_xa, x, t.param(a.a), N, in_, r_, kOutIn);
      continue;
    }
    // The dropped input again (the same mask), and the gradient back through the mask.
    Operand xd = scratch.alloc_acts(N * in_);    // (N, in)
    Operand d_xd = scratch.alloc_acts(N * in_);  // (N, in)
    k.dropout_forward(xd, x, N * in_, dropout_, seed ^ a.salt);
    k.matmul_backward(d_xd, t.grad(a.a), Operand(), d_xa, xd, t.param(a.a), N, in_, r_, kOutIn,
                      GradOutput::kWrite);
    k.dropout_backward(dx, d_xd, N * in_, dropout_, seed ^ a.salt);
  }
}

void LoraProduct::declare(LayerActivations& a, int64_t N, bool training) const {
  for (const Adapter& ad : adapters_) {
    a.saved.push_back({N * r_});
    a.transient = std::max(a.transient, N * ad.width + (drops(training) ? N * in_ : 0));
    a.scratch += N * ad.width + N * r_ + (drops(training) ? 2 * N * in_ : 0);
  }
}

}  // namespace zt::zoo
