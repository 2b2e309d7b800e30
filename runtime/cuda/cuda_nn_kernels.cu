// CudaKernels, the neural-network ops: matmul (cuBLAS), embedding, layer norm, attention,
// softmax cross-entropy. PLACEHOLDER until implemented: every entry throws.
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

void CudaKernels::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int64_t K, int64_t N, WeightLayout layout) {
  ZT_CUDA_ASSERT(false, "CudaKernels::matmul_forward: not implemented yet");
}

void CudaKernels::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int64_t M, int64_t K, int64_t N, WeightLayout layout) {
  ZT_CUDA_ASSERT(false, "CudaKernels::matmul_backward: not implemented yet");
}

void CudaKernels::embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T, int64_t C) {
  ZT_CUDA_ASSERT(false, "CudaKernels::embedding_forward: not implemented yet");
}

void CudaKernels::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  ZT_CUDA_ASSERT(false, "CudaKernels::embedding_backward: not implemented yet");
}

void CudaKernels::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C) {
  ZT_CUDA_ASSERT(false, "CudaKernels::layernorm_forward: not implemented yet");
}

void CudaKernels::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  ZT_CUDA_ASSERT(false, "CudaKernels::layernorm_backward: not implemented yet");
}

void CudaKernels::attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  ZT_CUDA_ASSERT(false, "CudaKernels::attention_forward: not implemented yet");
}

void CudaKernels::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  ZT_CUDA_ASSERT(false, "CudaKernels::attention_backward: not implemented yet");
}

void CudaKernels::softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp, float dloss) {
  ZT_CUDA_ASSERT(false, "CudaKernels::softmax_cross_entropy: not implemented yet");
}

}  // namespace zt
