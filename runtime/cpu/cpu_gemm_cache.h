// The on-disk cache of GEMM path measurements (cpu_gemm_paths.h), so a machine measures a model's
// shapes once: one JSON file per CPU signature under $XDG_CACHE_HOME/zerotrain (else
// ~/.cache/zerotrain), holding every key measured there, each with its candidates' rates and
// the path chosen. The signature names what the choice depends on: the CPU (vendor, family,
// model, the SIMD features that matter), oneDNN's version and the instruction set its kernels
// use (DNNL_MAX_CPU_ISA caps it), ours (ZT_CPU_SIMD) and the thread count.
// What it does not do: measure, or decide which measurement a run uses (train/gemm_choice.h).
#pragma once

#include <string>
#include <vector>

#include "runtime/cpu/cpu_gemm_paths.h"

namespace zt {

// "GenuineIntel family 6 model 207 | avx2 fma avx512f avx512_bf16 | oneDNN 2.6.3 avx512_core_bf16
// | ZT_CPU_SIMD avx512 | 2 threads".
std::string cpu_gemm_signature(int threads);
// The cache file for `signature`: <dir>/cpu_gemm-<16 hex digits of its hash>.json, <dir> as
// above; empty when neither XDG_CACHE_HOME nor HOME is set.
std::string gemm_cache_path(const std::string& signature);

// The measurements in `path` for `signature`. A missing file is none. A file that cannot be
// read, is not the cache's JSON, or holds another signature is ignored: none, and `note` says
// why in one line (the caller measures again and overwrites it).
std::vector<GemmMeasurement> read_gemm_cache(const std::string& path, const std::string& signature,
                                             std::string& note);
// Writes `measurements` as `path` (AtomicFile; the directory made when missing). A failure is
// not the run's: returned as one line, else "".
std::string write_gemm_cache(const std::string& path, const std::string& signature,
                             const std::vector<GemmMeasurement>& measurements);

}  // namespace zt
