// Checkpointer (train/checkpointer.h) on one rank: a synchronous and an asynchronous save commit
// the same checkpoint (the files validate, the manifest's trainer_state carries the engine's
// state), the test fault points fire where the protocol says, and a save in flight that is never
// finished leaves the previous checkpoint as the latest. The multi-rank protocol runs in
// tests/e2e/checkpoint_resume.sh and fault_injection.sh; zt-bench checkpoint's use of this object
// in tests/e2e/bench_checkpoint.sh.
#include "train/checkpointer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  Fixture() : model(Gpt2Config{2, 2, 16, 61, 8}), engine(device, comm, model, EngineOptions{}) {
    root = fs::temp_directory_path() /
           ("zt_checkpointer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
  }
  ~Fixture() { fs::remove_all(root); }
  CheckpointerOptions options() {
    CheckpointerOptions o;
    o.root = root.string();
    o.keep_last = 0;
    o.on_saved = [this](const SaveReport& s) { saved.push_back(s); };
    return o;
  }
  std::string latest() const { return read_file((root / "latest").string(), "latest"); }

  CpuDevice device;
  SelfCommunicator comm{device};
  Gpt2 model;
  Engine engine;
  fs::path root;
  std::vector<SaveReport> saved;
};

TEST(Checkpointer, SyncAndAsyncSavesCommitTheSameState) {
  Fixture f;
  Checkpointer checkpointer(f.engine, f.comm, f.options());
  checkpointer.save_sync(1, {{"step", 1}});
  checkpointer.begin_async(2, {{"step", 2}});
  EXPECT_TRUE(checkpointer.pending());
  EXPECT_FALSE(fs::exists(f.root / "step2"));  // written, not yet committed
  checkpointer.finish_pending();
  EXPECT_FALSE(checkpointer.pending());
  EXPECT_EQ(f.latest(), "step2\n");

  ASSERT_EQ(f.saved.size(), 2u);
  EXPECT_FALSE(f.saved[0].async);
  EXPECT_TRUE(f.saved[1].async);
  EXPECT_EQ(f.saved[0].blocked_ms, f.saved[0].save_ms);
  EXPECT_GT(f.saved[0].bytes, 0);
  EXPECT_EQ(f.saved[0].bytes, f.saved[1].bytes);  // the same records, one rank's file

  // Both validate whole (sizes and checksums), hold the trainer state given and the engine's.
  const CheckpointReader sync((f.root / "step1").string());
  const CheckpointReader async((f.root / "step2").string());
  EXPECT_EQ(sync.manifest().trainer_state["step"], 1);
  EXPECT_EQ(async.manifest().trainer_state["step"], 2);
  ASSERT_TRUE(sync.manifest().trainer_state.contains("engine"));
  EXPECT_EQ(sync.manifest().trainer_state["engine"], async.manifest().trainer_state["engine"]);
  EXPECT_EQ(sync.list_records().size(), async.list_records().size());
  EXPECT_EQ(sync.manifest().files[0].crc32c, async.manifest().files[0].crc32c);
}

TEST(Checkpointer, FaultPointsFireBeforeEachUnitAndBeforeTheCommit) {
  Fixture f;
  std::vector<std::pair<SavePoint, int>> calls;
  CheckpointerOptions o = f.options();
  o.fault = [&](SavePoint at, int64_t step, int unit) {
    EXPECT_EQ(step, 3);
    calls.emplace_back(at, unit);
  };
  const int units = static_cast<int>(f.model.units().size());
  for (bool async : {false, true}) {
    calls.clear();
    Checkpointer checkpointer(f.engine, f.comm, o);
    if (async) {
      checkpointer.begin_async(3, {});
      checkpointer.finish_pending();
    } else {
      checkpointer.save_sync(3, {});
    }
    // Before each unit (synchronous) or each of its records (asynchronous: the writer thread
    // writes the snapshot record by record), in unit order; then once before the commit.
    std::vector<int> units_seen;
    for (size_t i = 0; i + 1 < calls.size(); ++i) {
      EXPECT_EQ(calls[i].first, SavePoint::kShardRecord);
      if (units_seen.empty() || units_seen.back() != calls[i].second)
        units_seen.push_back(calls[i].second);
    }
    ASSERT_EQ(static_cast<int>(units_seen.size()), units) << "async " << async;
    for (int u = 0; u < units; ++u) EXPECT_EQ(units_seen[u], u);
    if (!async) {
      EXPECT_EQ(static_cast<int>(calls.size()), units + 1);
    }
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(calls.back(), std::make_pair(SavePoint::kCommit, 0));
  }
}

TEST(Checkpointer, AFaultBeforeTheCommitLeavesThePreviousCheckpointLatest) {
  Fixture f;
  CheckpointerOptions o = f.options();
  o.fault = [](SavePoint at, int64_t step, int) {
    if (at == SavePoint::kCommit && step == 2) throw_input("injected");
  };
  Checkpointer checkpointer(f.engine, f.comm, o);
  checkpointer.save_sync(1, {});
  EXPECT_THROW(checkpointer.save_sync(2, {}), Error);
  EXPECT_EQ(f.latest(), "step1\n");
  EXPECT_TRUE(fs::exists(f.root / "step2.tmp" / shard_file_name(0)));
  EXPECT_FALSE(fs::exists(f.root / "step2"));
  EXPECT_EQ(f.saved.size(), 1u);
}

TEST(Checkpointer, ASaveInFlightIsNotCommittedWhenTheCheckpointerGoes) {
  Fixture f;
  {
    Checkpointer checkpointer(f.engine, f.comm, f.options());
    checkpointer.save_sync(1, {});
    checkpointer.begin_async(2, {});
  }  // joins the writer; commits nothing
  EXPECT_EQ(f.latest(), "step1\n");
  EXPECT_FALSE(fs::exists(f.root / "step2"));
  EXPECT_EQ(f.saved.size(), 1u);
}

TEST(Checkpointer, MapSnapshotTakesTheStateOnceAndWritesNothing) {
  Fixture f;
  Checkpointer checkpointer(f.engine, f.comm, f.options());
  const Checkpointer::SnapshotMapping mapped = checkpointer.map_snapshot();
  EXPECT_GT(mapped.bytes, 0);
  EXPECT_FALSE(fs::exists(f.root));
  EXPECT_FALSE(checkpointer.pending());
}

}  // namespace
}  // namespace zt
