// Tests for zero/checkpoint/ (format, shard_writer, directory, reader): shard files written by
// simulated ranks (one process plays every rank) and read back under other world sizes (resharding:
// 4 ranks saved, 1, 2 and 3 ranks' shards read, a 6-element unit whose 4th shard is empty, uneven
// last shards, padding past the saved buffer reading as zeros); records streamed in pieces; the
// directory protocol (latest, keep_last pruning, replacing a step, a crashed save's step<N>.tmp);
// and each kind of bad checkpoint refused with one line naming the file and the problem.
#include "zero/checkpoint/directory.h"
#include "zero/checkpoint/reader.h"
#include "zero/checkpoint/shard_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory under GoogleTest's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "zt_checkpoint_XXXXXX";
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = made;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// The message of the zt::Error `f` throws (and that it is a kInput error), or a failure.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

// The model: three units, padded as a 4-rank save pads them.
//   root  10 elements, padded to 12: 4 shards of 3, the last one padding only
//   h0     6 elements, not padded:    4 shards of 2, 2, 2, 0 (rank 3's is empty)
//   h1     7 elements, not padded:    4 shards of 2, 2, 2, 1 (uneven last shard)
std::vector<CheckpointUnit> model_units() {
  return {
      {"root", 10, 12, {{"wte", {2, 4}, 0}, {"ln_f.weight", {2}, 8}}},
      {"h0", 6, 6, {{"attn.weight", {2, 3}, 0}}},
      {"h1", 7, 7, {{"mlp.weight", {7}, 0}}},
  };
}

// Rank r's range of a buffer of `padded` elements over `world` ranks: shards of
// ceil(padded / world), the last ones clipped (possibly to nothing).
struct Range {
  int64_t begin, count;
};
Range shard_range(int64_t padded, int world, int rank) {
  const int64_t shard = (padded + world - 1) / world;
  const int64_t begin = std::min(padded, shard * rank);
  return {begin, std::min(padded, begin + shard) - begin};
}

// The value a kind holds at element i of unit u: distinct everywhere, zero in the padding.
float value(size_t u, int kind, int64_t i, int64_t numel) {
  return i < numel ? static_cast<float>(1000 * (u + 1) + 100 * kind + i) + 0.25f : 0.0f;
}

const std::vector<std::string> kKinds = {"master", "exp_avg", "working"};  // fp32, fp32, bf16
DType kind_dtype(int k) { return k == 2 ? DType::kBF16 : DType::kF32; }

// Writes rank r's shard file of the model into dir, as a rank of a `world`-rank save would.
ShardFileInfo write_rank(const std::string& dir, int rank, int world) {
  ShardFileWriter writer(dir, rank);
  const auto units = model_units();
  for (size_t u = 0; u < units.size(); ++u) {
    const Range r = shard_range(units[u].padded_numel, world, rank);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> f32;
      std::vector<uint16_t> bf16;
      for (int64_t i = r.begin; i < r.begin + r.count; ++i) {
        f32.push_back(value(u, k, i, units[u].numel));
        bf16.push_back(fp32_to_bf16(f32.back()));
      }
      const void* data = kind_dtype(k) == DType::kF32 ? static_cast<const void*>(f32.data())
                                                      : static_cast<const void*>(bf16.data());
      writer.add_record(units[u].name, kKinds[k], kind_dtype(k), r.begin, r.count, data);
    }
  }
  return writer.finish();
}

CheckpointManifest manifest_for(int64_t step, int world) {
  CheckpointManifest m;
  m.step = step;
  m.world_size = world;
  m.zero_stage = 2;
  m.compute_dtype = DType::kBF16;
  m.grad_dtype = DType::kF32;
  m.units = model_units();
  m.trainer_state = {{"loss_scale", 65536.0}, {"data_position", step * 8}};
  return m;
}

