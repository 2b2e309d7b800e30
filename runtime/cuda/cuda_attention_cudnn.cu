// CudaKernels, attention through cuDNN's fused SDPA (cudnn_attention.h): the path setting, the
// choice per call, and the data around the plans. gqa_attention_forward / _backward
// (cuda_matmul_attention.cu) call these first and run the materialised T×T reference when they
// return false. One kernel of its own, add_act's (the accumulation); the 16-bit copies are
// `cast`.
//
// Who runs what. fp32 tables: always the reference (unchanged bits). 16-bit tables: the path
// (AttentionPath): reference; auto, cuDNN when CudnnAttention::refusal is empty for the call's
// key, else the reference (the reason printed once per key); cudnn, cuDNN or an error naming why.
// A key's decision covers its forward and its backward (both plans are built on its first
// call), so a backward reads att as its forward wrote it.
//
// att's size (attention_record, asked by the layer before it allocates att, which builds the
// key's plans): a planned key keeps cuDNN's record, the statistics (B,NH,T) fp32 and O as 16-bit
// (B,T,NH·hd) after them, 16-byte aligned (kept as written: not packed with the activations); any
// other key the (B,NH,T,T) probabilities. So a planned key whose run then fails (or whose att is
// not aligned) cannot fall back into att: its reference runs on a scratch (B,NH,T,T) for the
// probabilities, and its backward recomputes them there first.
//
// Data (a call on the cuDNN path; every buffer below is tracked scratch, kWorkspace, freed when
// the entry returns, its next user enqueued on this stream after cuDNN's kernels):
//   forward:  qkv (fp32 holding act values) narrowed exactly to a 16-bit (B,T,R) scratch; the
//             plan writes the statistics into att and O after them; O is widened (exactly) into
//             out.
//   backward: qkv and dout narrowed to 16-bit; the plan reads att's statistics and O and writes
//             dQ, dK, dV as a 16-bit (B,T,R) scratch laid out as qkv; dqkv += it in fp32,
//             rounded once to the act dtype in the same pass (add_act), as the reference's
//             GEMMs accumulate into dqkv and round it.
// A failed run refuses the key from then on (cudnn_attention.h).
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

void CudaKernels::set_attention_path(AttentionPath path) { impl_->attention_path = path; }

namespace {

// dst (fp32 holding act values) = act(dst + float(b)): the sum in fp32, one rounding to act.
template <class B>
__global__ void add_act_kernel(float* dst, const typename B::Elem* b, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) dst[i] = round_to_act(__fadd_rn(dst[i], B::to_fp32(b[i])), act);
}

// The 16-bit O in att, after the statistics (cudnn_stats_floats). Both must be 16-byte aligned (the
// plans promise cuDNN that of every tensor): att's alignment is checked per call.
void* output_in_att(const float* att, int64_t B, int64_t T, int64_t NH) {
  return const_cast<float*>(att) + cudnn_stats_floats(B, T, NH);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A scratch of at least `bytes` bytes (fp32 elements).
int64_t floats_for(size_t bytes) { return int64_t((bytes + sizeof(float) - 1) / sizeof(float)); }

}  // namespace

void CudaKernels::add_act(float* dst, const void* b, DType b_type, int64_t n) {
  if (n <= 0) return;
  visit_storage(b_type, [&](auto b_tag) {
    using B = decltype(b_tag);
    add_act_kernel<B><<<blocks_for(n, kElementThreads), kElementThreads, 0, stream_>>>(
        dst, static_cast<const typename B::Elem*>(b), n, act_);
  });
  check_launch();
}

CudnnAttention& CudaKernels::cudnn_attention() {
  if (!impl_->cudnn_attention) impl_->cudnn_attention = std::make_unique<CudnnAttention>(stream_);
  return *impl_->cudnn_attention;
}

AttentionRecord CudaKernels::attention_record(int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                              int64_t hd, bool packed, int64_t window) {
  const AttentionRecord probabilities{B * NH * T * T, true};
  if (act_ == DType::kF32 || impl_->attention_path == AttentionPath::kReference)
    return probabilities;
  const CudnnAttentionKey key = cudnn_attention_key(B, T, NH, NKV, hd, act_, packed, window);
  if (!cudnn_attention().refusal(key).empty()) return probabilities;
  return {cudnn_record_floats(key), false};
}

bool CudaKernels::cudnn_attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                          int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                          const int32_t* positions, int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  CudnnAttention& cudnn = cudnn_attention();
  const CudnnAttentionKey key =
      cudnn_attention_key(B, T, NH, NKV, hd, act_, positions != nullptr, window);
  std::string why = cudnn.refusal(key);
  if (why.empty() && !aligned16(att)) {
    why = "att is not 16-byte aligned";
    cudnn.note_fallback(key, why);
  }
  if (why.empty()) {
    const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
    Buffer qkv_act, workspace = scratch(floats_for(cudnn.forward_workspace_bytes(key)));
    const void* qkv16 = narrowed_to_act(qkv, B * T * R, qkv_act);
    void* out16 = output_in_att(att, B, T, NH);
    why = cudnn.forward(key, qkv16, out16, att, workspace.data());
    if (why.empty()) {
      cast(out, DType::kF32, out16, act_, B * T * HD);
      return true;
    }
  }
  if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
  if (!cudnn.planned(key)) return false;   // att holds (B,NH,T,T): the reference writes it
  Buffer probs = scratch(B * NH * T * T);  // att may be cuDNN's record alone
  reference_attention_forward(out, probs.as<float>(), qkv, B, T, NH, NKV, hd, positions, window);
  return true;
}

bool CudaKernels::cudnn_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                           const float* att, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hd, const int32_t* positions,
                                           int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  CudnnAttention& cudnn = cudnn_attention();
  const CudnnAttentionKey key =
      cudnn_attention_key(B, T, NH, NKV, hd, act_, positions != nullptr, window);
  // The forward's decision for this key and this att (the same rules, remembered).
  std::string why = cudnn.refusal(key);
  if (why.empty() && !aligned16(att)) why = "att is not 16-byte aligned";
  if (why.empty()) {
    const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
    Buffer qkv_act, dout_act, dqkv_act = scratch(B * T * R, act_);
    Buffer workspace = scratch(floats_for(cudnn.backward_workspace_bytes(key)));
    const void* qkv16 = narrowed_to_act(qkv, B * T * R, qkv_act);
    const void* dout16 = narrowed_to_act(dout, B * T * HD, dout_act);
    why = cudnn.backward(key, qkv16, output_in_att(att, B, T, NH), dout16, att, dqkv_act.data(),
                         workspace.data());
    if (why.empty()) {
      add_act(dqkv, dqkv_act.data(), act_, B * T * R);
      return true;
    }
  }
  if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
  if (!cudnn.planned(key)) return false;  // att holds the probabilities
  // att holds cuDNN's record (or less than the probabilities): recompute them on a scratch.
  Buffer probs = scratch(B * NH * T * T), out_again = scratch(B * T * NH * hd);
  reference_attention_forward(out_again.as<float>(), probs.as<float>(), qkv, B, T, NH, NKV, hd,
                              positions, window);
  reference_attention_backward(dqkv, dout, qkv, probs.as<float>(), B, T, NH, NKV, hd, positions,
                               window);
  return true;
}

}  // namespace zt
