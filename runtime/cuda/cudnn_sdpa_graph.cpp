// The causal SDPA operation graphs of cudnn_attention.h, their plans and their execution, on the
// cuDNN backend API. Compiled only with cuDNN. Each graph mirrors the composite SDPA that
// cuDNN 9.14's fused engines recognise (the lowering cudnn-frontend does for that version):
// the order of the operations, which tensors are virtual, the fp32 intermediates, and the
// probabilities and dS typed as the 16-bit I/O where they feed a GEMM.
#if ZT_HAVE_CUDNN  // else empty: the build found no cuDNN

#include "runtime/cuda/cudnn_sdpa_graph.h"

#include <cmath>
#include <limits>

#include "runtime/status.h"

namespace zt {

std::string cudnn_status_text(const char* call, cudnnStatus_t status) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  return fmt::format("{}: {}{}{}", call, cudnnGetErrorString(status), last[0] ? ": " : "", last);
}

namespace {

using Dims = std::vector<int64_t>;
using Tensor = int64_t;  // a tensor's uid: its index among the graph's tensors, plus one

cudnnDataType_t io_type(DType t) {
  return t == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

// An operation graph under construction. Every descriptor is kept until the plan is dropped.
class Graph {
 public:
  Tensor tensor(cudnnDataType_t type, Dims dims, Dims strides, bool is_virtual,
                bool by_value = false) {
    CudnnDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t uid = int64_t(tensors_.size()) + 1, alignment = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
    d.set_array(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims);
    d.set_array(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides);
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment);
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
    d.finalize();
    tensors_.push_back(std::move(d));
    dims_.push_back(std::move(dims));
    strides_.push_back(std::move(strides));
    return uid;
  }
  Tensor virtual_tensor(Dims dims, Dims strides, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(type, std::move(dims), std::move(strides), true);
  }
  // A virtual tensor shaped as `other`.
  Tensor like(Tensor other, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return virtual_tensor(dims_[size_t(other - 1)], strides_[size_t(other - 1)], type);
  }
  // An fp32 scalar passed by value (a host pointer in the variant pack).
  Tensor scalar() { return tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  // y = mode(x[, b[, t]]) in compute type `math`; `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, Tensor x, Tensor y, Tensor b = 0, Tensor t = 0,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    CudnnDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
    pw.finalize();
    CudnnDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x));
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(b));
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(t));
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y));
    op.finalize();
    parts_.push_back(std::move(pw));
    ops_.push_back(std::move(op));
  }
  // y = x summed (ADD) or maximised (MAX) over the dimensions where y is smaller than x.
  void reduction(cudnnReduceTensorOp_t mode, Tensor x, Tensor y) {
    CudnnDescriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode);
    red.finalize();
    CudnnDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x));
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y));
    op.finalize();
    parts_.push_back(std::move(red));
    ops_.push_back(std::move(op));
  }
  // c = a · b on the last two dimensions, batched over the first two (heads broadcast: GQA).
  void matmul(Tensor a, Tensor b, Tensor c) {
    CudnnDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    mm.finalize();
    CudnnDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c));
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    op.finalize();
    parts_.push_back(std::move(mm));
    ops_.push_back(std::move(op));
  }
  // y = x seen through y's dimensions and strides (a transposed view).
  void reshape(Tensor x, Tensor y) {
    CudnnDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x));
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y));
    op.finalize();
    ops_.push_back(std::move(op));
  }
  // `scores` (B,H,Tq,Tk) with -inf where the key's index exceeds the query's: kept where
  // row >= column (causal, top-left aligned), BINARY_SELECT being y = t ? x : b. As
  // cudnn-frontend's causal mask: GEN_INDEX in the graph's fp32 compute type, INT32 out.
  Tensor causal_select(Tensor scores, Tensor neg_inf) {
    const Tensor row = like(scores, CUDNN_DATA_INT32), col = like(scores, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, 0, 0, CUDNN_DATA_FLOAT, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, 0, 0, CUDNN_DATA_FLOAT, 3);
    const Tensor keep = like(scores, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, 0, CUDNN_DATA_BOOLEAN);
    const Tensor masked = like(scores);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, masked, neg_inf, keep);
    return masked;
  }

  // The finalized operation graph, then the first engine config of the heuristics (mode A, then
  // FALLBACK) whose plan finalizes, skipping non-deterministic engines; into `plan`.
  void build(cudnnHandle_t handle, SdpaPlan& plan);

 private:
  const CudnnDescriptor& desc(Tensor t) const { return tensors_[size_t(t - 1)]; }

  std::vector<CudnnDescriptor> tensors_;  // by uid - 1
  std::vector<Dims> dims_, strides_;
  std::vector<CudnnDescriptor> parts_;  // pointwise, reduction and matmul descriptors
  std::vector<CudnnDescriptor> ops_;
};