// A whole save of `step` by `world` simulated ranks into root, committed.
void save(const std::string& root, int64_t step, int world = 4, int keep_last = 0) {
  const std::string dir = prepare_checkpoint_dir(root, step);
  CheckpointManifest m = manifest_for(step, world);
  for (int r = 0; r < world; ++r) m.files.push_back(write_rank(dir, r, world));
  commit_checkpoint(root, step, m, keep_last);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string file_text(const std::string& path) { return read_file(path, "test file"); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(CheckpointFiles, RoundTripReshardsFourRanksIntoOneTwoAndThree) {
  TempDir tmp;
  save(tmp.path(), 10);
  const CheckpointReader reader(tmp.path());  // through `latest`
  EXPECT_EQ(reader.dir(), tmp / "step10");
  const CheckpointManifest& m = reader.manifest();
  EXPECT_EQ(m.step, 10);
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.zero_stage, 2);
  EXPECT_EQ(m.compute_dtype, DType::kBF16);
  EXPECT_EQ(m.trainer_state["data_position"], 80);
  ASSERT_EQ(m.files.size(), 4u);
  EXPECT_EQ(m.files[3].name, "rank3.zts");
  reader.check_model(model_units());

  const auto units = model_units();
  for (int world : {1, 2, 3}) {
    for (size_t u = 0; u < units.size(); ++u) {
      // The new world pads to a multiple of 2 * world: past the saved buffer reads as zeros.
      const int64_t unit = 2 * world;
      const int64_t padded = (units[u].numel + unit - 1) / unit * unit;
      for (int k = 0; k < 3; ++k) {
        std::vector<float> got;
        for (int rank = 0; rank < world; ++rank) {
          const Range r = shard_range(padded, world, rank);
          if (kind_dtype(k) == DType::kF32) {
            std::vector<float> shard(r.count, -1.0f);
            reader.read_range(units[u].name, kKinds[k], r.begin, r.count, DType::kF32,
                              shard.data());
            got.insert(got.end(), shard.begin(), shard.end());
          } else {
            std::vector<uint16_t> shard(r.count, 0xffff);
            reader.read_range(units[u].name, kKinds[k], r.begin, r.count, DType::kBF16,
                              shard.data());
            for (uint16_t h : shard) got.push_back(bf16_to_fp32(h));
          }
        }
        ASSERT_EQ(static_cast<int64_t>(got.size()), padded);
        for (int64_t i = 0; i < padded; ++i) {
          float want = value(u, k, i, units[u].numel);
          if (kind_dtype(k) == DType::kBF16) want = bf16_to_fp32(fp32_to_bf16(want));
          EXPECT_EQ(got[i], want) << units[u].name << " " << kKinds[k] << " world " << world
                                  << " element " << i;
        }
      }
    }
  }
  // A range across three records and two files' boundaries, starting mid-record.
  std::vector<float> middle(4);
  reader.read_range("h1", "master", 1, 4, DType::kF32, middle.data());
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(middle[i], value(2, 0, 1 + i, 7));
}

TEST(CheckpointFiles, OpensAStepDirectoryDirectly) {
  TempDir tmp;
  save(tmp.path(), 3);
  save(tmp.path(), 4);
  const CheckpointReader reader(tmp / "step3");
  EXPECT_EQ(reader.manifest().step, 3);
  EXPECT_TRUE(reader.has("h0", "exp_avg"));
  EXPECT_FALSE(reader.has("h0", "exp_avg_sq"));
  EXPECT_EQ(reader.dtype("h0", "working"), DType::kBF16);
}

// The listing zt-ckpt inspect prints: every non-empty record, units in order, kinds by name.
TEST(CheckpointFiles, ListsEveryRecordAndEachUnitsKinds) {
  TempDir tmp;
  save(tmp.path(), 3);
  const CheckpointReader reader(tmp.path());
  EXPECT_EQ(reader.kinds("h0"), (std::vector<std::string>{"exp_avg", "master", "working"}));
  const auto records = reader.list_records();
  // root: 4 ranks x 3 kinds; h0: rank 3's shards are empty (left out); h1: 4 x 3.
  ASSERT_EQ(records.size(), 12u + 9u + 12u);
  EXPECT_EQ(records[0].unit, "root");
  EXPECT_EQ(records[0].kind, "exp_avg");
  EXPECT_EQ(records[0].file, "rank0.zts");
  EXPECT_EQ(records[3].file, "rank3.zts");
  EXPECT_EQ(records[3].global_begin, 9);
  EXPECT_EQ(records[12].unit, "h0");
  EXPECT_EQ(records[20].kind, "working");
  EXPECT_EQ(records[20].dtype, DType::kBF16);
  EXPECT_EQ(records[20].bytes, 2 * 2);
}

// used_rows (the padded vocabulary's real rows) goes into the manifest and back; a manifest
// without it reads as -1 (all rows), and more rows than the shape has is refused.
TEST(CheckpointFiles, ManifestKeepsUsedRows) {
  FlatLayout layout(
      {ParamSpec{"wte", {8, 2}, Decay::kYes, {}, 5}, ParamSpec{"b", {3}, Decay::kNo, {}, -1}});
  CheckpointManifest m = manifest_for(1, 1);
  m.units = {checkpoint_unit("root", layout, layout.numel())};
  EXPECT_EQ(m.units[0].tensors[0].used_rows, 5);
  EXPECT_EQ(m.units[0].tensors[1].used_rows, -1);
  json j = manifest_to_json(m);
  EXPECT_EQ(j["units"][0]["tensors"][0]["used_rows"], 5);
  EXPECT_FALSE(j["units"][0]["tensors"][1].contains("used_rows"));
  EXPECT_EQ(manifest_from_json(j, "m.json").units[0].tensors[0].used_rows, 5);
  j["units"][0]["tensors"][0].erase("used_rows");
  EXPECT_EQ(manifest_from_json(j, "m.json").units[0].tensors[0].used_rows, -1);
  j["units"][0]["tensors"][0]["used_rows"] = 9;
  expect_contains(error_of([&] { manifest_from_json(j, "m.json"); }),
                  {"m.json", "units[0].tensors[0].used_rows is 9, more than the 8 rows"});
}

TEST(CheckpointFiles, StreamedRecordEqualsOneShotRecord) {
  TempDir tmp;
  fs::create_directory(tmp / "a");
  fs::create_directory(tmp / "b");
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;

  ShardFileWriter one_shot(tmp / "a", 1);
  one_shot.add_record("u", "master", DType::kF32, 500, 1000, data.data());
  const ShardFileInfo a = one_shot.finish();

  ShardFileWriter streamed(tmp / "b", 1);
  streamed.begin_record("u", "master", DType::kF32, 500, 1000);
  const char* bytes = reinterpret_cast<const char*>(data.data());
  size_t done = 0;
  for (size_t piece = 1; done < 4000; piece = piece * 3 % 997 + 1) {  // uneven, odd-sized pieces
    const size_t n = std::min(piece, 4000 - done);
    streamed.append(bytes + done, n);
    done += n;
  }
  streamed.end_record();
  const ShardFileInfo b = streamed.finish();

  EXPECT_EQ(a.name, "rank1.zts");
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.crc32c, b.crc32c);
  EXPECT_EQ(a.bytes, static_cast<int64_t>(fs::file_size(tmp / "a/rank1.zts")));
  EXPECT_EQ(file_text(tmp / "a/rank1.zts"), file_text(tmp / "b/rank1.zts"));

  // Append past the record's size, and finish inside a record: internal errors.
  ShardFileWriter wrong(tmp / "a", 2);
  wrong.begin_record("u", "master", DType::kF16, 0, 2);
  EXPECT_THROW(wrong.append(bytes, 5), Error);
  EXPECT_THROW(wrong.finish(), Error);
}

