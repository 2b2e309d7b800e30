// The Kernels entries, one row each: the one list from which every class that declares or
// forwards the whole table is generated (an X-macro, included where it is expanded):
//   runtime/kernels.h              the interface: each row a pure virtual
//   runtime/cpu/cpu_kernels.h      CpuKernels' overrides (defined in runtime/cpu/cpu_*.cpp)
//   runtime/cuda/cuda_kernels.h    CudaKernels' overrides (defined in runtime/cuda/cuda_*.cu)
//   runtime/profiling_kernels.h    ProfilingKernels: each entry timed and forwarded
//   tests/mpi/scrambled_device.h   ScrambledKernels: each entry's memory unscrambled, forwarded
//   tests/runtime/profiling_kernels_test.cpp  a forwarding base that fails on one entry
// So a new entry is a row here plus its definition in each back end (CpuKernels, CudaKernels);
// nothing else names it. The contracts every entry keeps (accumulation, element-wise bits,
// fixed reductions, precision) are kernels.h's.
//
// A row: ZT_KERNEL(return type, name, (parameters), (arguments), (memory)), with
//   parameters  the declaration's, default arguments included;
//   arguments   the parameter names in order (what a forwarding entry passes on);
//   memory      the device memory the entry reads or writes: each pointer argument (null ones
//               are skipped by whoever checks them), written operand(x, n) where n elements of
//               x's dtype are known from the other arguments (a test device checks that they
//               lie inside one allocation). An expansion that does not check memory ignores it.
// Shapes are row-major; sizes are in elements.
//
// No include guard: an includer defines ZT_KERNEL, includes this file, and it is #undef'd at the
// end. Not here: the types the rows name (kernels.h), any implementation.
#ifndef ZT_KERNEL
#error "define ZT_KERNEL(ret, name, params, args, memory) before including kernel_entries.h"
#endif

// Not clang-formatted: the rows' memory lists hold products (K * N) that it would read as
// pointer types.
// clang-format off

// ---- Matrix products --------------------------------------------------------------------------

// out (M,N) = inp (M,K) · W + bias (N; may be null). W is (K,N) or (N,K) by layout.
ZT_KERNEL(void, matmul_forward,
          (Operand out, ConstOperand inp, ConstOperand weight, ConstOperand bias, int64_t M,
           int64_t K, int64_t N, WeightLayout layout),
          (out, inp, weight, bias, M, K, N, layout),
          (out, inp, operand(weight, K * N), operand(bias, N)))
// dinp (M,K) += dout · Wᵀ, or = with kWrite (zeros when N == 0; skipped when null);
// dweight (W's shape) += inpᵀ·dout (or its transpose for kOutIn), or = when dweight is fresh
// (zeros when M == 0; skipped when null); each "=" gives the bits of adding into zeros.
// dbias (N) += column sums of dout (skipped when null).
ZT_KERNEL(void, matmul_backward,
          (Operand dinp, Operand dweight, Operand dbias, ConstOperand dout, ConstOperand inp,
           ConstOperand weight, int64_t M, int64_t K, int64_t N, WeightLayout layout,
           GradOutput dinp_output = GradOutput::kAdd),
          (dinp, dweight, dbias, dout, inp, weight, M, K, N, layout, dinp_output),
          (dinp, operand(dweight, K * N), operand(dbias, N), dout, inp, operand(weight, K * N)))

// ---- Embedding --------------------------------------------------------------------------------

// out (B,T,C) = wte[tokens[b,t]] + wpe[positions[b,t]] (wpe null: no position embedding,
// Llama's). tokens are already validated (< V). positions (B,T), model.h's Batch::positions,
// null: 0..T-1 in every row; a row may also continue a sequence, starting at any position
// (generation's DecodeIO), below wpe's rows. wte is (V,C) and wpe (positions, C) with their
// row counts not arguments: only their pointers are checked.
ZT_KERNEL(void, embedding_forward,
          (Operand out, const int32_t* tokens, ConstOperand wte, ConstOperand wpe, int64_t B,
           int64_t T, int64_t C, const int32_t* positions),
          (out, tokens, wte, wpe, B, T, C, positions),
          (out, tokens, wte.data, wpe.data, positions))
