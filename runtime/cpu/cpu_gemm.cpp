// CpuKernels::gemm, the GEMM behind matmul's products with 16-bit weights on a CPU without a
// native GEMM for their dtype (fp16 anywhere; bf16 without AVX512_BF16). It reads the 16-bit
// weight once, in its stored 2 bytes, widening it in registers where the microkernel reads it
// (or, where it must be reordered, as its panel is packed), so no widened copy of it is written
// and read back (the blocked oneDNN sgemm path it replaced paid that pass on every forward and
// dinput product). The output, an activation, is rounded to the table's activation dtype in
// registers, as the microkernel stores the last reduction block's tile. The weight gradient is
// a GEMM into the 16-bit gradient: over one reduction block (up to kKc tokens) the microkernel
// stores its tile into it, rounded in registers (added into the stored values first when
// accumulating); over more, each block of it is summed in fp32 in the thread's scratch, then
// added with one rounding while in cache (an sgemm into an fp32 block and a separate adding
// pass, which this replaced, took about 40 ms more over GPT-2 124M's weight gradients at B=4,
// T=64: that pass read and wrote every gradient again).
//
// Structure (the classic one, as BLIS and oneDNN's own kernels use): C is cut into column
// ranges, one per thread (row ranges for a C with more rows than columns: a tall weight's
// gradient); each thread walks its rows in blocks of kMc, its columns in chunks of kNc (more
// for a reduction shorter than kKc, the panel's bytes the same) and the reduction in blocks of
// kKc. The microkernel keeps an MR x NR tile of C in registers over a kKc block: AVX-512 8 x 48
// (24 accumulators), AVX2 6 x 16 (12), SSE2 4 x 8 (8, multiply and add: SSE2 has no FMA).
// Operands the microkernel can read where they are stored are not packed (AVX-512 and AVX2): an
// A whose rows run along k, MR rows read side by side, and a 16-bit B whose rows are contiguous,
// NR values of a row widened in registers. The others are packed: B's panel (kKc x kNc, NR
// columns interleaved, widened) into the thread's scratch unless it holds that panel already;
// A (MR rows interleaved) per row block for the whole reduction into each thread's scratch, or,
// too large for that (a long reduction), a reduction block at a time into one buffer the threads
// fill together between two barriers; a strip narrower than the tile, alone, zeros past its
// edge.
// Determinism: every element of C is the same chain of fused multiply-adds over k in increasing
// order, blocks of kKc summed in order, whatever the thread count or the rows or columns a
// thread got; a different instruction set (FMA or not) may give different bits, as oneDNN's do.
// In code: the microkernels are in cpu_gemm_micro.h, the packing in cpu_gemm_pack.h; here a call's
// GemmPlan (made before the threads start) and each thread's GemmThread (its share of C, walked in
// row blocks, column chunks and reduction blocks).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/cpu_gemm_micro.h"
#include "runtime/cpu/cpu_gemm_pack.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_lane_codecs.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

constexpr int64_t kKc = 512;  // reduction block: an A micro-panel (MR x kKc) in L1, a B strip in L2
constexpr int64_t kMc = 256;  // rows of C per block at most (then rounded up to a multiple of MR)
constexpr int64_t kNc = 384;  // columns of C per chunk: the B panel (kKc x kNc, 768 KiB) in L2
constexpr int64_t kAWholeFloats = int64_t(1) << 20;  // A packed whole up to 4 MiB per thread

// The most rows of a row block on an MR-row tile: kMc rounded up to MR (gemm balances the
// blocks, each a multiple of MR).
int64_t max_block_rows(int64_t MR) { return (kMc + MR - 1) / MR * MR; }
// Whether a row block's A is packed whole for a reduction of length K (else a reduction block
// at a time, shared by the threads).
bool a_packed_whole(int64_t MR, int64_t K) {
  return max_block_rows(MR) * ((K + kKc - 1) / kKc) * kKc <= kAWholeFloats;
}

// The microkernel's shape per instruction set.
struct Tile {
  int64_t mr, nr;
};
Tile tile_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return {8, 48};
    case Isa::kAvx2: return {6, 16};
    case Isa::kSse2: break;
  }
  return {4, 8};
}

}  // namespace

