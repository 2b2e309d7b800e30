// The step directory protocol over POSIX calls and std::filesystem: the temporary directory,
// the atomic rename (RENAME_EXCHANGE where the file system has it), manifest.json, `latest`, and
// pruning.
#include "zero/checkpoint/directory.h"

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "runtime/file_io.h"
#include "zero/checkpoint/detail.h"

namespace zt {

using namespace checkpoint_detail;
namespace fs = std::filesystem;
using nlohmann::json;

// ---- the directory protocol
// ----------------------------------------------------------------------

std::string prepare_checkpoint_dir(const std::string& root, int64_t step) {
  ZT_ASSERT(step >= 0, "checkpoint step {}", step);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail_fs("create the checkpoint directory", root, ec);
  const fs::path temp = fs::path(root) / (step_name(step) + ".tmp");
  remove_tree(temp);  // a save of this step that crashed before its commit
  fs::create_directory(temp, ec);
  if (ec) fail_fs("create the checkpoint directory", temp, ec);
  sync_parent_directory(temp.string());
  return temp.string();
}

std::vector<std::string> remove_unfinished_saves(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".tmp") || !it->is_directory(ec) || ec) continue;
    if (parse_step_name(std::string_view(name).substr(0, name.size() - 4)) < 0) continue;
    removed.push_back(it->path().string());
  }
  if (ec) fail_fs("list the checkpoint directory", root, ec);
  std::sort(removed.begin(), removed.end());
  for (const std::string& path : removed) remove_tree(path);
  if (!removed.empty()) sync_parent_directory(removed.front());
  return removed;
}

std::optional<int64_t> latest_checkpoint_step(const std::string& root) {
  std::error_code ec;
  const fs::path latest = fs::path(root) / "latest";
  if (!fs::exists(latest, ec)) return std::nullopt;
  std::string name = read_file(latest.string(), "checkpoint pointer");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const int64_t step = parse_step_name(name);
  if (step < 0)
    bad_checkpoint(
        latest.string(),
        fmt::format("holds {}, not a step directory name like \"step100\"", quote_name(name)));
  return step;
}

namespace {

// Deletes committed step directories beyond the keep_last newest by step number (keep_last <= 0:
// none) and every leftover step*.tmp / step*.old directory; never `keep` (the step just
// committed, which `latest` names), even when keep_last newer steps exist (a run resumed from an
// earlier step: then keep_last + 1 directories remain).
void prune_checkpoints(const fs::path& root, const std::string& keep, int keep_last) {
  std::vector<std::pair<int64_t, fs::path>> committed;
  std::vector<fs::path> leftovers;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || ec) continue;
    const std::string name = it->path().filename().string();
    if (const int64_t step = parse_step_name(name); step >= 0) {
      committed.emplace_back(step, it->path());
    } else if (name.ends_with(".tmp") || name.ends_with(".old")) {
      if (parse_step_name(std::string_view(name).substr(0, name.size() - 4)) >= 0)
        leftovers.push_back(it->path());
    }
  }
  if (ec) fail_fs("list the checkpoint directory", root, ec);
  for (const fs::path& p : leftovers) remove_tree(p);
  if (keep_last <= 0) return;
  std::sort(committed.begin(), committed.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last); i < committed.size(); ++i) {
    if (committed[i].second.filename() != keep) remove_tree(committed[i].second);
  }
}

}  // namespace

void commit_checkpoint(const std::string& root, int64_t step, const CheckpointManifest& manifest,
                       int keep_last) {
  ZT_ASSERT(manifest.step == step, "manifest of step {} committed as step {}", manifest.step, step);
  const fs::path root_path(root);
  const std::string name = step_name(step);
  const fs::path temp = root_path / (name + ".tmp");
  const fs::path final_dir = root_path / name;
  std::error_code ec;
  if (!fs::is_directory(temp, ec)) {
    throw_system(
        fmt::format("checkpoint {}: missing; prepare_checkpoint_dir makes it before the "
                    "ranks write their shard files",
                    temp.string()));
  }
  // Every file the manifest lists is there, as its rank reported it (a rank whose write went
  // elsewhere would otherwise surface only at the next load).
  for (const ShardFileInfo& f : manifest.files) {
    ZT_ASSERT(is_plain_name(f.name), "shard file name {}", quote_name(f.name));
    const fs::path p = temp / f.name;
    const auto bytes = fs::file_size(p, ec);
    if (ec) fail_fs("find the shard file", p, ec);
    if (static_cast<int64_t>(bytes) != f.bytes) {
      throw_system(fmt::format("checkpoint {}: {} bytes on disk, its rank wrote {}", p.string(),
                               bytes, f.bytes));
    }
  }

  // manifest.json last: its presence marks the directory complete. AtomicFile fsyncs the
  // directory after the rename, which also makes the shard files' names durable.
  AtomicFile manifest_file((temp / "manifest.json").string());
  manifest_file.write(dump_json(manifest_to_json(manifest), 2) + "\n");
  manifest_file.commit();

  // The step directory gets its final name. An existing one (an earlier run saved this step)
  // must not vanish before the new one is in place, since `latest` may name it.
  fs::path replaced;  // where the earlier directory went, deleted once the new one is in place
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      replaced = temp;  // an atomic swap: step<N> was never missing
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
      // No RENAME_EXCHANGE on this file system: step<N> is missing between the two renames; a
      // reader following `latest` then opens step<N>.old (CheckpointReader).
      replaced = root_path / (name + ".old");
      remove_tree(replaced);
      rename_path(final_dir, replaced);
      rename_path(temp, final_dir);
    } else {
      throw_system(fmt::format("cannot exchange {} with {}: {}", temp.string(), final_dir.string(),
                               std::strerror(errno)));
    }
  } else {
    rename_path(temp, final_dir);
  }
  sync_parent_directory(final_dir.string());

  AtomicFile latest((root_path / "latest").string());
  latest.write(name + "\n");
  latest.commit();

  if (!replaced.empty()) remove_tree(replaced);
  prune_checkpoints(root_path, name, keep_last);
}

}  // namespace zt
