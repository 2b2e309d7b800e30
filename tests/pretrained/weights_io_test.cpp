// Weights in and out: a save/load round trip through safetensors with Hugging Face names and
// shapes, and the errors a wrong file gives.
#include "pretrained/weights_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/formats/safetensors.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  explicit Fixture(Gpt2Config c, uint64_t seed, DType compute = DType::kF32)
      : model(c), engine(device, comm, model, options(seed, compute)) {}
  static EngineOptions options(uint64_t seed, DType compute) {
    EngineOptions o;
    o.seed = seed;
    o.precision.compute = o.precision.grad_accum = o.precision.comm = compute;
    return o;
  }
  CpuDevice device;
  SelfCommunicator comm{device};
  Gpt2 model;
  Engine engine;
};

// A file in this process's directory under temp_directory_path(), removed when the process ends.
fs::path temp_file(const std::string& name) {
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("zt_weights_" + std::to_string(::getpid()));
    ~Dir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  fs::create_directories(dir.path);
  return dir.path / name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    return e.message();
  }
  return "no error";
}

const Gpt2Config kSmall{2, 2, 16, 61, 8};

TEST(WeightsIo, RoundTripWithHuggingFaceShapes) {
  const fs::path path = temp_file("roundtrip.safetensors");
  Fixture a(kSmall, 1), b(kSmall, 2);
  save_weights(a.engine, path.string());
  SafetensorsReader reader = SafetensorsReader::open(path.string());
  ASSERT_NE(reader.find("wte.weight"), nullptr);
  EXPECT_EQ(reader.find("wte.weight")->shape, (std::vector<int64_t>{61, 16}));  // vocab unpadded
  EXPECT_EQ(reader.find("h.1.mlp.c_fc.weight")->shape, (std::vector<int64_t>{16, 64}));
  load_weights(b.engine, path.string());
  for (int u = 0; u < a.engine.num_units(); ++u) {
    const int64_t n = a.model.units()[u]->layout().numel();
    EXPECT_EQ(std::memcmp(a.engine.unit_params(u), b.engine.unit_params(u), n * 4), 0) << u;
  }
}

// Mixed precision exports the fp32 master, and loading sets the master and the working copy
// rounded from it: the two engines then hold the same bytes of model state.
TEST(WeightsIo, MixedPrecisionRoundTripKeepsTheMasterExact) {
  const fs::path path = temp_file("bf16.safetensors");
  Fixture a(kSmall, 1, DType::kBF16), b(kSmall, 2, DType::kBF16);
  save_weights(a.engine, path.string());
  load_weights(b.engine, path.string());
  for (int u = 0; u < a.engine.num_units(); ++u)
    EXPECT_TRUE(a.engine.model_state_bytes(u) == b.engine.model_state_bytes(u)) << u;
  // And the file holds the master's values, which fp32 export of the same seed also gives.
  const fs::path fp32_path = temp_file("fp32.safetensors");
  Fixture c(kSmall, 1);
  save_weights(c.engine, fp32_path.string());
  auto tensor = [](const fs::path& file, const char* name) {
    SafetensorsReader reader = SafetensorsReader::open(file.string());
    const SafetensorsEntry& entry = *reader.find(name);
    std::vector<float> values(static_cast<size_t>(entry.numel()));
    reader.read_as_f32(entry, values.data());
    return values;
  };
  const std::vector<float> mixed = tensor(path, "h.0.attn.c_attn.weight");
  EXPECT_EQ(mixed, tensor(fp32_path, "h.0.attn.c_attn.weight"));
  // Not already on the bf16 grid: the export is the master, not the working copy.
  EXPECT_TRUE(std::any_of(mixed.begin(), mixed.end(),
                          [](float x) { return bf16_to_fp32(fp32_to_bf16(x)) != x; }));
}

TEST(WeightsIo, WrongShapeMissingAndUnexpectedTensorsAreInputErrors) {
  const fs::path path = temp_file("small.safetensors");
  Fixture small(kSmall, 1);
  save_weights(small.engine, path.string());
  Fixture wider(Gpt2Config{2, 2, 32, 61, 8}, 1);
  EXPECT_NE(error_of([&] {
              load_weights(wider.engine, path.string());
            }).find("has shape [61, 16], expected [61, 32]"),
            std::string::npos);
  Fixture deeper(Gpt2Config{3, 2, 16, 61, 8}, 1);
  EXPECT_NE(error_of([&] {
              load_weights(deeper.engine, path.string());
            }).find("'h.2.ln_1.weight' is missing"),
            std::string::npos);
  Fixture shallower(Gpt2Config{1, 2, 16, 61, 8}, 1);
  EXPECT_NE(error_of([&] {
              load_weights(shallower.engine, path.string());
            }).find("unexpected tensor 'h.1."),
            std::string::npos);
}

TEST(WeightsIo, AcceptsLmHeadModelExports) {
  // GPT2LMHeadModel files prefix "transformer." and carry the tied head and mask buffers.
  const fs::path path = temp_file("lmhead.safetensors");
  Fixture a(kSmall, 5), b(kSmall, 6);
  SafetensorsWriter w;
  std::vector<float> mask(64, 1.0f);
  for (int u = 0; u < a.engine.num_units(); ++u)
    for (const auto& e : a.model.units()[u]->layout().entries()) {
      std::vector<int64_t> shape = e.spec.shape;
      shape[0] = e.spec.exported_rows();
      w.add_f32("transformer." + e.spec.name, shape, a.engine.unit_params(u) + e.offset);
    }
  w.add_f32("transformer.h.0.attn.bias", {1, 1, 8, 8}, mask.data());
  w.add_f32("lm_head.weight", {61, 16}, a.engine.unit_params(0));
  w.write(path.string());
  load_weights(b.engine, path.string());
  const int64_t n = a.model.units()[0]->layout().numel();
  EXPECT_EQ(std::memcmp(a.engine.unit_params(0), b.engine.unit_params(0), n * 4), 0);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// stage3_gather_16bit_weights_on_model_save: the working parameters in the 16-bit compute
// dtype, bit for bit; loading that file into an fp32 engine widens them exactly.
TEST(WeightsIo, SixteenBitExportHoldsTheWorkingParameters) {
  const fs::path path = temp_file("working_bf16.safetensors");
  Fixture a(kSmall, 1, DType::kBF16), b(kSmall, 2);
  save_weights(a.engine, path.string(), WeightsDtype::kWorking);
  SafetensorsReader reader = SafetensorsReader::open(path.string());
  ASSERT_NE(reader.find("h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(reader.find("h.0.attn.c_attn.weight")->dtype, "BF16");
  load_weights(b.engine, path.string());
  for (int u = 0; u < a.engine.num_units(); ++u) {
    const int64_t n = a.model.units()[u]->layout().numel();
    std::vector<uint16_t> working(n);
    a.engine.read_unit_working(u, working.data());
    std::vector<float> master(n);
    a.engine.read_unit_params(u, master.data());
    int64_t differ_from_master = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = uint32_t{working[i]} << 16;
      float widened;
      std::memcpy(&widened, &bits, 4);
      ASSERT_EQ(widened, b.engine.unit_params(u)[i]) << "unit " << u << " element " << i;
      differ_from_master += widened != master[i];
    }
    EXPECT_GT(differ_from_master, 0) << "unit " << u << ": the file should hold rounded values";
  }
}

}  // namespace
}  // namespace zt