bool CpuKernels::gemm_takes_16bit_c(int64_t K) const { return a_packed_whole(tile_of(isa_).mr, K); }

// ---------------------------------------------------------------------------------------------
// One call: its plan, made on the calling thread, then each thread's share of C.

// What a gemm call decides before its threads start, from the shapes, the operands' dtypes and
// strides and the instruction set: the tile and blocking, which operands the microkernel reads
// where they are stored and which are packed, the microkernels, how the threads split C, and the
// scratch each thread needs.
struct CpuKernels::GemmPlan {
  using PackA = void (*)(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
  using PackB = void (*)(float*, const void*, int64_t, int64_t, int64_t, int64_t, int64_t);

  GemmPlan(const CpuKernels& k, int64_t M, int64_t N, int64_t K, const GemmMatrix& A,
           const GemmMatrix& B, Operand c, int64_t ldc, bool accumulate, bool b_packed);

  const int64_t M, N, K;
  const GemmMatrix &A, &B;
  const Operand c;
  const int64_t ldc;
  const bool accumulate;
  const bool c16;  // a 16-bit C (a weight gradient)
  float* const C;  // an fp32 C, else null
  const float* a;  // A's values
  int64_t MR, NR;  // the microkernel's tile
  int64_t mc_max;  // rows of a row block at most
  int64_t nc_max;  // columns of a column chunk (a B panel) at most
  PackB pack_b = nullptr;
  PackA pack_a = nullptr;
  bool a_in_place, b_in_place, round_in_micro;
  Micro micros[2][2][2] = {};  // [A in place][B in place][rounded]
  Micro into = nullptr;        // the microkernel storing into a 16-bit C, when it does
  int64_t k_blocks, a_block_floats;
  bool a_whole, a_shared_blocks, a_all;
  bool by_rows;    // the threads split C's rows (else its columns)
  int64_t strips;  // of MR rows (by_rows) or NR columns, split among the threads
  int threads;
  float* a_shared = nullptr;  // the shared buffer of A's reduction blocks (a_shared_blocks)
  int64_t all_m_blocks;
  int64_t ap_floats, bp_floats, cb_floats;  // per thread: packed A, B's panel, C's block
};

CpuKernels::GemmPlan::GemmPlan(const CpuKernels& k, int64_t M, int64_t N, int64_t K,
                               const GemmMatrix& A, const GemmMatrix& B, Operand c, int64_t ldc,
                               bool accumulate, bool b_packed)
    : M(M), N(N), K(K), A(A), B(B), c(c), ldc(ldc), accumulate(accumulate),
      c16(c.dtype != DType::kF32), C(c16 ? nullptr : static_cast<float*>(c.data)),
      a(static_cast<const float*>(A.op.data)) {
  const Isa isa = k.isa_;
  const Tile tile = tile_of(isa);
  MR = tile.mr;
  NR = tile.nr;
  // A short reduction (a weight gradient's, over the tokens) widens the B panel to the same
  // bytes, so a thread's columns more often fit one panel, packed once for every row block.
  // Rows per block: a thread's rows cut into the fewest blocks of at most kMc, balanced, each a
  // multiple of MR (256 rows on a 6-row tile are one block of 258, not 252 and a sliver of 4
  // that would pack B again for 4 rows), so at most kMc rounded up to MR.
  mc_max = max_block_rows(MR);
  nc_max = std::max(NR, kKc * kNc / std::min(K, kKc) / NR * NR);
  const bool fast = isa != Isa::kSse2 && (B.op.dtype != DType::kF16 || k.f16c_);
  visit_codec(B.op.dtype, [&](auto codec) {
    using C = decltype(codec);
    pack_b = fast ? pack_b_avx2<C> : pack_b_portable<C>;
  });
  pack_a = isa != Isa::kSse2 ? pack_a_avx2 : pack_a_portable;
  // Operands read where they are stored (AVX-512 and AVX2): an A whose rows run along k (the
  // forward's activation, dinput's output gradient), and a 16-bit B whose rows are contiguous (a
  // weight in the forward product, the LM head's in dinput's), widened in registers. Packing
  // them is a pass through memory that nothing overlaps; reading them in place costs a
  // conversion per vector of B for every strip of A (on a Zen 4 EPYC, two threads, GPT-2 124M's
  // forward products at 256 rows with cold weights: 7-34% less time each; the LM head's 16-bit
  // dinput 114 -> 97 ms). Only a strip narrower than the tile is packed (zeros past its edge).
  // The same products, so the same bits. An fp32 B (the weight gradient's output gradient,
  // rows of 2,304-3,072 floats) stays packed: read in place, a step's weight gradients took 5%
  // more time on AVX-512 and 33% more on AVX2, its rows too far apart.
  a_in_place = isa != Isa::kSse2 && A.col_stride == 1;
  b_in_place = fast && B.col_stride == 1 && B.op.dtype != DType::kF32 && !b_packed;
  // An fp32 C (an activation) is rounded to the activation dtype as the microkernel stores the
  // last reduction block's tile (AVX-512 and AVX2; SSE2 by a pass over each finished block).
  round_in_micro = !c16 && k.act_ != DType::kF32 && isa != Isa::kSse2;
  for (const bool rows_a : {false, true})
    for (const bool direct_b : {false, true})
      for (const bool rounded : {false, true})
        visit_codec(direct_b ? B.op.dtype : DType::kF32, [&](auto codec) {
          visit_codec(rounded ? k.act_ : DType::kF32, [&](auto round_codec) {
            using C = decltype(codec);
            using R = decltype(round_codec);
            micros[rows_a][direct_b][rounded] =
                rows_a ? micro_of<C, true, R>(isa) : micro_of<C, false, R>(isa);
          });
        });
  // A 16-bit C summed over one reduction block (a weight gradient over at most kKc tokens) is
  // stored by the microkernel, rounded in registers (added into the stored values first when
  // accumulating), not summed into an fp32 block (mc x nc floats a thread, 792 KiB over 256
  // tokens, beside a B panel as large in a 1 MiB L2) that a pass then rounds into C. The same
  // bits. GPT-2 124M's block weight gradients at B=4, T=64 (Zen 4 EPYC, two threads, medians of
  // 11-15 alternations): AVX-512 fp16 261 -> 241 and 235 -> 234 ms, AVX2 bf16 294 -> 287 and
  // 268 -> 263, within this shared machine's noise. A longer reduction sums each block of C in
  // fp32 and adds it in once complete.
  if (c16 && K <= kKc && !a_in_place && !b_in_place)
    visit_codec(c.dtype, [&](auto codec) {
      using O = decltype(codec);
      if constexpr (!std::is_same_v<O, F32Codec>)
        into = accumulate ? micro_into<O, true>(isa) : micro_into<O, false>(isa);
    });

  // A packed A: a row block's, once for the whole reduction when it fits in each thread's
  // scratch, serves every column chunk. A larger A (a long reduction) is packed one reduction
  // block at a time into one buffer shared by the threads, each packing its share of the
  // strips, so no thread packs what another packs too.
  k_blocks = (K + kKc - 1) / kKc;
  a_block_floats = mc_max * kKc;
  a_whole = a_packed_whole(MR, K);
  a_shared_blocks = !a_in_place && !a_whole;
  // The threads split C's columns in strips of NR, in contiguous ranges; a C with at least as
  // many rows as columns (a weight gradient over a tall weight) is split by rows in strips of
  // MR instead, where each thread reads only its own rows of A (not with a shared A: that needs
  // every thread on every row block).
  by_rows = !a_shared_blocks && M >= N;
  strips = by_rows ? (M + MR - 1) / MR : (N + NR - 1) / NR;
  threads = static_cast<int>(std::min<int64_t>(strips, omp_get_max_threads()));
  if (a_shared_blocks)
    a_shared = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(thread_scratch<ScratchSlot::kCall>(a_block_floats + 16)) +
         63) &
        ~uintptr_t(63));
  // A packed whole on a C split by columns, where a thread's columns take more than one B panel
  // (the weight gradients of qkv and fc: 1,152 and 1,536 columns a thread, panels of 768 over
  // 256 tokens): every row block's A is packed once, and each B panel then serves every row
  // block (column chunks outside row blocks), where row blocks outside would pack each panel
  // again for every row block.
  all_m_blocks = (M + kMc - 1) / kMc;
  a_all = !a_in_place && a_whole && !by_rows && all_m_blocks > 1 &&
          (N + threads - 1) / threads > nc_max &&
          all_m_blocks * a_block_floats * k_blocks <= kAWholeFloats;
  // Per thread: the packed A (an A in place: one narrow strip), B's panel, C's block.
  ap_floats = a_in_place ? MR * kKc
              : a_all    ? all_m_blocks * a_block_floats * k_blocks
              : a_whole  ? a_block_floats * k_blocks
                         : 0;
  bp_floats = kKc * nc_max;
  // A 16-bit C's block (mc x nc) is summed in fp32 here, then added in with one rounding.
  cb_floats = c16 && !into ? mc_max * nc_max : 0;
}

