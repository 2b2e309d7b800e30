// AttentionPath: which attention a 16-bit CUDA table runs (docs/cuda.md, "Attention through
// cuDNN"): cuDNN's fused SDPA where a call is eligible (auto), always the materialised T×T
// kernels of cuda_attention_kernels.cu (reference), or cuDNN or an error naming why (cudnn: for
// tests that must know cuDNN ran). fp32 tables always run the reference. The default comes from
// the environment variable ZT_CUDA_ATTENTION=auto|reference|cudnn, read once per process.
// Free of CUDA headers, so tests written against Device reach the setting through
// set_cuda_attention_path.
#pragma once

namespace zt {

class Device;

enum class AttentionPath { kAuto, kReference, kCudnn };

// ZT_CUDA_ATTENTION, parsed on the first call and remembered (unset or empty: auto); any other
// value is an input error naming it.
AttentionPath attention_path_from_env();
// Sets the path of every table of `device`, a CUDA device (CudaKernels::set_attention_path;
// the tables share it). Call it before a forward, not between a forward and its backward: att
// holds what the forward's path left there.
void set_cuda_attention_path(Device& device, AttentionPath path);

}  // namespace zt
