// CudaKernels, attention through cuDNN's fused SDPA (cudnn_attention.h): the path setting, the
// choice per call, and the data around the plans. gqa_attention_forward / _backward
// (cuda_matmul_attention.cu) call these first and run the materialised T×T reference
// (cuda_attention_kernels.cu) when they return false. One kernel of its own, add_act's (the
// accumulation); the other copies are `cast`.
//
// Who runs what. fp32 tables: always the reference (unchanged bits). 16-bit tables: the path
// (AttentionPath): reference; auto, cuDNN when CudnnAttention::refusal is empty for the call's
// key and att can hold the record (fp32, 16-byte aligned), else the reference (the reason printed
// once per key); cudnn, cuDNN or an error naming why. A key's decision covers its forward and its
// backward (both plans are built on its first call), so a backward reads att as its forward
// wrote it.
//
// att's size (attention_record, asked by the layer before it allocates att, which builds the
// key's plans): a planned key keeps cuDNN's record, the statistics (B,NH,T) fp32 and O as 16-bit
// (B,T,NH·hd) after them, 16-byte aligned (kept as written: an fp32 buffer, not stored in the
// activation dtype); any other key the (B,NH,T,T) probabilities. So a planned key whose run then
// fails (or whose att cannot hold the record) cannot fall back into att: its reference runs on a
// scratch (B,NH,T,T) for the probabilities, and its backward recomputes them there first.
//
// Data (a call on the cuDNN path; every scratch below is tracked, kWorkspace, freed when the
// entry returns, its next user enqueued on this stream after cuDNN's kernels). An act-typed
// 16-byte aligned input is handed to cuDNN in place; any other (an fp32 array holding act
// values, a view less aligned) is cast into an act-typed scratch first (act_input; exact).
//   forward:  the plan reads qkv and writes the statistics into att and O after them; O is
//             cast into out (an act-typed out: a plain copy; fp32: widened, exact). O is written
//             into the record rather than into out because the backward reads it from there and the
//             record is 16-byte aligned where out need not be: one copy either way.
//   backward: the plan reads qkv, dout, att's statistics and O and writes dQ, dK, dV as a
//             16-bit (B,T,R) scratch laid out as qkv (the entry accumulates, cuDNN writes);
//             dqkv = act(dqkv + it) in fp32, rounded once and stored in dqkv's dtype in the
//             same pass (add_act), as the reference's GEMMs accumulate into dqkv and round it.
// A failed run refuses the key from then on (cudnn_attention.h). The reference fallback stages
// 16-bit operands as fp32 (ActStage).
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

void CudaKernels::set_attention_path(AttentionPath path) { impl_->attention_path = path; }

namespace {

// dst (stored as D, holding act values) = act(dst + b): the sum in fp32, one rounding to act.
template <class D, class B>
__global__ void add_act_kernel(typename D::Elem* dst, const typename B::Elem* b, int64_t n,
                               DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    dst[i] = D::from_fp32(round_to_act(__fadd_rn(D::to_fp32(dst[i]), B::to_fp32(b[i])), act));
  }
}

// The 16-bit O in att, after the statistics (cudnn_stats_floats). Both must be 16-byte aligned (the
// plans promise cuDNN that of every tensor): att's alignment is checked per call.
void* output_in_att(const float* att, int64_t B, int64_t T, int64_t NH) {
  return const_cast<float*>(att) + cudnn_stats_floats(B, T, NH);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Why att cannot hold cuDNN's record, "" when it can: fp32 (the statistics are), 16-byte
// aligned (the plans promise cuDNN that of every tensor).
std::string record_refusal(ConstOperand att) {
  if (att.dtype != DType::kF32) return "att is not fp32, as cuDNN's record is";
  if (!aligned16(att.data)) return "att is not 16-byte aligned";
  return "";
}

// A scratch of at least `bytes` bytes (fp32 elements).
int64_t floats_for(size_t bytes) { return int64_t((bytes + sizeof(float) - 1) / sizeof(float)); }

}  // namespace