// One thread's share of C: the rows [m_lo, m_hi) and columns [n_lo, n_hi) of its strips, walked
// in row blocks of mc_step rows, column chunks of nc_max and reduction blocks of kKc, with its
// scratch: the packed A, B's panel and (a 16-bit C summed in fp32) C's block.
class CpuKernels::GemmThread {
 public:
  GemmThread(CpuKernels& k, const GemmPlan& p, int t);
  // The whole share: every row block (run_all_packed's order when the plan packs all of A).
  void run();

 private:
  // C[m0, m0 + mc) x [n0, n0 + nc) += A[m0, m0 + mc) x [k0, k0 + kc) · B's panel at k0; Ab:
  // that block of A packed (null for an A in place).
  void product(const float* Ab, int64_t m0, int64_t mc, int64_t k0, int64_t kc, int64_t n0,
               int64_t nc);
  // The tile at rows [m0 + i0, + mr) and columns [n0 + j0, + nr) of product's block (nc
  // columns), by the microkernel `run` ([C +] A's strip ap · B's strip bs), or by the plan's
  // `into` for a 16-bit C; a tile past C's edge through edge_.
  void store_tile(Micro run, int64_t kc, const float* ap, int64_t lda, const void* bs, int64_t ldb,
                  int64_t m0, int64_t i0, int64_t mr, int64_t n0, int64_t j0, int64_t nr,
                  int64_t nc, bool load);
  // After the last reduction block: the finished block of C, still in cache, rounded or added in.
  void finish_block(int64_t m0, int64_t mc, int64_t n0, int64_t nc);
  // n fp32 sums into the 16-bit C at element `at` with one rounding: add's bits, or the sums
  // rounded when C is not accumulated into.
  void take_sums(int64_t at, const float* sums, int64_t n);
  // Row block [m0, m0 + mc) of A packed whole into dst, reduction block kb at
  // dst + kb·a_block_floats.
  void pack_a_block(float* dst, int64_t m0, int64_t mc);
  // C[m0, m0 + mc) x the column chunk at n0, over the whole reduction; Ab: that row block
  // packed whole (pack_a_block), null for an A in place.
  void chunk(const float* Ab, int64_t m0, int64_t mc, int64_t n0);
  // The plan's a_all: every row block packed first, then each column chunk over them all.
  void run_all_packed();
  // Row block [m0, m0 + mc) of an A shared by the threads a reduction block at a time.
  void run_shared_a(int64_t m0, int64_t mc);
  // A[m0, m0 + mc) x [k0, k0 + kc) into the shared buffer, strips [s0, s1) of it.
  void pack_a_strips(int64_t m0, int64_t mc, int64_t k0, int64_t s0, int64_t s1);

