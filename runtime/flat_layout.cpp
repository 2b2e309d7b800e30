// FlatLayout offsets.
#include "runtime/flat_layout.h"

#include "runtime/status.h"

namespace zt {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

FlatLayout::FlatLayout(std::vector<ParamSpec> specs, int64_t align) {
  ZT_ASSERT(align > 0, "align={}", align);
  int64_t offset = 0;
  for (auto& spec : specs) {
    ZT_ASSERT(!spec.shape.empty(), "parameter {} has no shape", spec.name);
    int64_t n = spec.numel();
    entries_.push_back(Entry{std::move(spec), offset, n});
    offset += (n + align - 1) / align * align;
  }
  numel_ = offset;
}

const FlatLayout::Entry* FlatLayout::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.spec.name == name) return &e;
  return nullptr;
}

int64_t FlatLayout::param_count() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.numel / e.spec.shape[0] * e.spec.exported_rows();
  return n;
}

}  // namespace zt