TEST(CheckpointFiles, AbandonedWriterRemovesItsFile) {
  TempDir tmp;
  {
    ShardFileWriter writer(tmp.path(), 0);
    writer.begin_record("u", "master", DType::kF32, 0, 4);
  }
  EXPECT_FALSE(fs::exists(tmp / "rank0.zts"));
}

TEST(CheckpointFiles, LatestFollowsCommitsAndKeepLastPrunes) {
  TempDir tmp;
  for (int64_t step = 1; step <= 5; ++step) save(tmp.path(), step, 2, /*keep_last=*/2);
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"latest", "step4", "step5"}));
  EXPECT_EQ(file_text(tmp / "latest"), "step5\n");
  EXPECT_EQ(CheckpointReader(tmp.path()).manifest().step, 5);

  // keep_last <= 0 keeps every step.
  save(tmp.path(), 6, 2, 0);
  save(tmp.path(), 7, 2, -1);
  EXPECT_EQ(entries(tmp.path()),
            (std::vector<std::string>{"latest", "step4", "step5", "step6", "step7"}));

  // Saving an earlier step again (a run resumed from step 4) keeps it, whatever its number.
  save(tmp.path(), 2, 2, 1);
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"latest", "step2", "step7"}));
  EXPECT_EQ(CheckpointReader(tmp.path()).manifest().step, 2);
}

TEST(CheckpointFiles, CommitReplacesAnExistingStep) {
  TempDir tmp;
  save(tmp.path(), 8, 4);
  save(tmp.path(), 8, 2);  // the same step again, from a run on 2 ranks
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"latest", "step8"}));
  EXPECT_EQ(entries(tmp / "step8"),
            (std::vector<std::string>{"manifest.json", "rank0.zts", "rank1.zts"}));
  const CheckpointReader reader(tmp.path());
  EXPECT_EQ(reader.manifest().world_size, 2);
}

