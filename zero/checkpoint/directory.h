// The step directory protocol: a checkpoint's temporary directory, its commit (atomic rename,
// manifest.json, the `latest` pointer) and the pruning of old steps. Per process, no
// communication: the barriers between ranks are the caller's (train/checkpointer.h, or the
// trainer). The protocol (format.h has the files):
// Save protocol (rank 0 does the directory steps; the barriers are the trainer's):
//   rank 0: dir = prepare_checkpoint_dir(root, N)           -> barrier
//   every rank: ShardFileWriter(dir, rank) ... finish()     -> gather the ShardFileInfos on rank 0
//   rank 0: commit_checkpoint(root, N, manifest, keep_last)
// A crash at any point leaves `latest` naming a complete checkpoint (or no `latest` at all
// before the first commit): the step directory only gets its final name once every file in it
// is written and fsync'd, and `latest` is replaced atomically after that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/checkpoint/format.h"

namespace zt {

// crashed, and returns its path: every rank writes its shard file there. Rank 0 only.
std::string prepare_checkpoint_dir(const std::string& root, int64_t step);

// Deletes every `<root>/step<N>.tmp/`: what a save that never committed left (a full disk, a
// rank that died while writing). Returns their paths, so that the caller names them; empty when
// there were none or `root` does not exist. Rank 0 only, while no save into `root` is under way.
std::vector<std::string> remove_unfinished_saves(const std::string& root);

// The step `<root>/latest` names ("step<N>"), read without opening the checkpoint (zt-run's
// restarts; `zt-train --resume` validates it); nullopt when `root` has no `latest` (nothing was
// committed). kInput naming the file when it holds no step directory name.
std::optional<int64_t> latest_checkpoint_step(const std::string& root);

// Turns `<root>/step<N>.tmp/` into the checkpoint `<root>/step<N>/` (rank 0, after every rank's
// finish()): checks each file of manifest.files is there with its size; writes manifest.json
// atomically (which fsyncs the directory); renames the directory to step<N> (an existing
// step<N> from an earlier run is exchanged with it atomically, or, where the file system cannot
// exchange, moved to step<N>.old first, and deleted only once the new one is in place); fsyncs
// root; replaces `<root>/latest` atomically with "step<N>\n"; then deletes committed step
// directories beyond the keep_last newest by step number (keep_last <= 0: keep all) and leftover
// step*.tmp / step*.old directories, never step<N> itself (a run resumed from an earlier step
// keeps its new step<N> beside the keep_last newer ones). manifest.step must be `step`.
// Not safe while another save into the same root is under way.
void commit_checkpoint(const std::string& root, int64_t step, const CheckpointManifest& manifest,
                       int keep_last);

}  // namespace zt