  CpuKernels& k_;
  const GemmPlan& p_;
  const int t_;
  float* Ap_;
  float* Bp_;
  float* Cb_;
  // The panel Bp holds (its first k and n; -1: none yet): one B panel serves every row block
  // when the thread's columns and the reduction each fit one (a weight gradient's B, an
  // activation or an output gradient, beside a tall A). A B in place: its narrow last strip.
  int64_t packed_k0_ = -1, packed_n0_ = -1;
  alignas(64) float edge_[8 * 48];
  int64_t m_lo_, m_hi_, n_lo_, n_hi_;
  int64_t mc_step_;
};

CpuKernels::GemmThread::GemmThread(CpuKernels& k, const GemmPlan& p, int t) : k_(k), p_(p), t_(t) {
  float* scratch =
      thread_scratch<ScratchSlot::kWorker>(p.ap_floats + p.bp_floats + p.cb_floats + 16);
  // 64-byte aligned panels.
  Ap_ = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  Bp_ = Ap_ + p.ap_floats;
  Cb_ = Bp_ + p.bp_floats;
  const int64_t s_lo = p.strips * t / p.threads, s_hi = p.strips * (t + 1) / p.threads;
  m_lo_ = p.by_rows ? std::min(p.M, s_lo * p.MR) : 0;
  m_hi_ = p.by_rows ? std::min(p.M, s_hi * p.MR) : p.M;
  n_lo_ = p.by_rows ? 0 : std::min(p.N, s_lo * p.NR);
  n_hi_ = p.by_rows ? p.N : std::min(p.N, s_hi * p.NR);
  const int64_t m_blocks = std::max<int64_t>(1, (m_hi_ - m_lo_ + kMc - 1) / kMc);
  mc_step_ = ((m_hi_ - m_lo_ + m_blocks - 1) / m_blocks + p.MR - 1) / p.MR * p.MR;
}

