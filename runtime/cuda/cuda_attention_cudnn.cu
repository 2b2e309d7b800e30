// CudaKernels, attention through cuDNN's fused SDPA (cudnn_attention.h): the path setting, the
// choice per call, and the data around the plans. gqa_attention_forward / _backward
// (cuda_matmul_attention.cu) call these first and run the materialised T×T reference when they
// return false. Host code (nvcc for cuda_kernels_impl.h); no kernels of its own: the 16-bit
// copies are `cast`, the accumulation is `add` then `round_act`.
//
// Who runs what. fp32 tables: always the reference (unchanged bits). 16-bit tables: the path
// (AttentionPath): reference; auto, cuDNN when CudnnAttention::refusal is empty for the call's
// key, else the reference (the reason printed once per key); cudnn, cuDNN or an error naming why.
// A key's decision covers its forward and its backward (both plans are built on its first
// call), so a backward reads att as its forward wrote it.
//
// Data (a call on the cuDNN path; every buffer below is tracked scratch, kWorkspace, freed when
// the entry returns, its next user enqueued on this stream after cuDNN's kernels):
//   forward:  qkv (fp32 holding act values) narrowed exactly to a 16-bit (B,T,R) scratch; the
//             plan writes the softmax statistics (B,NH,T) fp32 into att[0, B·NH·T) and O as
//             16-bit (B,T,NH·hd) right after them in att (att holds B·NH·T·T floats; the key's
//             rule T >= 1 + hd/2 leaves room); O is widened (exactly) into out.
//   backward: qkv and dout narrowed to 16-bit; the plan reads att's statistics and O and writes
//             dQ, dK, dV as a 16-bit (B,T,R) scratch laid out as qkv; dqkv += it in fp32
//             (`add`), then rounded once to the act dtype (round_act), as the reference's
//             GEMMs accumulate into dqkv and round it.
// If a run fails (cuDNN's status), the key is refused from then on: a failed forward is
// redone by the reference, which writes every output; a failed backward redoes the reference
// forward into att (and a scratch out) and then the reference backward.
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

void CudaKernels::set_attention_path(AttentionPath path) { impl_->attention_path = path; }

namespace {

// The 16-bit O in att, after the statistics (B·NH·T floats). Both parts must be 16-byte
// aligned (the plans promise cuDNN that of every tensor): checked per call.
void* output_in_att(const float* att, int64_t B, int64_t T, int64_t NH) {
  return const_cast<float*>(att) + B * NH * T;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A scratch of at least `bytes` bytes (fp32 elements).
int64_t floats_for(size_t bytes) { return int64_t((bytes + sizeof(float) - 1) / sizeof(float)); }

}  // namespace

bool CudaKernels::cudnn_attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                          int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                          const int32_t* positions, int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  if (!impl_->cudnn_attention) impl_->cudnn_attention = std::make_unique<CudnnAttention>(stream_);
  CudnnAttention& cudnn = *impl_->cudnn_attention;
  const CudnnAttentionKey key{B, T, NH, NKV, hd, act_, positions != nullptr, window};
  std::string why = cudnn.refusal(key);
  if (why.empty() && !(aligned16(att) && aligned16(output_in_att(att, B, T, NH)))) {
    why = "att is not 16-byte aligned (nor its part after the statistics)";
    cudnn.note_fallback(key, why);
  }
  if (!why.empty()) {
    if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
    return false;
  }
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  Buffer qkv_act, workspace = scratch(floats_for(cudnn.forward_workspace_bytes(key)));
  const void* qkv16 = narrowed_to_act(qkv, B * T * R, qkv_act);
  void* out16 = output_in_att(att, B, T, NH);
  why = cudnn.forward(key, qkv16, out16, att, workspace.data());
  if (!why.empty()) {
    if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
    return false;  // the reference writes out and att whole
  }
  cast(out, DType::kF32, out16, act_, B * T * HD);
  return true;
}

bool CudaKernels::cudnn_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                           const float* att, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hd, const int32_t* positions,
                                           int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  if (!impl_->cudnn_attention) impl_->cudnn_attention = std::make_unique<CudnnAttention>(stream_);
  CudnnAttention& cudnn = *impl_->cudnn_attention;
  const CudnnAttentionKey key{B, T, NH, NKV, hd, act_, positions != nullptr, window};
  // The forward's decision for this key and this att (the same rules, remembered).
  std::string why = cudnn.refusal(key);
  if (why.empty() && !(aligned16(att) && aligned16(output_in_att(att, B, T, NH))))
    why = "att is not 16-byte aligned (nor its part after the statistics)";
  if (!why.empty()) {
    if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
    return false;
  }
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  Buffer qkv_act, dout_act, dqkv_act = scratch(B * T * R, act_);
  Buffer workspace = scratch(floats_for(cudnn.backward_workspace_bytes(key)));
  const void* qkv16 = narrowed_to_act(qkv, B * T * R, qkv_act);
  const void* dout16 = narrowed_to_act(dout, B * T * HD, dout_act);
  why = cudnn.backward(key, qkv16, output_in_att(att, B, T, NH), dout16, att, dqkv_act.data(),
                       workspace.data());
  if (!why.empty()) {
    if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
    // att holds the cuDNN forward's statistics: redo the forward the reference way first.
    Buffer out_again = scratch(B * T * HD);
    float* probs = const_cast<float*>(att);  // the caller's att, rewritten as its forward would
    reference_attention_forward(out_again.as<float>(), probs, qkv, B, T, NH, NKV, hd, positions,
                                window);
    reference_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions, window);
    return true;
  }
  add(dqkv, DType::kF32, dqkv, DType::kF32, dqkv_act.data(), act_, B * T * R);
  round_act(dqkv, B * T * R);
  return true;
}

}  // namespace zt
