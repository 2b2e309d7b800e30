// LtGemm: plan creation (descriptors, layouts, heuristic) and the call (cuda_lt_gemm.h).
#include "runtime/cuda/cuda_lt_gemm.h"

#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/status.h"

#define ZT_LT_CHECK(call)                                                                   \
  do {                                                                                      \
    const cublasStatus_t zt_lt_status_ = (call);                                            \
    if (zt_lt_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::zt::throw_cublas_error(#call, static_cast<int>(zt_lt_status_), __FILE__, __LINE__); \
  } while (0)

namespace zt {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
  }
  throw_internal("LtGemm: unknown element type");
}

std::string describe(const LtGemmKey& k) {
  return fmt::format(
      "D ({},{}) {} = op{}(A) {} · op{}(B) {}, k {}, lda {} ldb {} ldd {}, {}{}, alignments A {} "
      "B {} D {} bias {}",
      k.m, k.n, dtype_name(k.cd), k.trans_a ? "T" : "N", dtype_name(k.ab), k.trans_b ? "T" : "N",
      dtype_name(k.ab), k.k, k.lda, k.ldb, k.ldd, k.tf32 ? "TF32" : "fp32 compute",
      k.bias ? ", bias epilogue" : "", k.align_a, k.align_b, k.align_d, k.align_bias);
}

void check_int(int64_t v, const LtGemmKey& key) {
  if (v < 1 || v > INT32_MAX)
    throw_internal(fmt::format("LtGemm: size {} out of cuBLASLt's range in {}", v, describe(key)));
}

// Sets attribute `attr` of a descriptor to `value` (its type as the attribute's documentation
// gives it).
template <class T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  ZT_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <class T>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
         const T& value) {
  ZT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

LtGemm::LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
}

void LtGemm::destroy(Plan& plan) noexcept {
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.d) cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.op) cublasLtMatmulDescDestroy(plan.op);
  plan = Plan{};
}

size_t LtGemm::plans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_.size();
}

LtGemm::Plan& LtGemm::plan_for(const LtGemmKey& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldd}) check_int(v, key);
  if (key.tf32 && key.ab != DType::kF32)
    throw_internal(fmt::format("LtGemm: TF32 asked for 16-bit operands in {}", describe(key)));
  // Stored (column-major) extents: op(A) is (m,k), so A is (m,k) or, transposed, (k,m).
  const int64_t a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  const int64_t b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  if (key.lda < a_rows || key.ldb < b_rows || key.ldd < key.m)
    throw_internal(
        fmt::format("LtGemm: a leading dimension is below its rows in {}", describe(key)));

  Plan plan;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    const cublasComputeType_t compute =
        key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    ZT_LT_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, CUDA_R_32F));
    set(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    if (key.bias) {
      set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
      // The bias is typed as D (cuBLASLt's default outside fp8 and int8), said explicitly.
      set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(cuda_type(key.cd)));
    }
    ZT_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.a, cuda_type(key.ab), uint64_t(a_rows),
                                           uint64_t(a_cols), key.lda));
    ZT_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.b, cuda_type(key.ab), uint64_t(b_rows),
                                           uint64_t(b_cols), key.ldb));
    ZT_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.d, cuda_type(key.cd), uint64_t(key.m),
                                           uint64_t(key.n), key.ldd));

    ZT_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes_));
    // One rounding of D, whatever the split: no in-place or output-type reduction.
    set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
        uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    // (No preference attribute exists for the bias vector's alignment in this cuBLASLt; the
    // key keeps it so a plan is never shared between differently aligned biases.)

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ZT_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.d, plan.d,
                                               pref, 1, &result, &found));
    if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
      throw_system(fmt::format("cuBLASLt has no algorithm for {} (found {}, state {})",
                               describe(key), found, int(result.state)));
    if (result.workspaceSize > workspace_bytes_)
      throw_internal(fmt::format("cuBLASLt's algorithm for {} wants {} workspace bytes of {}",
                                 describe(key), result.workspaceSize, workspace_bytes_));
    plan.algo = result.algo;
    plan.workspace_bytes = result.workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    destroy(plan);
    throw;
  }
  return plans_.emplace(key, plan).first->second;
}

void LtGemm::run(const LtGemmKey& key, const void* a, const void* b, void* d, const void* bias,
                 float alpha, float beta, cudaStream_t stream) {
  if (lt_alignment(a) < key.align_a || lt_alignment(b) < key.align_b ||
      lt_alignment(d) < key.align_d || (key.bias && lt_alignment(bias) < key.align_bias))
    throw_internal(
        fmt::format("LtGemm: a pointer is less aligned than its plan ({})", describe(key)));
  if (key.bias && !bias) throw_internal("LtGemm: bias epilogue without a bias");
  std::lock_guard<std::mutex> lock(mutex_);
  Plan& plan = plan_for(key);
  // The bias pointer is a per-call attribute of the cached descriptor, read by this call.
  if (key.bias) set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  ZT_LT_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d,
                             plan.d, &plan.algo, plan.workspace_bytes ? workspace_ : nullptr,
                             plan.workspace_bytes, stream));
}

}  // namespace zt