// Whether the engine of `config` says it is non-deterministic (CUDNN_NUMERICAL_NOTE_*).
bool nondeterministic(const CudnnDescriptor& config) {
  CudnnDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  ZT_CUDNN_TRY(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  ZT_CUDNN_TRY(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                        CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                        &n, notes));
  for (int64_t i = 0; i < n; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  return false;
}

void Graph::build(cudnnHandle_t handle, SdpaPlan& plan) {
  CudnnDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const CudnnDescriptor& op : ops_) ops.push_back(op.get());
  // Deprecated in 9.x's headers and optional since 9.8, but cudnn-frontend 1.15 still sets it
  // on every graph it builds for 9.14: the heuristics and plans read the device from it.
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  graph.set_array(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops);
  graph.finalize();
  std::string last = "the heuristics returned no engine config";
  int skipped = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    try {
      CudnnDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
      heur.finalize();
      int64_t count = 0;
      ZT_CUDNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
      std::vector<CudnnDescriptor> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(configs.back().get());
      }
      int64_t got = 0;
      ZT_CUDNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                            raw.data()));
      for (int64_t i = 0; i < got && i < count; ++i) {
        try {
          if (nondeterministic(configs[size_t(i)])) {
            ++skipped;
            continue;
          }
          // No CUDNN_ATTR_EXECUTION_PLAN_HANDLE (deprecated; cudnn-frontend >= 1.13 sets it
          // only to load a serialized plan): the engine config carries the graph's handle.
          CudnnDescriptor exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          exec.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)]);
          exec.finalize();
          int64_t n = 0;
          ZT_CUDNN_TRY(cudnnBackendGetAttribute(exec.get(),
                                                CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &n, &plan.workspace_bytes));
          plan.plan.push_back(std::move(exec));
          plan.keep.push_back(std::move(configs[size_t(i)]));
          plan.keep.push_back(std::move(graph));
          for (auto* part : {&ops_, &parts_, &tensors_})
            for (CudnnDescriptor& d : *part) plan.keep.push_back(std::move(d));
          return;
        } catch (const CudnnRefusal& refusal) {
          last = refusal.reason;
        }
      }
    } catch (const CudnnRefusal& refusal) {
      last = refusal.reason;
    }
  }
  throw CudnnRefusal{
      fmt::format("no engine config gave a plan ({} non-deterministic passed over); "
                  "last: {}",
                  skipped, last)};
}

}  // namespace

SdpaPlan build_sdpa_forward(cudnnHandle_t handle, const CudnnAttentionKey& key) {
  const int64_t B = key.B, T = key.T, NH = key.NH, NKV = key.NKV, hd = key.hd;
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  const cudnnDataType_t io = io_type(key.dtype);
  const Dims scores{B, NH, T, T}, scores_strides{NH * T * T, T * T, T, 1};
  const Dims rows{B, NH, T, 1}, rows_strides{NH * T, T, 1, 1};
  Graph g;
  SdpaPlan p;
  p.q = g.tensor(io, {B, NH, T, hd}, {T * R, hd, R, 1}, false);
  p.k = g.tensor(io, {B, NKV, hd, T}, {T * R, hd, 1, R}, false);  // Kᵀ: K's last two swapped
  p.v = g.tensor(io, {B, NKV, T, hd}, {T * R, hd, R, 1}, false);
  p.o = g.tensor(io, {B, NH, T, hd}, {T * HD, hd, HD, 1}, false);
  p.stats = g.tensor(CUDNN_DATA_FLOAT, rows, rows_strides, false);
  p.scale = g.scalar();
  p.neg_inf = g.scalar();
  // Scores S = Q·Kᵀ · scale under the causal mask.
  const Tensor s = g.virtual_tensor(scores, scores_strides);
  g.matmul(p.q, p.k, s);
  const Tensor scaled = g.like(s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, p.scale);
  const Tensor masked = g.causal_select(scaled, p.neg_inf);
  // Softmax with the log-sum-exp written out: stats = max + log(Σ exp(S - max)).
  const Tensor max = g.virtual_tensor(rows, rows_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  const Tensor shifted = g.like(masked);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, shifted, max);
  const Tensor e = g.like(masked);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, e);
  const Tensor sum = g.virtual_tensor(rows, rows_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const Tensor log_sum = g.like(sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, p.stats, log_sum);
  const Tensor probs = g.like(e, io);  // the P·V GEMM's A operand: the I/O type
  g.pointwise(CUDNN_POINTWISE_DIV, e, probs, sum);
  g.matmul(probs, p.v, p.o);
  p.scale_value = 1.0f / std::sqrt(static_cast<float>(hd));  // the reference kernels' scale
  p.neg_inf_value = -std::numeric_limits<float>::infinity();
  g.build(handle, p);
  return p;
}