void CudaKernels::add_act(Operand dst, const void* b, DType b_type, int64_t n) {
  if (n <= 0) return;
  visit_storage(dst.dtype, [&](auto dst_tag) {
    visit_storage(b_type, [&](auto b_tag) {
      using D = decltype(dst_tag);
      using B = decltype(b_tag);
      add_act_kernel<D, B><<<blocks_for(n, kElementThreads), kElementThreads, 0, stream_>>>(
          elems<D>(dst), static_cast<const typename B::Elem*>(b), n, act_);
    });
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

bool CudaKernels::cudnn_attention_forward(Operand out, Operand att, ConstOperand qkv, int64_t B,
                                          int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                          const int32_t* positions, int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  CudnnAttention& cudnn = cudnn_attention();
  const CudnnAttentionKey key =
      cudnn_attention_key(B, T, NH, NKV, hd, act_, positions != nullptr, window);
  std::string why = cudnn.refusal(key);
  if (why.empty()) {
    why = record_refusal(att);
    if (!why.empty()) cudnn.note_fallback(key, why);
  }
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  if (why.empty()) {
    float* record = static_cast<float*>(att.data);
    Buffer qkv_copy, workspace = scratch(floats_for(cudnn.forward_workspace_bytes(key)));
    const void* qkv16 = act_input(qkv, B * T * R, qkv_copy, 16);
    void* out16 = output_in_att(record, B, T, NH);
    why = cudnn.forward(key, qkv16, out16, record, workspace.data());
    if (why.empty()) {
      cast(out.data, out.dtype, out16, act_, B * T * HD);
      return true;
    }
  }
  if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
  if (!cudnn.planned(key)) return false;  // att holds (B,NH,T,T): the reference writes it
  // The reference on fp32 arrays (16-bit operands staged), its probabilities on a scratch: att
  // may be cuDNN's record alone.
  ActStage stage(*this);
  float* out32 = stage.out(out, B * T * HD);
  const float* qkv32 = stage.in(qkv, B * T * R);
  Buffer probs = scratch(B * NH * T * T);
  reference_attention_forward(out32, probs.as<float>(), qkv32, B, T, NH, NKV, hd, positions,
                              window);
  return true;
}

bool CudaKernels::cudnn_attention_backward(Operand dqkv, ConstOperand dout, ConstOperand qkv,
                                           ConstOperand att, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hd, const int32_t* positions,
                                           int64_t window) {
  const AttentionPath path = impl_->attention_path;
  if (act_ == DType::kF32 || path == AttentionPath::kReference) return false;
  CudnnAttention& cudnn = cudnn_attention();
  const CudnnAttentionKey key =
      cudnn_attention_key(B, T, NH, NKV, hd, act_, positions != nullptr, window);
  // The forward's decision for this key and this att (the same rules, remembered).
  std::string why = cudnn.refusal(key);
  if (why.empty()) why = record_refusal(att);
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  if (why.empty()) {
    const float* record = static_cast<const float*>(att.data);
    Buffer qkv_copy, dout_copy, dqkv_act = scratch(B * T * R, act_);
    Buffer workspace = scratch(floats_for(cudnn.backward_workspace_bytes(key)));
    const void* qkv16 = act_input(qkv, B * T * R, qkv_copy, 16);
    const void* dout16 = act_input(dout, B * T * HD, dout_copy, 16);
    why = cudnn.backward(key, qkv16, output_in_att(record, B, T, NH), dout16, record,
                         dqkv_act.data(), workspace.data());
    if (why.empty()) {
      add_act(dqkv, dqkv_act.data(), act_, B * T * R);
      return true;
    }
  }
  if (path == AttentionPath::kCudnn) throw_cudnn_attention_refused(key, why);
  if (!cudnn.planned(key)) return false;  // att holds the probabilities
  // att holds cuDNN's record (or less than the probabilities): recompute them on a scratch. The
  // reference on fp32 arrays (16-bit operands staged).
  ActStage stage(*this);
  float* dqkv32 = stage.inout(dqkv, B * T * R);
  const float* dout32 = stage.in(dout, B * T * HD);
  const float* qkv32 = stage.in(qkv, B * T * R);
  Buffer probs = scratch(B * NH * T * T), out_again = scratch(B * T * HD);
  reference_attention_forward(out_again.as<float>(), probs.as<float>(), qkv32, B, T, NH, NKV, hd,
                              positions, window);
  reference_attention_backward(dqkv32, dout32, qkv32, probs.as<float>(), B, T, NH, NKV, hd,
                               positions, window);
  return true;
}

}  // namespace zt
