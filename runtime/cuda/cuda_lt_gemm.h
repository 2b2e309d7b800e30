// LtGemm: cuBLASLt matmuls with one cached plan per problem (LtGemmKey: shape, types, epilogue,
// pointer alignment). A plan is the matmul descriptor, the four matrix layouts and the
// algorithm cuBLASLt's heuristic chose, made on first use and kept for the process, so a step's
// GEMMs ask the heuristic nothing after the first step. Every call goes through the checking
// macro; a problem with no algorithm is an error naming it.
// Precision: compute type fp32 (CUBLAS_COMPUTE_32F; _FAST_TF32 only for fp32 operands when the
// key asks), scale type fp32, so D = type_D(alpha·A·B + beta·C [+ bias]) is computed in fp32
// and rounded once, on the store. Split-K reductions are restricted to none or out of place
// in the compute type (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK): an in-place or output-type
// reduction would round a 16-bit D more than once.
// Not thread-safe beyond its mutex around the cache: the engine calls from one thread. Host
// code (compiled by the host compiler); private to runtime/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>

#include "runtime/cuda/lt_gemm_key.h"

namespace zt {

class LtGemm {
 public:
  // `workspace` (device, `workspace_bytes`) is used by every call, ordered by the one stream.
  LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // D = alpha·op(A)·op(B) + beta·D [+ bias] on `stream`, as `key` describes (the key's
  // alignments must be those of these pointers: key_alignments_match checks). D is read as C
  // (in place) when beta != 0.
  void run(const LtGemmKey& key, const void* a, const void* b, void* d, const void* bias,
           float alpha, float beta, cudaStream_t stream);
  size_t plans() const;  // cached so far

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace_bytes = 0;
  };
  Plan& plan_for(const LtGemmKey& key);  // mutex_ held
  static void destroy(Plan& plan) noexcept;

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  mutable std::mutex mutex_;
  std::map<LtGemmKey, Plan> plans_;
};

}  // namespace zt