// dwte (V,C) += scatter of dout by token; dwpe (T,C) += scatter of dout by position, a row's
// contributions in token order (skipped when null; either may be null). Deterministic order.
// A 16-bit dwte or dwpe row named by the batch is rounded once, after all its contributions.
ZT_KERNEL(void, embedding_backward,
          (Operand dwte, Operand dwpe, ConstOperand dout, const int32_t* tokens, int64_t B,
           int64_t T, int64_t C, const int32_t* positions),
          (dwte, dwpe, dout, tokens, B, T, C, positions),
          (dwte.data, operand(dwpe, T * C), dout, tokens, positions))

// ---- Normalization and activation functions ---------------------------------------------------

// Per row of C: out = (inp - mean) * rstd * weight + bias, eps 1e-5. mean, rstd: (N).
ZT_KERNEL(void, layernorm_forward,
          (Operand out, float* mean, float* rstd, ConstOperand inp, ConstOperand weight,
           ConstOperand bias, int64_t N, int64_t C),
          (out, mean, rstd, inp, weight, bias, N, C),
          (out, mean, rstd, inp, operand(weight, C), operand(bias, C)))
// dinp (N,C) += the gradient through layer norm; dweight, dbias (C) += theirs, each skipped
// when null (a frozen parameter has no gradient buffer).
ZT_KERNEL(void, layernorm_backward,
          (Operand dinp, Operand dweight, Operand dbias, ConstOperand dout, ConstOperand inp,
           ConstOperand weight, const float* mean, const float* rstd, int64_t N, int64_t C),
          (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C),
          (dinp, operand(dweight, C), operand(dbias, C), dout, inp, operand(weight, C), mean,
           rstd))

// GELU, tanh approximation (GPT-2's).
ZT_KERNEL(void, gelu_forward, (Operand out, ConstOperand inp, int64_t n), (out, inp, n),
          (out, inp))
ZT_KERNEL(void, gelu_backward, (Operand dinp, ConstOperand inp, ConstOperand dout, int64_t n),
          (dinp, inp, dout, n), (dinp, inp, dout))

// ---- Attention --------------------------------------------------------------------------------

// Causal multi-head self-attention within documents: query t of row b reads the keys
// t - positions[b,t] .. t (model.h's Batch::positions, (B,T); null: 0..T-1, keys 0 .. t).
// qkv (B,T,3C) holds q, k, v side by side per token; out (B,T,C); att (B,NH,T,T) receives
// the softmax probabilities (kept for backward; entries outside a query's keys are zero).
// Scale 1/sqrt(C/NH).
ZT_KERNEL(void, attention_forward,
          (Operand out, Operand att, ConstOperand qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
           const int32_t* positions),
          (out, att, qkv, B, T, C, NH, positions), (out, att, qkv, positions))
// dqkv (B,T,3C) += gradient through attention, from dout (B,T,C); positions as forward's.
ZT_KERNEL(void, attention_backward,
          (Operand dqkv, ConstOperand dout, ConstOperand qkv, ConstOperand att, int64_t B,
           int64_t T, int64_t C, int64_t NH, const int32_t* positions),
          (dqkv, dout, qkv, att, B, T, C, NH, positions), (dqkv, dout, qkv, att, positions))

// Causal grouped-query self-attention (Llama's; attention_forward is the case NKV == NH,
// hd == C/NH). qkv (B,T,R) with R = (NH + 2·NKV)·hd holds per token the NH query heads, then
// the NKV key heads, then the NKV value heads, each hd wide; query head h reads key/value head
// h / (NH/NKV) (NH a multiple of NKV). out (B,T,NH·hd); att (B,NH,T,T) and positions (null:
// 0..T-1) as attention_forward's. Scale 1/sqrt(hd).
// window > 0: sliding-window attention (Mistral's, Phi-3's): query t also reads no key before
// t - window + 1, so it reads the last `window` keys of its document, itself included: key u is
// read when t - window < u <= t (transformers' masking_utils: sliding_window_overlay keeps
// kv_idx > q_idx - sliding_window, and'ed with the causal kv_idx <= q_idx). att's entries outside
// the window are zero. window <= 0, or >= T: plain causal attention, the same bits.
ZT_KERNEL(void, gqa_attention_forward,
          (Operand out, Operand att, ConstOperand qkv, int64_t B, int64_t T, int64_t NH,
           int64_t NKV, int64_t hd, const int32_t* positions, int64_t window = 0),
          (out, att, qkv, B, T, NH, NKV, hd, positions, window), (out, att, qkv, positions))
// dqkv (B,T,R) += gradient through attention, from dout (B,T,NH·hd). A key/value head's
// gradient sums its group's query heads in increasing h. positions, window as forward's.
ZT_KERNEL(void, gqa_attention_backward,
          (Operand dqkv, ConstOperand dout, ConstOperand qkv, ConstOperand att, int64_t B,
           int64_t T, int64_t NH, int64_t NKV, int64_t hd, const int32_t* positions,
           int64_t window = 0),
          (dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions, window),
          (dqkv, dout, qkv, att, positions))

