// reduce_in_rank_order: pure arithmetic; no communication. The element-wise reduction of the
// determinism contract of comm/communicator.h, over contributions already in this process's
// memory in rank order, which MpiCommunicator runs on what it received (portable code and an
// AVX2 + F16C one chosen at run time, giving the same bits). Pinned by
// tests/mpi/reduction_test.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "runtime/dtype.h"

namespace zt {

// Which code reduce_in_rank_order runs: the fastest the CPU offers (AVX2 + F16C, chosen at run
// time) or the portable one. Both give the same bits; tests pin that (ReductionKernels).
enum class ReduceKernel { kFastest, kPortable };

// The reduction of the determinism contract: out[i] = op(...op(op(c[0][i], c[1][i]), c[2][i])...)
// for i in [0, count), computed in fp32 and rounded once to dtype. contributions are in rank
// order, each count elements of dtype. out may be the same address as any contribution (the
// own block of an in-place reduce-scatter); any other overlap is undefined. When several NaNs
// meet, the result is a NaN (which one is unspecified). Pure arithmetic.
void reduce_in_rank_order(std::span<const void* const> contributions, void* out, int64_t count,
                          DType dtype, ReduceOp op, ReduceKernel kernel = ReduceKernel::kFastest);

}  // namespace zt