SdpaPlan build_sdpa_backward(cudnnHandle_t handle, const CudnnAttentionKey& key) {
  const int64_t B = key.B, T = key.T, NH = key.NH, NKV = key.NKV, hd = key.hd;
  const int64_t R = (NH + 2 * NKV) * hd, HD = NH * hd;
  const cudnnDataType_t io = io_type(key.dtype);
  const Dims scores{B, NH, T, T}, scores_strides{NH * T * T, T * T, T, 1};
  const Dims transposed{NH * T * T, T * T, 1, T};  // a (T,T) block read as its transpose
  const Dims rows{B, NH, T, 1}, rows_strides{NH * T, T, 1, 1};
  const Dims heads{B, NH, T, hd}, heads_strides{NH * T * hd, T * hd, hd, 1};
  Graph g;
  SdpaPlan p;
  p.q = g.tensor(io, {B, NH, T, hd}, {T * R, hd, R, 1}, false);
  p.k = g.tensor(io, {B, NKV, hd, T}, {T * R, hd, 1, R}, false);  // Kᵀ
  p.v = g.tensor(io, {B, NKV, hd, T}, {T * R, hd, 1, R}, false);  // Vᵀ
  p.o = g.tensor(io, {B, NH, T, hd}, {T * HD, hd, HD, 1}, false);
  p.dout = g.tensor(io, {B, NH, T, hd}, {T * HD, hd, HD, 1}, false);
  p.stats = g.tensor(CUDNN_DATA_FLOAT, rows, rows_strides, false);
  p.dq = g.tensor(io, {B, NH, T, hd}, {T * R, hd, R, 1}, false);
  p.dk = g.tensor(io, {B, NKV, T, hd}, {T * R, hd, R, 1}, false);
  p.dv = g.tensor(io, {B, NKV, T, hd}, {T * R, hd, R, 1}, false);
  p.sum = g.tensor(CUDNN_DATA_FLOAT, rows, rows_strides, false);
  p.scale = g.scalar();
  p.neg_inf = g.scalar();
  p.one = g.scalar();
  // D = rowsum(dO ∘ O), materialised in fp32 (the softmax backward's per-row term).
  const Tensor prod = g.virtual_tensor(heads, heads_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, p.dout, prod, p.o);
  const Tensor rowsum = g.virtual_tensor(rows, rows_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, p.sum, p.one);
  // P = exp(Q·Kᵀ · scale - stats) under the causal mask.
  const Tensor s = g.virtual_tensor(scores, scores_strides);
  g.matmul(p.q, p.k, s);
  const Tensor scaled = g.like(s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, p.scale);
  const Tensor centered = g.like(s);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, centered, p.stats);
  const Tensor masked = g.causal_select(centered, p.neg_inf);
  const Tensor probs = g.like(s);
  g.pointwise(CUDNN_POINTWISE_EXP, masked, probs);
  // dV = Pᵀ·dO; under GQA per query head, then summed over each key/value head's group.
  const Tensor probs_t = g.virtual_tensor(scores, transposed, io);
  g.reshape(probs, probs_t);
  const auto grouped_product = [&](Tensor a, Tensor b, Tensor out) {
    if (NH == NKV) return g.matmul(a, b, out);
    const Tensor full = g.virtual_tensor(heads, heads_strides, io);
    g.matmul(a, b, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
  };
  grouped_product(probs_t, p.dout, p.dv);
  // dS = P ∘ (dO·Vᵀ - D) · scale.
  const Tensor dp = g.virtual_tensor(scores, scores_strides);
  g.matmul(p.dout, p.v, dp);
  const Tensor dp_centered = g.like(dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_centered, p.sum);
  const Tensor dp_probs = g.like(dp);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centered, dp_probs, probs);
  const Tensor ds = g.like(dp);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_probs, ds, p.scale);
  // dK = dSᵀ·Q (grouped as dV); dQ = dS·K straight into dQ: the deterministic Hopper path.
  const Tensor ds_t = g.virtual_tensor(scores, transposed, io);
  g.reshape(ds, ds_t);
  grouped_product(ds_t, p.q, p.dk);
  const Tensor k_rows = g.virtual_tensor({B, NKV, T, hd}, {T * R, hd, R, 1});
  g.reshape(p.k, k_rows);
  g.matmul(ds, k_rows, p.dq);
  p.scale_value = 1.0f / std::sqrt(static_cast<float>(hd));
  p.neg_inf_value = -std::numeric_limits<float>::infinity();
  p.one_value = 1.0f;
  g.build(handle, p);
  return p;
}

std::string run_sdpa_plan(cudnnHandle_t handle, const SdpaPlan& plan,
                          std::vector<std::pair<int64_t, void*>> bindings, void* workspace) {
  // cuDNN reads the by-value scalars through these host pointers during the call.
  float scale = plan.scale_value, neg_inf = plan.neg_inf_value, one = plan.one_value;
  if (plan.scale) bindings.emplace_back(plan.scale, &scale);
  if (plan.neg_inf) bindings.emplace_back(plan.neg_inf, &neg_inf);
  if (plan.one) bindings.emplace_back(plan.one, &one);
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, pointer] : bindings) {
    uids.push_back(uid);
    pointers.push_back(pointer);
  }
  try {
    CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set_array(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids);
    pack.set_array(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers);
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
    pack.finalize();
    ZT_CUDNN_TRY(cudnnBackendExecute(handle, plan.plan.front().get(), pack.get()));
  } catch (const CudnnRefusal& refusal) {
    return refusal.reason;
  }
  return "";
}

}  // namespace zt

#endif  // ZT_HAVE_CUDNN