// Where the file system has no RENAME_EXCHANGE, commit_checkpoint moves an existing step<N> to
// step<N>.old before the new one takes its name; a crash between the two renames leaves
// `latest` naming step<N>, found as step<N>.old, and the next commit removes it.
TEST(CheckpointFiles, ReaderFindsAStepMovedAsideByAnInterruptedReplace) {
  TempDir tmp;
  save(tmp.path(), 8);
  fs::rename(tmp / "step8", tmp / "step8.old");
  const CheckpointReader reader(tmp.path());
  EXPECT_EQ(reader.dir(), tmp / "step8.old");
  EXPECT_EQ(reader.manifest().step, 8);
  save(tmp.path(), 9);
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"latest", "step9"}));
}

TEST(CheckpointFiles, CrashedSaveLeavesLatestOnThePreviousStep) {
  TempDir tmp;
  save(tmp.path(), 1);
  // Step 2 crashes after every rank wrote its file, before the commit.
  const std::string crashed = prepare_checkpoint_dir(tmp.path(), 2);
  EXPECT_EQ(crashed, tmp / "step2.tmp");
  for (int r = 0; r < 4; ++r) write_rank(crashed, r, 4);
  EXPECT_EQ(file_text(tmp / "latest"), "step1\n");
  EXPECT_EQ(CheckpointReader(tmp.path()).manifest().step, 1);
  // The temporary directory is not a checkpoint.
  expect_contains(error_of([&] { CheckpointReader r(crashed); }),
                  {crashed, "neither a step directory"});

  // Preparing the same step again starts from an empty directory.
  write_text(crashed + "/junk", "x");
  EXPECT_EQ(prepare_checkpoint_dir(tmp.path(), 2), crashed);
  EXPECT_TRUE(entries(crashed).empty());
  write_text(crashed + "/junk", "x");

  // The next commit removes the leftover.
  save(tmp.path(), 3);
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"latest", "step1", "step3"}));
  EXPECT_EQ(CheckpointReader(tmp.path()).manifest().step, 3);
}

// A committed 4-rank checkpoint at <tmp>/step10 to break in each test below.
class CheckpointFilesBad : public ::testing::Test {
 protected:
  void SetUp() override { save(tmp_.path(), 10); }
  std::string step_dir() const { return tmp_ / "step10"; }
  std::string shard(int r) const { return step_dir() + "/" + shard_file_name(r); }
  std::string manifest_path() const { return step_dir() + "/manifest.json"; }
  json manifest() const { return json::parse(file_text(manifest_path())); }
  void set_manifest(const json& j) { write_text(manifest_path(), j.dump(2)); }
  std::string open_error() const {
    return error_of([&] { CheckpointReader r(tmp_.path()); });
  }
  void flip_byte(const std::string& path, int64_t at) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::close(fd);
  }
  TempDir tmp_;
};

TEST_F(CheckpointFilesBad, FlippedByteFailsTheChecksum) {
  flip_byte(shard(2), 20);
  expect_contains(open_error(), {shard(2), "fails its checksum"});
}

TEST_F(CheckpointFilesBad, TruncatedShard) {
  const auto bytes = fs::file_size(shard(1));
  fs::resize_file(shard(1), bytes - 7);
  expect_contains(open_error(), {shard(1), fmt::format("is truncated: {} bytes, the manifest says "
                                                       "{}",
                                                       bytes - 7, bytes)});
}

TEST_F(CheckpointFilesBad, MissingShard) {
  fs::remove(shard(3));
  expect_contains(open_error(), {shard(3) + ": missing (the manifest lists 4 shard files)"});
}

TEST_F(CheckpointFilesBad, DifferentModel) {
  const CheckpointReader reader(tmp_.path());
  auto units = model_units();
  units[1].tensors[0].shape = {3, 2};
  expect_contains(error_of([&] { reader.check_model(units); }),
                  {manifest_path(), "different model", "\"attn.weight\"", "[2,3]", "[3,2]"});
  units = model_units();
  units.pop_back();
  expect_contains(error_of([&] { reader.check_model(units); }),
                  {manifest_path(), "3 units in the checkpoint, 2 in the model"});
  units = model_units();
  units[2].name = "h2";
  expect_contains(error_of([&] { reader.check_model(units); }), {"\"h1\"", "\"h2\""});
  // A different world pads differently: the same model.
  units = model_units();
  units[0].padded_numel = 16;
  reader.check_model(units);
}