// Generation's attention (runtime/model.h's DecodeIO): the T new tokens of each of B rows, at
// positions past .. past + T - 1, over a key/value cache. First the new tokens' NKV key and
// value heads (qkv (B,T,R), laid out as gqa_attention_forward's) are copied into the caches
// k_cache, v_cache (B,S,NKV·hd) at rows past .. past + T - 1 (S the capacity, past + T <= S);
// then query head h of the new token at position p reads the cached keys and values u of head
// h / (NH/NKV) with p - window < u <= p (window <= 0: 0 <= u <= p), softmax scaled by
// 1/sqrt(hd) as gqa_attention_forward's. out (B,T,NH·hd). The same function of the sequence
// as gqa_attention_forward's over one document; the bits may differ (another summation order).
ZT_KERNEL(void, gqa_attention_decode,
          (Operand out, Operand k_cache, Operand v_cache, ConstOperand qkv, int64_t B, int64_t T,
           int64_t past, int64_t S, int64_t NH, int64_t NKV, int64_t hd, int64_t window),
          (out, k_cache, v_cache, qkv, B, T, past, S, NH, NKV, hd, window),
          (out, k_cache, v_cache, qkv))

// What gqa_attention_forward (attention_forward: NKV == NH, hd == C/NH) keeps in att for a call
// of this shape, so that the caller allocates att to match: the (B,NH,T,T) probabilities, packable
// (the CPU, and the materialised kernels everywhere), or a back end's own smaller record to be
// kept as written (CUDA through cuDNN's fused SDPA). packed: the call will be given positions
// (packed documents). The answer for a shape holds for the run.
ZT_KERNEL(AttentionRecord, attention_record,
          (int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd, bool packed,
           int64_t window),
          (B, T, NH, NKV, hd, packed, window), ())

// ---- Llama's layers ---------------------------------------------------------------------------

// RMSNorm per row of C: out = inp·rstd·weight, rstd = 1/sqrt(mean(inp²) + eps). rstd (N) is
// kept for backward (fp32, as layer norm's statistics).
ZT_KERNEL(void, rmsnorm_forward,
          (Operand out, float* rstd, ConstOperand inp, ConstOperand weight, int64_t N, int64_t C,
           float eps),
          (out, rstd, inp, weight, N, C, eps), (out, rstd, inp, operand(weight, C)))
// dinp (N,C) += the gradient through RMSNorm; dweight (C) += its own (skipped when null).
ZT_KERNEL(void, rmsnorm_backward,
          (Operand dinp, Operand dweight, ConstOperand dout, ConstOperand inp,
           ConstOperand weight, const float* rstd, int64_t N, int64_t C),
          (dinp, dweight, dout, inp, weight, rstd, N, C),
          (dinp, operand(dweight, C), dout, inp, operand(weight, C), rstd))

// Per-head RMSNorm (Qwen3's q_norm and k_norm), IN PLACE on H heads of hd at the start of each
// of N rows `stride` elements apart (the q heads of qkv (N,R): H = NH, stride R; its k heads: x
// at qkv + NH·hd, H = NKV): each head x = x·rstd·weight, rstd = 1/sqrt(mean(x²) + eps) over
// its hd values, weight (hd) shared by the heads; the rest of each row untouched. rstd (N,H)
// is kept for backward (fp32). The bits of rmsnorm_forward over the same rows.
ZT_KERNEL(void, head_rmsnorm_forward,
          (Operand x, float* rstd, ConstOperand weight, int64_t N, int64_t H, int64_t hd,
           int64_t stride, float eps),
          (x, rstd, weight, N, H, hd, stride, eps), (x, rstd, operand(weight, hd)))
// The gradient through head_rmsnorm_forward, IN PLACE as rope_backward's: dx's heads (laid out
// as forward's x; the gradient w.r.t. its output) become the gradient w.r.t. its input `inp`
// (forward's x before it ran, the same layout); dweight (hd) += the heads' dweight terms, added
// in a fixed order over the N·H head rows (skipped when null). The rest of each row untouched.
ZT_KERNEL(void, head_rmsnorm_backward,
          (Operand dx, Operand dweight, ConstOperand inp, ConstOperand weight, const float* rstd,
           int64_t N, int64_t H, int64_t hd, int64_t stride),
          (dx, dweight, inp, weight, rstd, N, H, hd, stride),
          (dx, operand(dweight, hd), inp, operand(weight, hd), rstd))

