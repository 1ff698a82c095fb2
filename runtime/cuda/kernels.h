#pragma once
// Launchers for the CUDA backend's own kernels (runtime/cuda/*.cu). Each
// queues its work on `s` and returns. Semantics are those of the matching
// Backend method (runtime/backend.h); what differs is said here. Reductions
// that the CPU backend runs in a fixed order run in a fixed order here too
// (fixed row chunks, fixed shuffle trees, no floating-point atomics), so the
// same inputs give the same bits run after run.
#include <cuda_runtime.h>

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainer::cuda {

// Kernels that read several activations as one element type check it: a
// mix (which the CPU backend would widen) fails loudly instead of misreading.
inline void require_same_type(const char* op, std::initializer_list<DType> types) {
  for (DType t : types)
    if (t != *types.begin()) throw std::logic_error(std::string("CUDA ") + op + ": activations of different element types");
}


void convert(cudaStream_t s, Ref dst, CRef src, size_t n);
void add(cudaStream_t s, Ref out, CRef a, CRef b, size_t n);
void add_bias(cudaStream_t s, Ref y, CRef b, int rows, int cols);

// Column sums of [rows, cols] go through fixed chunks of rows: partials
// [chunks, cols] in `scratch`, then summed in chunk order.
constexpr int kRowChunk = 256;
inline size_t colsum_scratch_floats(int rows, int cols, int sums = 1) {
  return (size_t)((rows + kRowChunk - 1) / kRowChunk) * cols * sums;
}
void bias_bwd(cudaStream_t s, float* db, CRef dy, int rows, int cols, float* scratch);

void embedding_fwd(cudaStream_t s, Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset,
                   int vocab_rows, int C);
// Sorts (token, row) pairs with CUB's stable radix sort, then one block per
// distinct token adds its rows in row order: deterministic, no atomics.
size_t embedding_bwd_scratch_bytes(int rows);
void embedding_bwd(cudaStream_t s, float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                   int vocab_rows, int C, void* scratch, size_t scratch_bytes);
void position_fwd(cudaStream_t s, Ref out, CRef wpe, int rows, int row_offset, int T, int C);
void position_bwd(cudaStream_t s, float* dwpe, CRef dout, int rows, int row_offset, int T, int C);

void layernorm_fwd(cudaStream_t s, Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                   float eps);
void layernorm_bwd(cudaStream_t s, Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                   const float* rstd, int rows, int C, float* scratch /* colsum_scratch_floats(rows, C, 2) */);
void rmsnorm_fwd(cudaStream_t s, Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps);
void rmsnorm_bwd(cudaStream_t s, Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C,
                 float* scratch /* colsum_scratch_floats(rows, C) */);

void gelu_fwd(cudaStream_t s, Ref out, CRef x, size_t n);
void gelu_bwd(cudaStream_t s, Ref dx, CRef x, CRef dout, size_t n);
void swiglu_fwd(cudaStream_t s, Ref out, CRef gate_up, int rows, int F);
void swiglu_bwd(cudaStream_t s, Ref dgate_up, CRef gate_up, CRef dout, int rows, int F);
// RoPE: the angles as a table [2][T][hd/2] (cos, then sin) computed in
// double and rounded to fp32 as the CPU backend computes them, once per
// (T, hd, frequencies); the rotation reads it (inverse: the transpose rotation).
inline size_t rope_table_floats(int T, int hd) { return 2 * (size_t)T * (hd / 2); }
void rope_table(cudaStream_t s, float* table, int T, int hd, const RopeFreqs& freqs);
void rope(cudaStream_t s, Ref qkv, const AttentionShape& sh, const float* table, bool inverse);

void ce_row_stats(cudaStream_t s, float* max, float* sum, float* target, const float* logits,
                  const int32_t* targets, int rows, int V, int vocab_offset);
void ce_rebase(cudaStream_t s, float* sum, const float* max, const float* global_max, int rows);
void ce_finish(cudaStream_t s, float* losses, float* logits, const int32_t* targets, const float* max,
               const float* sum, const float* target, int rows, int V, int vocab_offset, float grad_scale);

// Sums of squares (or plain sums): one block per piece of at most kSumPiece
// elements of one span, partials in double, then each group's partials in
// piece order.
constexpr size_t kSumPiece = 1 << 16;
struct SumPiece {
  const float* x;
  size_t n;
  int group;
  int square;  // 0: the plain sum (Backend::SumSpan::square)
};
void sumsq_pieces(cudaStream_t s, const SumPiece* pieces, int npieces, double* partials, double* sums, int groups);
// The piece table of a set of spans (host memory; uploaded once per set).
inline std::vector<SumPiece> sum_pieces(const std::vector<Backend::SumSpan>& spans) {
  std::vector<SumPiece> pieces;
  for (const Backend::SumSpan& sp : spans)
    for (size_t i = 0; i < sp.n; i += kSumPiece)
      pieces.push_back({sp.x + i, std::min(kSumPiece, sp.n - i), sp.group, sp.square ? 1 : 0});
  return pieces;
}

// With `copy`, the updated weights are also written there (bf16) in the same pass.
void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2, float grad_scale,
           Ref copy);

