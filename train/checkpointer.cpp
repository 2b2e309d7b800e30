// Checkpointer: the multi-rank save protocol, synchronous and asynchronous (see checkpointer.h).
#include "train/checkpointer.h"

#include <array>
#include <utility>
#include <vector>

namespace zt {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Checkpointer::Checkpointer(Engine& engine, Communicator& comm, CheckpointerOptions options)
    : engine_(engine), comm_(comm), options_(std::move(options)) {}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

void Checkpointer::fault(SavePoint at, int64_t step, int unit) const {
  if (options_.fault) options_.fault(at, step, unit);
}

int Checkpointer::unit_index(const std::string& name) const {
  auto units = engine_.model().units();
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u]->name() == name) return static_cast<int>(u);
  return 0;
}

std::string Checkpointer::begin_step_dir(int64_t step, std::vector<std::string>* removed) {
  if (comm_.rank() == 0) {
    *removed = remove_unfinished_saves(options_.root);
    prepare_checkpoint_dir(options_.root, step);
  }
  all_gather_doubles(comm_, std::array{0.0});  // barrier: the directory exists
  return checkpoint_step_dir(options_.root, step) + ".tmp";
}

int64_t Checkpointer::commit(int64_t step, const ShardFileInfo& info, nlohmann::json state) {
  const int world = comm_.world();
  const std::vector<double> files = all_gather_doubles(
      comm_, std::array{static_cast<double>(info.bytes), static_cast<double>(info.crc32c)});
  fault(SavePoint::kCommit, step, 0);
  int64_t bytes = 0;
  if (comm_.rank() == 0) {
    CheckpointManifest manifest;
    manifest.step = step;
    engine_.describe_checkpoint(manifest);
    for (int r = 0; r < world; ++r) {
      manifest.files.push_back(ShardFileInfo{shard_file_name(r), static_cast<int64_t>(files[2 * r]),
                                             static_cast<uint32_t>(files[2 * r + 1])});
      bytes += manifest.files.back().bytes;
    }
    manifest.trainer_state = std::move(state);
    commit_checkpoint(options_.root, step, manifest, options_.keep_last);
  }
  all_gather_doubles(comm_, std::array{0.0});  // barrier: no rank goes on before the commit
  return bytes;
}

void Checkpointer::save_sync(int64_t step, nlohmann::json trainer_state) {
  const auto t0 = Clock::now();
  SaveReport report;
  ShardFileWriter writer(begin_step_dir(step, &report.removed), comm_.rank());
  trainer_state["engine"] =
      engine_.save_state(writer, [&](int unit) { fault(SavePoint::kShardRecord, step, unit); });
  const ShardFileInfo info = writer.finish();
  report.step = step;
  report.bytes = commit(step, info, std::move(trainer_state));
  report.blocked_ms = report.save_ms = ms_since(t0);
  if (options_.on_saved) options_.on_saved(report);
}

void Checkpointer::begin_async(int64_t step, nlohmann::json trainer_state) {
  finish_pending();  // one save at a time
  const auto t0 = Clock::now();
  pending_ = std::make_unique<PendingSave>();
  PendingSave& p = *pending_;
  const std::string dir = begin_step_dir(step, &p.removed);
  p.step = step;
  p.started = t0;
  snapshot_.rewind();
  trainer_state["engine"] = engine_.save_state(snapshot_);
  p.state = std::move(trainer_state);
  p.blocked_ms = ms_since(t0);
  // The test-only record fault fires on the writer thread, where an asynchronous save writes.
  p.writer = std::thread([this, &p, dir, step, rank = comm_.rank()] {
    const auto w0 = Clock::now();
    try {
      ShardFileWriter writer(dir, rank);
      snapshot_.write_to(writer, [&](const std::string& unit) {
        fault(SavePoint::kShardRecord, step, unit_index(unit));
      });
      p.info = writer.finish();
    } catch (...) {
      p.error = std::current_exception();
    }
    p.write_ms = ms_since(w0);
    p.written.store(true);
  });
}

void Checkpointer::finish_pending() {
  if (!pending_) return;
  PendingSave& p = *pending_;
  p.writer.join();
  if (p.error) std::rethrow_exception(p.error);
  SaveReport report;
  report.step = p.step;
  report.async = true;
  report.removed = std::move(p.removed);
  report.bytes = commit(p.step, p.info, std::move(p.state));
  report.blocked_ms = p.blocked_ms;
  report.write_ms = p.write_ms;
  report.save_ms = ms_since(p.started);
  pending_.reset();
  if (options_.on_saved) options_.on_saved(report);
}

Checkpointer::SnapshotMapping Checkpointer::map_snapshot() {
  const auto t0 = Clock::now();
  snapshot_.rewind();
  engine_.save_state(snapshot_);
  SnapshotMapping mapping{snapshot_.bytes(), ms_since(t0)};
  snapshot_.rewind();
  return mapping;
}

}  // namespace zt