void CpuKernels::GemmThread::product(const float* Ab, int64_t m0, int64_t mc, int64_t k0,
                                     int64_t kc, int64_t n0, int64_t nc) {
  const GemmPlan& p = p_;
  const int64_t MR = p.MR, NR = p.NR;
  if (!p.b_in_place && (k0 != packed_k0_ || n0 != packed_n0_)) {
    p.pack_b(Bp_, p.B.op.at(k0 * p.B.row_stride + n0 * p.B.col_stride).data, p.B.row_stride,
             p.B.col_stride, kc, nc, NR);
    packed_k0_ = k0;
    packed_n0_ = n0;
  }
  const bool load = k0 > 0 || (p.accumulate && !p.c16);
  const bool last = k0 + kc >= p.K;
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t mr = std::min(MR, mc - i0);
    // A's strip: packed, or in place (row i at ap + i·lda), or a narrow strip packed here.
    const float* ap = Ab ? Ab + i0 * kc : p.a + (m0 + i0) * p.A.row_stride + k0;
    const bool rows_a = !Ab && mr == MR;
    if (!Ab && !rows_a) {
      p.pack_a(Ap_, ap, p.A.row_stride, 1, mr, kc, MR);
      ap = Ap_;
    }
    const int64_t lda = rows_a ? p.A.row_stride : MR;
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
      const int64_t nr = std::min(NR, nc - j0);
      // B's strip: its packed panel's, or in place, or a narrow last strip packed once per
      // reduction block.
      const bool direct_b = p.b_in_place && nr == NR;
      const void* bs = Bp_ + j0 * kc;
      int64_t ldb = NR;
      if (p.b_in_place) {
        const void* at = p.B.op.at(k0 * p.B.row_stride + n0 + j0).data;
        if (direct_b) {
          bs = at;
          ldb = p.B.row_stride;
        } else if (k0 != packed_k0_ || n0 + j0 != packed_n0_) {
          p.pack_b(Bp_, at, p.B.row_stride, 1, kc, nr, NR);
          packed_k0_ = k0;
          packed_n0_ = n0 + j0;
        }
        if (!direct_b) bs = Bp_;
      }
      const Micro run = p.micros[rows_a][direct_b][last && p.round_in_micro];
      store_tile(run, kc, ap, lda, bs, ldb, m0, i0, mr, n0, j0, nr, nc, load);
    }
  }
  if (!last || p.round_in_micro || p.into) return;
  finish_block(m0, mc, n0, nc);
}

