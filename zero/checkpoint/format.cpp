// The manifest as JSON (both ways, every key checked on the way in) and the checkpoint's names.
#include "zero/checkpoint/format.h"

#include <algorithm>
#include <bit>
#include <filesystem>
#include <utility>

#include "zero/checkpoint/detail.h"

namespace zt {

using namespace checkpoint_detail;
namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "shard files hold little-endian data as it is in memory");

std::string shard_file_name(int rank) { return fmt::format("rank{}.zts", rank); }

std::string checkpoint_step_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / step_name(step)).string();
}

CheckpointUnit checkpoint_unit(std::string name, const FlatLayout& layout, int64_t padded_numel) {
  ZT_ASSERT(padded_numel >= layout.numel(), "unit {}: padded numel {} < numel {}", name,
            padded_numel, layout.numel());
  CheckpointUnit unit{std::move(name), layout.numel(), padded_numel, {}};
  for (const FlatLayout::Entry& e : layout.entries())
    unit.tensors.push_back(CheckpointTensor{e.spec.name, e.spec.shape, e.offset,
                                            std::max<int64_t>(e.spec.used_rows, -1)});
  return unit;
}

// ---- manifest.json ----------------------------------------------------------------------------

json manifest_to_json(const CheckpointManifest& m) {
  json units = json::array();
  for (const CheckpointUnit& u : m.units) {
    json tensors = json::array();
    for (const CheckpointTensor& t : u.tensors) {
      json tensor = {{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}};
      if (t.used_rows >= 0) tensor["used_rows"] = t.used_rows;
      tensors.push_back(std::move(tensor));
    }
    units.push_back({{"name", u.name},
                     {"numel", u.numel},
                     {"padded_numel", u.padded_numel},
                     {"tensors", std::move(tensors)}});
  }
  json files = json::array();
  for (const ShardFileInfo& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  return json{{"format_version", m.format_version},
              {"step", m.step},
              {"world_size", m.world_size},
              {"zero_stage", m.zero_stage},
              {"compute_dtype", std::string(dtype_name(m.compute_dtype))},
              {"grad_dtype", std::string(dtype_name(m.grad_dtype))},
              {"units", std::move(units)},
              {"files", std::move(files)},
              {"trainer_state", m.trainer_state}};
}

CheckpointManifest manifest_from_json(const json& j, const std::string& source) {
  const Fields top(j, "", source);
  CheckpointManifest m;
  // The version first: a later format may have changed every other key.
  const int64_t version = top.count("format_version");
  if (version != kCheckpointFormatVersion) {
    bad_checkpoint(source, fmt::format("has format version {}; this build reads version {}",
                                       version, kCheckpointFormatVersion));
  }
  m.format_version = static_cast<int>(version);
  m.step = top.count("step");
  const int64_t world = top.count("world_size");
  if (world < 1 || world > (1 << 24)) top.bad("world_size", fmt::format("is {}", world));
  m.world_size = static_cast<int>(world);
  const int64_t stage = top.count("zero_stage");
  if (stage > 3) top.bad("zero_stage", fmt::format("is {}, not 0..3", stage));
  m.zero_stage = static_cast<int>(stage);
  m.compute_dtype = top.dtype("compute_dtype");
  m.grad_dtype = top.dtype("grad_dtype");

  const json& units = top.array("units");
  for (size_t u = 0; u < units.size(); ++u) {
    const Fields unit(units[u], fmt::format("units[{}]", u), source);
    CheckpointUnit out;
    out.name = unit.string("name");
    out.numel = unit.count("numel");
    out.padded_numel = unit.count("padded_numel");
    if (out.padded_numel < out.numel) {
      unit.bad("padded_numel",
               fmt::format("is {}, less than numel {}", out.padded_numel, out.numel));
    }
    const json& tensors = unit.array("tensors");
    for (size_t t = 0; t < tensors.size(); ++t) {
      const Fields tensor(tensors[t], fmt::format("units[{}].tensors[{}]", u, t), source);
      CheckpointTensor ct;
      ct.name = tensor.string("name");
      ct.offset = tensor.count("offset");
      const json& shape = tensor.array("shape");
      for (const json& dim : shape) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
          tensor.bad("shape",
                     fmt::format("{} has a dim that is not an integer >= 0", shape.dump()));
        ct.shape.push_back(dim.get<int64_t>());
      }
      if (tensor.has("used_rows")) {
        ct.used_rows = tensor.count("used_rows");
        if (ct.shape.empty() || ct.used_rows > ct.shape[0]) {
          tensor.bad("used_rows",
                     fmt::format("is {}, more than the {} rows of shape {}", ct.used_rows,
                                 ct.shape.empty() ? 0 : ct.shape[0], shape.dump()));
        }
      }
      out.tensors.push_back(std::move(ct));
    }
    m.units.push_back(std::move(out));
  }

  const json& files = top.array("files");
  for (size_t f = 0; f < files.size(); ++f) {
    const Fields file(files[f], fmt::format("files[{}]", f), source);
    m.files.push_back(ShardFileInfo{file.string("name"), file.count("bytes"), file.crc("crc32c")});
  }
  m.trainer_state = top.get("trainer_state");
  return m;
}

}  // namespace zt
