// LoRA adapters on devices the host cannot address (run under mpirun -np 2 and -np 4 with the
// rest of the suite, each process alone here): a tiny Llama with adapters on every linear layer
// and dropout trains on the scrambled test device (tests/mpi/scrambled_device.h) to the CPU
// device's bits, at stages 0 and 3, in fp32 and bf16: the adapters' kernels (add_columns,
// dropout) and the frozen units' null gradients keep device memory discipline. On a GPU (skipped
// without one) the same run on the CUDA back end tracks the CPU's losses within 1e-4 relative in
// fp32 (cuBLAS and oneDNN add in other orders).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/self_communicator.h"
#include "model_zoo/llama.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device_factory.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/mpi/scrambled_device.h"
#include "tests/mpi/zero_test_util.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace zero_test;

struct LoraRun {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<float>> params;
};

LoraRun train(Device& device, int stage, DType dtype) {
  Tuning tuning;
  tuning.lora.enabled = true;
  tuning.lora.r = 4;
  tuning.lora.alpha = 8.0f;
  tuning.lora.dropout = 0.1f;
  tuning.lora.target_modules = {"all-linear"};
  Llama model(tiny_llama_config(kModel.vocab_size, int(kT), true, true, false), tuning);
  SelfCommunicator comm(device);
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.optimizer.weight_decay = 0.1f;
  o.gradient_clipping = 0.5f;
  o.policy = ZeroPolicy::for_stage(stage);
  o.persistence_threshold = 0;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = dtype;
  o.precision.master_weights = true;
  for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  Engine engine(device, comm, model, o);
  LoraRun r;
  for (int s = 0; s < 3; ++s) {
    const GlobalBatch global(s, 0, 1);
    const Batch batch = global.rows(0, kB);
    const StepResult step = engine.train_step({&batch, 1}, 1e-2f);
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
  }
  for (int u = 0; u < engine.num_units(); ++u) {
    r.params.emplace_back(model.units()[u]->layout().numel());
    engine.read_unit_params(u, r.params.back().data());
  }
  return r;
}

TEST(DeviceEngine, LoraOnTheScrambledDeviceGivesTheCpuBits) {
  for (int stage : {0, 3})
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " " << dtype_name(dtype));
      CpuDevice cpu;
      const LoraRun expected = train(cpu, stage, dtype);
      ScrambledDevice device;
      const LoraRun got = train(device, stage, dtype);
      EXPECT_EQ(got.losses, expected.losses);
      EXPECT_EQ(got.grad_norms, expected.grad_norms);
      ASSERT_EQ(got.params.size(), expected.params.size());
      for (size_t u = 0; u < got.params.size(); ++u)
        EXPECT_EQ(std::memcmp(got.params[u].data(), expected.params[u].data(),
                              got.params[u].size() * sizeof(float)),
                  0)
            << "unit " << u;
      EXPECT_GT(device.kernel_calls(), 0);
    }
}

TEST(DeviceEngine, LoraOnTheGpuTracksTheCpu) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "needs a GPU; " << cuda_device_count() << " found";
  CpuDevice cpu;
  const LoraRun expected = train(cpu, 3, DType::kF32);
  const std::unique_ptr<Device> gpu = make_device(DeviceKind::kCuda, 0);
  const LoraRun got = train(*gpu, 3, DType::kF32);
  ASSERT_EQ(got.losses.size(), expected.losses.size());
  for (size_t s = 0; s < got.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], expected.losses[s], 1e-4 * std::abs(expected.losses[s]))
        << "step " << s;
}

}  // namespace
}  // namespace zt