void CpuKernels::GemmThread::store_tile(Micro run, int64_t kc, const float* ap, int64_t lda,
                                        const void* bs, int64_t ldb, int64_t m0, int64_t i0,
                                        int64_t mr, int64_t n0, int64_t j0, int64_t nr, int64_t nc,
                                        bool load) {
  const GemmPlan& p = p_;
  const int64_t MR = p.MR, NR = p.NR;
  if (p.into) {  // the one reduction block's tile into the 16-bit C; an edge via `edge`
    const int64_t at = (m0 + i0) * p.ldc + n0 + j0;
    if (mr == MR && nr == NR) {
      p.into(kc, ap, lda, bs, ldb, p.c.at(at).data, p.ldc, false);
      return;
    }
    run(kc, ap, lda, bs, ldb, edge_, NR, false);
    for (int64_t r = 0; r < mr; ++r) take_sums(at + r * p.ldc, edge_ + r * NR, nr);
    return;
  }
  // An fp32 C is stored into, a 16-bit one summed into its block in Cb.
  const int64_t ldt = p.c16 ? nc : p.ldc;
  float* ct = (p.c16 ? Cb_ : p.C + m0 * p.ldc + n0) + i0 * ldt + j0;
  if (mr == MR && nr == NR) {
    run(kc, ap, lda, bs, ldb, ct, ldt, load);
    return;
  }
  if (load)
    for (int64_t r = 0; r < mr; ++r) std::memcpy(edge_ + r * NR, ct + r * ldt, nr * 4);
  run(kc, ap, lda, bs, ldb, edge_, NR, load);
  for (int64_t r = 0; r < mr; ++r) std::memcpy(ct + r * ldt, edge_ + r * NR, nr * 4);
}

void CpuKernels::GemmThread::finish_block(int64_t m0, int64_t mc, int64_t n0, int64_t nc) {
  // The block is complete, and in cache: a 16-bit C takes its sums with one rounding (add's
  // bits, or the sums rounded when C is not accumulated into); an fp32 C on SSE2 is rounded
  // to the activation dtype.
  for (int64_t r = 0; r < mc; ++r) {
    const int64_t at = (m0 + r) * p_.ldc + n0;
    if (p_.c16)
      take_sums(at, Cb_ + r * nc, nc);
    else
      k_.round_act(p_.C, at, at + nc);
  }
}

void CpuKernels::GemmThread::take_sums(int64_t at, const float* sums, int64_t n) {
  if (p_.accumulate)
    k_.add_range(p_.c.at(at), sums, n);
  else
    k_.narrow_range(p_.c.at(at), sums, n);
}

void CpuKernels::GemmThread::pack_a_block(float* dst, int64_t m0, int64_t mc) {
  const GemmPlan& p = p_;
  for (int64_t kb = 0; kb < p.k_blocks; ++kb)
    p.pack_a(dst + kb * p.a_block_floats, p.a + m0 * p.A.row_stride + kb * kKc * p.A.col_stride,
             p.A.row_stride, p.A.col_stride, mc, std::min(kKc, p.K - kb * kKc), p.MR);
}

void CpuKernels::GemmThread::chunk(const float* Ab, int64_t m0, int64_t mc, int64_t n0) {
  const GemmPlan& p = p_;
  for (int64_t k0 = 0; k0 < p.K; k0 += kKc)
    product(Ab ? Ab + (k0 / kKc) * p.a_block_floats : nullptr, m0, mc, k0, std::min(kKc, p.K - k0),
            n0, std::min(p.nc_max, n_hi_ - n0));
}

void CpuKernels::GemmThread::run_all_packed() {
  // Row block b at Ap + b·k_blocks·a_block_floats.
  if (n_lo_ >= n_hi_) return;
  const int64_t block_floats = p_.k_blocks * p_.a_block_floats;
  int64_t b = 0;
  for (int64_t m0 = m_lo_; m0 < m_hi_; m0 += mc_step_, ++b)
    pack_a_block(Ap_ + b * block_floats, m0, std::min(mc_step_, m_hi_ - m0));
  for (int64_t n0 = n_lo_; n0 < n_hi_; n0 += p_.nc_max) {
    b = 0;
    for (int64_t m0 = m_lo_; m0 < m_hi_; m0 += mc_step_, ++b)
      chunk(Ap_ + b * block_floats, m0, std::min(mc_step_, m_hi_ - m0), n0);
  }
}