// Rotary position embedding (Hugging Face's rotate-half convention), IN PLACE on the NH query
// and NKV key heads of qkv (B,T,R), laid out as gqa_attention_forward's; value heads untouched.
// Token (b, t) at position p = positions[b,t] (model.h's Batch::positions, or a row continuing
// a sequence from any position, as embedding_forward's; null: p = t) of each head: for i < hd/2, with x1 = x[i], x2 = x[i + hd/2] and a = p·f_i, f_i =
// rope_inv_freq(rope, i, hd) (runtime/rope.h: theta^(-2i/hd), rescaled by rope_scaling):
// x[i] = x1·cos a - x2·sin a, x[i + hd/2] = x2·cos a + x1·sin a.
// Precision: f_i is computed in double and rounded to fp32, a = float(p) times it in fp32
// (Hugging Face's fp32 inv_freq and angle), cos a and sin a in double rounded to fp32; the
// rotation itself in fp32. hd even.
ZT_KERNEL(void, rope_forward,
          (Operand qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
           const RopeFrequencies& rope, const int32_t* positions),
          (qkv, B, T, NH, NKV, hd, rope, positions), (qkv, positions))
// The gradient through rope_forward at the same positions, IN PLACE: the q and k parts of
// dqkv (the gradient w.r.t. rope's output) become the gradient w.r.t. its input (the inverse
// rotation). The one backward entry that transforms instead of accumulating: the rotation is
// orthogonal, so the caller keeps one buffer.
ZT_KERNEL(void, rope_backward,
          (Operand dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
           const RopeFrequencies& rope, const int32_t* positions),
          (dqkv, B, T, NH, NKV, hd, rope, positions), (dqkv, positions))

// SwiGLU: out (N,F) = silu(gate)·up, silu(x) = x·sigmoid(x); gate_up (N,2F) holds per row the
// F gate values, then the F up values (one GEMM over the adjacent gate_proj and up_proj).
ZT_KERNEL(void, swiglu_forward, (Operand out, ConstOperand gate_up, int64_t N, int64_t F),
          (out, gate_up, N, F), (out, gate_up))
// dgate_up (N,2F) += gradient from dout (N,F).
ZT_KERNEL(void, swiglu_backward,
          (Operand dgate_up, ConstOperand gate_up, ConstOperand dout, int64_t N, int64_t F),
          (dgate_up, gate_up, dout, N, F), (dgate_up, gate_up, dout))

// ---- LoRA adapters ----------------------------------------------------------------------------
// What an adapter y = W·x + s·B·(A·dropout(x)) needs beyond the matrix products.

// dst[n·dst_stride + j] = scale·src[n·src_stride + j] for n < N, j < width (output kWrite), or
// dst[...] + scale·src[...] (kAdd): the product rounded to fp32, then the sum (never one fused
// multiply-add), so both back ends give the same bits. A LoRA B-product (N, width) added into
// its column slice of a fused projection's output (rows R apart: dst = out + offset,
// dst_stride R), and in backward that slice of the output gradient copied out, times s. An
// activation: a 16-bit table rounds the written elements, never the rest of dst's rows.
// width <= dst_stride and src_stride; src may be dst itself (equal strides), not a partial
// overlap.
ZT_KERNEL(void, add_columns,
          (Operand dst, int64_t dst_stride, ConstOperand src, int64_t src_stride, int64_t N,
           int64_t width, float scale, GradOutput output),
          (dst, dst_stride, src, src_stride, N, width, scale, output), (dst, src))
// Inverted dropout at drop probability p (0 <= p < 1): out[i] = inp[i]·k where element i is
// kept, else 0, k = 1/(1 - p) rounded to fp32 once. Kept: dropout_keep(seed, i, p)
// (runtime/dropout_mask.h: a hash of (seed, i), so every back end and thread count draws the
// same mask, about 1 - p of the elements). The one element-wise entry whose bits depend on the
// element's index: i counts from `out`, so a buffer dropped in parts draws another mask than
// whole. p = 0: out = inp, a copy. out may be inp.
ZT_KERNEL(void, dropout_forward, (Operand out, ConstOperand inp, int64_t n, float p, uint64_t seed),
          (out, inp, n, p, seed), (out, inp))