TEST_F(CheckpointFilesBad, FileNamePointingOutsideTheDirectory) {
  for (const char* name : {"../x", "/etc/passwd", ".."}) {
    json j = manifest();
    j["files"][1]["name"] = name;
    set_manifest(j);
    expect_contains(open_error(), {manifest_path(), json(name).dump(), "is not a plain file name"});
  }
}

TEST_F(CheckpointFilesBad, ManifestProblems) {
  const json original = manifest();
  json j = original;
  j["format_version"] = 99;
  set_manifest(j);
  expect_contains(open_error(), {manifest_path(), "format version 99"});

  j = original;
  j["units"][1].erase("numel");
  set_manifest(j);
  expect_contains(open_error(), {manifest_path(), "units[1].numel is missing"});

  j = original;
  j["files"].erase(3);
  set_manifest(j);
  expect_contains(open_error(), {manifest_path(), "lists 3 shard files for world size 4"});

  write_text(manifest_path(), "{\"format_version\": 1,");
  expect_contains(open_error(), {manifest_path(), "is not valid JSON"});

  write_text(tmp_ / "latest", "../../etc\n");
  expect_contains(open_error(), {tmp_ / "latest", "not a step directory name"});
}

TEST_F(CheckpointFilesBad, ShardFilesSwapped) {
  // rank0.zts and rank1.zts exchanged, the manifest's sizes and checksums with them.
  fs::rename(shard(0), step_dir() + "/x");
  fs::rename(shard(1), shard(0));
  fs::rename(step_dir() + "/x", shard(1));
  json j = manifest();
  std::swap(j["files"][0]["bytes"], j["files"][1]["bytes"]);
  std::swap(j["files"][0]["crc32c"], j["files"][1]["crc32c"]);
  set_manifest(j);
  expect_contains(open_error(), {shard(0), "holds rank 1's shard"});
}

TEST_F(CheckpointFilesBad, IncompleteCoverage) {
  // Rank 1 of a new save leaves out h0's exp_avg: elements [2, 4) of it are nowhere.
  const std::string dir = prepare_checkpoint_dir(tmp_.path(), 11);
  CheckpointManifest m = manifest_for(11, 4);
  for (int r = 0; r < 4; ++r) {
    if (r != 1) {
      m.files.push_back(write_rank(dir, r, 4));
      continue;
    }
    ShardFileWriter writer(dir, r);
    const std::vector<float> zeros(8, 0.0f);
    for (const CheckpointUnit& u : model_units()) {
      const Range range = shard_range(u.padded_numel, 4, r);
      for (int k = 0; k < 3; ++k) {
        if (u.name == "h0" && k == 1) continue;
        writer.add_record(u.name, kKinds[k], kind_dtype(k), range.begin, range.count, zeros.data());
      }
    }
    m.files.push_back(writer.finish());
  }
  commit_checkpoint(tmp_.path(), 11, m, 0);
  expect_contains(open_error(), {tmp_ / "step11",
                                 "unit \"h0\" kind \"exp_avg\": elements [2, 4) "
                                 "are in no shard file"});
}

TEST_F(CheckpointFilesBad, ReadRangeErrors) {
  const CheckpointReader reader(tmp_.path());
  std::vector<float> dst(4);
  expect_contains(
      error_of([&] { reader.read_range("h0", "working", 0, 4, DType::kF32, dst.data()); }),
      {step_dir(), "unit \"h0\" kind \"working\" elements [0, 4)", "asked for as fp32",
       "holds bf16"});
  expect_contains(
      error_of([&] { reader.read_range("h0", "exp_avg_sq", 0, 4, DType::kF32, dst.data()); }),
      {step_dir(), "no \"exp_avg_sq\" records of unit \"h0\""});
  expect_contains(
      error_of([&] { reader.read_range("h9", "master", 0, 4, DType::kF32, dst.data()); }),
      {step_dir(), "no unit \"h9\""});

  // A byte flipped after open: the record's own checksum catches it on read.
  flip_byte(shard(1), 16);  // the first byte of rank 1's first record (root master [3, 6))
  expect_contains(
      error_of([&] { reader.read_range("root", "master", 4, 1, DType::kF32, dst.data()); }),
      {shard(1), "unit \"root\" kind \"master\" elements [4, 5)",
       "the record [3, 6) fails its checksum"});
}

}  // namespace
}  // namespace zt