// fp32 causal attention (the fp32 precision path; bf16 goes through cuDNN):
// one warp per query row with an online softmax, stats (max, sum) as the CPU
// backend keeps them. Backward: one warp per query row for dQ, one warp per
// key row (owning every query head of its kv group) for dK and dV.
size_t attention_bwd_scratch_floats(const AttentionShape& sh);
void attention_fwd_f32(cudaStream_t s, float* out, float* stats, const float* qkv, const AttentionShape& sh);
void attention_bwd_f32(cudaStream_t s, float* dqkv, const float* dout, const float* qkv, const float* stats,
                       const AttentionShape& sh, float* scratch);
// Ring attention's chunk pairs (context parallelism; kernels_ring_attention.cu).
// fp32: our own kernels, one warp per query row merging the pair's keys into
// the running output and its (max, sum) statistics online; backward one warp
// per query row (dQ, and D = rowsum(dO * O) into `scratch`,
// attention_pair_bwd_scratch_floats) and one per key row of the block (dK,
// dV over its kv group's query heads).
void attention_pair_fwd(cudaStream_t s, float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& sh,
                        const AttentionPair& p);
void attention_pair_out(cudaStream_t s, Ref out, const float* acc, const float* stats, const AttentionShape& sh);
size_t attention_pair_bwd_scratch_floats(const AttentionShape& sh, const AttentionPair& p);
void attention_pair_bwd(cudaStream_t s, float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out,
                        const float* stats, const AttentionShape& sh, const AttentionPair& p, float* scratch);
void attention_kv_pack(cudaStream_t s, Ref kv, CRef qkv, const AttentionShape& sh);
void attention_pair_grads(cudaStream_t s, Ref dqkv, const float* dq, const float* dkv, const AttentionShape& sh);
// bf16: cuDNN computes each pair (CudnnSdpa::pair_forward/pair_backward) and
// these carry its results into the ring's fp32 state. attention_block_merge
// folds the block's output out_blk [B*rows, H*hd] and log-sum-exp lse_blk
// [B*H*rows] into acc and stats at the pair's query rows;
// attention_pair_lse writes the final log-sum-exp of the pair's query rows
// [B*H*rows] from stats; attention_block_grads_add adds the pair's gradient
// dqkv_blk [B*rows, row] (dQ heads, then dK, dV) into dq at the query rows
// and dkv at the block's rows.
// Throws (std::logic_error naming op) unless the pair's rows lie inside
// the chunk buffers and the heads group over the kv heads: before a pair
// goes to cuDNN, which does not check.
void check_attention_pair(const char* op, const AttentionShape& sh, const AttentionPair& p);
void attention_block_merge(cudaStream_t s, float* acc, float* stats, CRef out_blk, const float* lse_blk,
                           const AttentionShape& sh, const AttentionPair& p);
void attention_pair_lse(cudaStream_t s, float* lse, const float* stats, const AttentionShape& sh,
                        const AttentionPair& p);
void attention_block_grads_add(cudaStream_t s, float* dq, float* dkv, CRef dqkv_blk, const AttentionShape& sh,
                               const AttentionPair& p);
// Between cuDNN's log-sum-exp [B,H,T] and the (max, sum) pairs of the stats
// contract: (lse, 1) forward, max + log(sum) backward.
void lse_to_stats(cudaStream_t s, float* stats, const float* lse, size_t rows);
void stats_to_lse(cudaStream_t s, float* lse, const float* stats, size_t rows);

}  // namespace trainer::cuda