// dinp[i] += dout[i]·k where forward's mask (the same seed and p) kept element i, else += 0;
// k as forward's. p = 0: dinp += dout, accumulate's bits.
ZT_KERNEL(void, dropout_backward,
          (Operand dinp, ConstOperand dout, int64_t n, float p, uint64_t seed),
          (dinp, dout, n, p, seed), (dinp, dout))

// ---- Residual stream and loss -----------------------------------------------------------------

// out = a + b, element-wise (out may alias a or b).
ZT_KERNEL(void, residual_forward, (Operand out, ConstOperand a, ConstOperand b, int64_t n),
          (out, a, b, n), (out, a, b))
// y += x.
ZT_KERNEL(void, accumulate, (Operand y, ConstOperand x, int64_t n), (y, x, n), (y, x))

// Softmax cross-entropy over the first V of Vp columns of each of N rows of logits (N,Vp).
// losses (N) = -log softmax(row)[target]. logits_output says what becomes of the logits:
// kKeep leaves them as they are (dloss is not read); kGradient overwrites each row in place by
// its gradient dloss * (softmax - onehot(target)), padded columns set to 0. A row whose target
// is negative (kIgnoreTarget, model.h) is not trained on: its loss is 0 and, with kGradient,
// its gradient is all zeros (padded columns too).
ZT_KERNEL(void, softmax_cross_entropy,
          (float* losses, Operand logits, const int32_t* targets, int64_t N, int64_t V,
           int64_t Vp, LogitsOutput logits_output, float dloss = 0.0f),
          (losses, logits, targets, N, V, Vp, logits_output, dloss), (losses, logits, targets))

// ---- Optimizers -------------------------------------------------------------------------------

// Optimizers over a contiguous range (a parameter view or a shard of one): fp32 parameters
// and state, the gradient in its stored dtype (widened as it is read). `working` (may be
// null): after the update, working[i] = working.dtype(param[i]) in the same pass, the bits of
// cast (a mixed-precision working copy refreshed without reading the fp32 master again).
ZT_KERNEL(void, adamw,
          (float* param, ConstOperand grad, float* m, float* v, int64_t n, const AdamWArgs& args,
           Operand working = nullptr),
          (param, grad, m, v, n, args, working),
          (param, operand(grad, n), m, v, operand(working, n)))
// momentum_buf may be null when momentum == 0.
ZT_KERNEL(void, sgd,
          (float* param, ConstOperand grad, float* momentum_buf, int64_t n, const SgdArgs& args),
          (param, grad, momentum_buf, n, args), (param, operand(grad, n), momentum_buf))

// ---- Element-wise utilities and reductions ----------------------------------------------------

// dst[i] = dst_type(src[i]), round to nearest even (fp16 overflow gives ±inf).
ZT_KERNEL(void, cast, (void* dst, DType dst_type, const void* src, DType src_type, int64_t n),
          (dst, dst_type, src, src_type, n), (dst, src))
// x = float(dtype(x)) in place: every element rounded to the nearest value of `dtype`
// (round to nearest even, as cast does; fp16 overflow gives ±inf; NaN stays NaN). kF32: no-op.
ZT_KERNEL(void, round_to, (float* x, DType dtype, int64_t n), (x, dtype, n), (x))
// round_to over the rows of x (rows of row_len elements) named by rows[0, n_rows), which is
// device memory like every pointer here (a GPU must not read it on the host); a row may be
// named more than once (rounding is idempotent), rows not named keep their bits. The bits of
// round_to. kF32: no-op. (Mixed precision rounds the embedding gradient rows of a batch's
// tokens with it.)
ZT_KERNEL(void, round_rows,
          (float* x, const int32_t* rows, int64_t n_rows, int64_t row_len, DType dtype),
          (x, rows, n_rows, row_len, dtype), (x, rows))
// dst = dst_type(float(a) + float(b)) element-wise with one rounding, the sum in fp32. `a` may
// be null (read as 0: a plain rounding cast of b). dst may alias a or b when the types match.
ZT_KERNEL(void, add,
          (void* dst, DType dst_type, const void* a, DType a_type, const void* b, DType b_type,
           int64_t n),
          (dst, dst_type, a, a_type, b, b_type, n), (dst, a, b))
// x[i] = value.
ZT_KERNEL(void, fill, (Operand x, float value, int64_t n), (x, value, n), (x))
// Sum of x², x in its stored dtype, accumulated in double over fixed blocks added in order.
ZT_KERNEL(double, sum_squares, (ConstOperand x, int64_t n), (x, n), (operand(x, n)))

// clang-format on
#undef ZT_KERNEL