void CpuKernels::GemmThread::pack_a_strips(int64_t m0, int64_t mc, int64_t k0, int64_t s0,
                                           int64_t s1) {
  const GemmPlan& p = p_;
  const int64_t MR = p.MR;
  const int64_t kc = std::min(kKc, p.K - k0), r0 = s0 * MR, rows = std::min(mc, s1 * MR) - r0;
  if (rows > 0)
    p.pack_a(p.a_shared + r0 * kc, p.a + (m0 + r0) * p.A.row_stride + k0 * p.A.col_stride,
             p.A.row_stride, p.A.col_stride, rows, kc, MR);
}

void CpuKernels::GemmThread::run_shared_a(int64_t m0, int64_t mc) {
  const GemmPlan& p = p_;
  const int64_t a_strips = (mc + p.MR - 1) / p.MR;
  for (int64_t k0 = 0; k0 < p.K; k0 += kKc) {
    pack_a_strips(m0, mc, k0, a_strips * t_ / p.threads, a_strips * (t_ + 1) / p.threads);
#pragma omp barrier
    for (int64_t n0 = n_lo_; n0 < n_hi_; n0 += p.nc_max)
      product(p.a_shared, m0, mc, k0, std::min(kKc, p.K - k0), n0, std::min(p.nc_max, n_hi_ - n0));
#pragma omp barrier
  }
}

void CpuKernels::GemmThread::run() {
  if (p_.a_all) {
    run_all_packed();
    return;
  }
  for (int64_t m0 = m_lo_; m0 < m_hi_; m0 += mc_step_) {
    const int64_t mc = std::min(mc_step_, m_hi_ - m0);
    if (!p_.a_shared_blocks && n_lo_ >= n_hi_) continue;
    if (p_.a_in_place || p_.a_whole) {  // this row block's A in place, or packed whole into Ap
      const float* Ab = p_.a_in_place ? nullptr : Ap_;
      if (Ab) pack_a_block(Ap_, m0, mc);
      for (int64_t n0 = n_lo_; n0 < n_hi_; n0 += p_.nc_max) chunk(Ab, m0, mc, n0);
      continue;
    }
    run_shared_a(m0, mc);
  }
}

// ---------------------------------------------------------------------------------------------
// The entry.

void CpuKernels::gemm(int64_t M, int64_t N, int64_t K, const GemmMatrix& A, const GemmMatrix& B,
                      Operand c, int64_t ldc, bool accumulate, bool b_packed) {
  ZT_ASSERT(A.op.dtype == DType::kF32, "gemm: A in {}", dtype_name(A.op.dtype));
  ZT_ASSERT(B.row_stride == 1 || B.col_stride == 1, "gemm: B strides {} x {}", B.row_stride,
            B.col_stride);
  const bool c16 = c.dtype != DType::kF32;
  ZT_ASSERT(!c16 || gemm_takes_16bit_c(K), "gemm: a {} C needs K={} within one packed A",
            dtype_name(c.dtype), K);
  if (M <= 0 || N <= 0 || (K <= 0 && accumulate)) return;  // C unchanged
  if (K <= 0) {                                            // C = 0 (zero bits in every dtype)
    const size_t row_bytes = static_cast<size_t>(N) * dtype_size(c.dtype);
    for (int64_t r = 0; r < M; ++r) std::memset(c.at(r * ldc).data, 0, row_bytes);
    return;
  }
  const GemmPlan plan(*this, M, N, K, A, B, c, ldc, accumulate, b_packed);
  const auto body = [&](int t) { GemmThread(*this, plan, t).run(); };
  if (plan.threads <= 1) {
    body(0);
    return;
  }
#pragma omp parallel num_threads(plan.threads)
  body(omp_get_thread_num());
}

}  // namespace zt
