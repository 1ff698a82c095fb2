#pragma once
// One table of op cases, and the checks that run them, for every
// implementation of the backend's operations that is held to the CPU backend
// (itself checked against float64 loops and finite differences in
// tests/unit/runtime/test_ops.cpp): the CUDA backend on a GPU (tests/unit/runtime/cuda/test_cuda.cpp) and the CUDA
// backend's own kernels run on the CPU (tests/cuda_cpu/test_cuda_cpu.cpp).
// Each test file instantiates the typed suite with a type that says how to
// make its backend (null: skip) and which libraries it has (cuBLASLt for
// products, cuDNN for bf16 attention; the CPU tier has neither).
//
// Tolerances: fp32 to ~1e-5 relative (1e-4 where sums are long), bf16 within
// PyTorch's bf16 bound (rtol 1.6e-2) on top of one rounding of the output.
// Determinism: reductions without atomics give the same bits twice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "tests/support/reference_math.h"

namespace trainer::kernel_cases {

// --- the table ---

struct RowsCols {
  int rows, cols;
  unsigned seed;
};
// Sizes that do not divide a block (256 threads, 8 rows per block, 32 lanes,
// 256-row chunks) beside ones that take several blocks and chunks.
inline const std::vector<RowsCols> kElementwise = {{37, 96, 7}, {1, 1, 1}, {5, 257, 2}, {300, 1001, 3}};
inline const std::vector<RowsCols> kNorms = {{300, 200, 12}, {3, 33, 4}, {257, 768, 5}, {1, 1, 6}};
inline const std::vector<RowsCols> kCrossEntropy = {{19, 3001, 27}, {2, 31, 8}, {5, 50257, 9}};

struct Embedding {
  int rows, C, V, offset, vocab_rows, T;
  unsigned seed;
};
inline const std::vector<Embedding> kEmbeddings = {{700, 48, 50, 10, 25, 35, 3}, {33, 7, 5, 0, 5, 33, 4}};

struct Attention {
  AttentionShape s;  // row is filled in from the heads
  unsigned seed;
  bool large = false;  // its own test (the CPU tier's ASan run leaves it out: ~2 min there)
};
inline AttentionShape packed(AttentionShape s) {
  s.row = (s.H + 2 * s.KVH) * s.hd;
  return s;
}
// The GPU test's shape (GQA, several cuDNN tiles); multi-head without
// grouping at an odd length; the real head sizes 32, 64 and 128.
inline const std::vector<Attention> kAttention = {
    {{2, 200, 8, 2, 64, 0}, 25, true}, {{1, 37, 4, 4, 32, 0}, 26}, {{1, 19, 6, 2, 128, 0}, 27}, {{2, 9, 2, 1, 64, 0}, 28}};
// Ring attention's chunk pairs: two chunks of T / 2 rows per sequence; head
// sizes below a warp and not a multiple of one among them.
inline const std::vector<Attention> kRingPairs = {{{1, 38, 4, 4, 32, 0}, 41}, {{2, 18, 6, 2, 128, 0}, 42},
                                                   {{2, 10, 2, 1, 16, 0}, 43}, {{1, 14, 4, 2, 96, 0}, 44}};
inline const std::vector<Attention> kRope = {
    {{2, 33, 4, 2, 16, 0}, 24}, {{1, 17, 4, 2, 32, 0}, 29}, {{2, 9, 3, 1, 64, 0}, 30}, {{1, 5, 2, 2, 128, 0}, 31}};

struct Sums {
  size_t n1, n2;  // several pieces, and a short span
  unsigned seed;
};
inline const std::vector<Sums> kSums = {{200000, 77, 28}, {65536, 1, 29}};
inline const std::vector<size_t> kAdamw = {200000, 1, 257};

// --- comparing two backends ---

using test_support::randn;

inline double tol(DType dt, double fp32) { return dt == DType::BF16 ? 1.6e-2 : fp32; }

// The same data on the reference (CPU) and the backend under test; for bf16
// the host data is rounded first.
struct Both {
  Buffer r, d;
  DType dt;
  size_t n;
};

class Pair {
 public:
  CpuBackend ref{2};
  Backend& dut;
  bool strict;
  Pair(Backend& b, bool strict_bf16) : dut(b), strict(strict_bf16) {}

  Both make(const std::vector<float>& h, DType dt = DType::F32) {
    Both b{ref.alloc(h.size(), dt, Mem::Temporaries), dut.alloc(h.size(), dt, Mem::Temporaries), dt, h.size()};
    if (dt == DType::BF16) {
      std::vector<bf16> r(h.size());
      for (size_t i = 0; i < h.size(); i++) r[i] = to_bf16(h[i]);
      ref.from_host(b.r.ref(), r.data(), r.size());
      dut.from_host(b.d.ref(), r.data(), r.size());
    } else {
      ref.from_host(b.r.ref(), h.data(), h.size());
      dut.from_host(b.d.ref(), h.data(), h.size());
    }
    return b;
  }
  Both ints(const std::vector<int32_t>& h) {
    Both b{ref.alloc(h.size(), DType::I32, Mem::Temporaries), dut.alloc(h.size(), DType::I32, Mem::Temporaries),
           DType::I32, h.size()};
    ref.from_host(b.r.ref(), h.data(), h.size());
    dut.from_host(b.d.ref(), h.data(), h.size());
    return b;
  }
  static std::vector<float> read(Backend& be, const Buffer& b) {
    std::vector<float> out(b.count());
    if (b.dtype() == DType::BF16) {
      std::vector<bf16> r(b.count());
      be.to_host(r.data(), b.ref(), b.count());
      for (size_t i = 0; i < r.size(); i++) out[i] = from_bf16(r[i]);
    } else {
      be.to_host(out.data(), b.ref(), b.count());
    }
    return out;
  }
  // |d - r| <= atol * max(1, max|r|) + rtol * |r| (+ one bf16 ulp of r for bf16 outputs).
  // Strict (the same formulas in fp32, as the CUDA kernels run on the CPU):
  // bf16 outputs also have the CPU's bits but for at most 0.1% of elements,
  // where a different fp32 summation order crossed a rounding boundary; a
  // second rounding of an intermediate changes far more.
  void expect_match(const Both& b, double rtol, double atol, const char* what) {
    if (strict && b.dt == DType::BF16) expect_bf16_steps(b, what);
    const auto r = read(ref, b.r), d = read(dut, b.d);
    double scale = 0;
    for (float x : r) scale = std::max(scale, (double)std::fabs(x));
    const double ulp = b.dt == DType::BF16 ? 1.0 / 128 : 0;
    for (size_t i = 0; i < r.size(); i++)
      ASSERT_NEAR(d[i], r[i], atol * std::max(1.0, scale) + (rtol + ulp) * std::fabs(r[i])) << what << " at " << i;
  }
  void expect_bf16_steps(const Both& b, const char* what) {
    std::vector<bf16> r(b.n), d(b.n);
    ref.to_host(r.data(), b.r.ref(), b.n);
    dut.to_host(d.data(), b.d.ref(), b.n);
    size_t differ = 0;
    for (size_t i = 0; i < b.n; i++) differ += r[i].bits != d[i].bits;
    EXPECT_LE(differ, std::max<size_t>(2, b.n / 1000))
        << what << ": " << differ << " of " << b.n << " bf16 elements differ from the CPU backend's";
  }
  // The reference's and the device's bits, every element (conversions).
  void expect_same_bits(const Both& b, const char* what) {
    const size_t bytes = b.n * dtype_size(b.dt);
    std::vector<char> r(bytes), d(bytes);
    ref.to_host(r.data(), b.r.ref(), b.n);
    dut.to_host(d.data(), b.d.ref(), b.n);
    ASSERT_EQ(0, std::memcmp(r.data(), d.data(), bytes)) << what;
  }
  void expect_bitwise(const Buffer& a, const Buffer& b, const char* what) {
    const auto x = read(dut, a), y = read(dut, b);
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << what;
  }
  // Runs f on both backends with the buffers of each.
  template <class F>
  void both(F&& f) {
    f(ref, [](Both& b) { return b.r.ref(); });
    f(dut, [](Both& b) { return b.d.ref(); });
  }
};

// --- the checks ---

inline void elementwise(Pair& p, DType dt, const RowsCols& c) {
  const int rows = c.rows, F = c.cols;
  const size_t n = (size_t)rows * F;
  Both x = p.make(randn(n, c.seed), dt), y = p.make(randn(n, c.seed + 1), dt), out = p.make(std::vector<float>(n), dt);
  p.both([&](Backend& be, auto r) { be.gelu_fwd(r(out), r(x), n); });
  p.expect_match(out, tol(dt, 1e-5), 1e-6, "gelu_fwd");
  p.both([&](Backend& be, auto r) { be.gelu_bwd(r(out), r(x), r(y), n); });
  p.expect_match(out, tol(dt, 1e-5), 1e-6, "gelu_bwd");
  p.both([&](Backend& be, auto r) { be.add(r(out), r(x), r(y), n); });
  p.expect_match(out, tol(dt, 1e-6), 0, "add");
  Both gu = p.make(randn(2 * n, c.seed + 2), dt), half = p.make(std::vector<float>(n), dt);
  Both dgu = p.make(std::vector<float>(2 * n), dt);
  p.both([&](Backend& be, auto r) { be.swiglu_fwd(r(half), r(gu), rows, F); });
  p.expect_match(half, tol(dt, 1e-5), 1e-6, "swiglu_fwd");
  p.both([&](Backend& be, auto r) { be.swiglu_bwd(r(dgu), r(gu), r(x), rows, F); });
  p.expect_match(dgu, tol(dt, 1e-5), 1e-6, "swiglu_bwd");
  Both b = p.make(randn(F, c.seed + 3), dt);
  p.both([&](Backend& be, auto r) { be.add_bias(r(x), r(b), rows, F); });
  p.expect_match(x, tol(dt, 1e-6), 0, "add_bias");
  Both db = p.make(randn(F, c.seed + 4));
  p.both([&](Backend& be, auto r) { be.bias_bwd(r(db).f32(), r(y), rows, F); });
  p.expect_match(db, 1e-5, 1e-6, "bias_bwd");
  // Views one element into their buffers: not 16-byte aligned, so a device
  // backend must not move them in vector words.
  if (n < 2) return;
  p.both([&](Backend& be, auto r) { be.add(r(out) + 1, r(x), r(y) + 1, n - 1); });
  p.expect_match(out, tol(dt, 1e-6), 0, "add (unaligned)");
}

// Conversions both ways (fp32 -> bf16 rounds to nearest even, exactly as the
// CPU backend does) and a same-type copy.
inline void conversions(Pair& p, const RowsCols& c) {
  const size_t n = (size_t)c.rows * c.cols;
  std::vector<float> h = randn(n, c.seed);
  h[0] = 1.f + 1.f / 256;  // exactly halfway between two bf16 values: rounds to even
  Both wide = p.make(h), narrow = p.make(std::vector<float>(n), DType::BF16), back = p.make(std::vector<float>(n));
  p.both([&](Backend& be, auto r) { be.convert(r(narrow), r(wide), n); });
  p.expect_same_bits(narrow, "convert fp32 -> bf16");
  p.both([&](Backend& be, auto r) { be.convert(r(back), r(narrow), n); });
  p.expect_same_bits(back, "convert bf16 -> fp32");
  Both same = p.make(std::vector<float>(n));
  p.both([&](Backend& be, auto r) { be.convert(r(same), r(wide), n); });
  p.expect_same_bits(same, "convert fp32 -> fp32");
  // Views one element in: not 16-byte aligned, so not moved in vector words.
  if (n < 2) return;
  p.both([&](Backend& be, auto r) { be.convert(r(narrow) + 1, r(wide), n - 1); });
  p.expect_same_bits(narrow, "convert fp32 -> bf16 (unaligned)");
  p.both([&](Backend& be, auto r) { be.convert(r(back), r(narrow) + 1, n - 1); });
  p.expect_same_bits(back, "convert bf16 -> fp32 (unaligned)");
}

inline void norms(Pair& p, DType dt, const RowsCols& c, bool with_bias) {
  const int rows = c.rows, C = c.cols;
  const size_t n = (size_t)rows * C;
  const unsigned s = c.seed;
  Both x = p.make(randn(n, s), dt), w = p.make(randn(C, s + 1), dt), g = p.make(randn(n, s + 3), dt);
  Both b = with_bias ? p.make(randn(C, s + 2), dt) : Both{};
  Both out = p.make(std::vector<float>(n), dt), dx = p.make(randn(n, s + 4), dt);
  Both mean = p.make(std::vector<float>(rows)), rstd = p.make(std::vector<float>(rows));
  Both dw = p.make(randn(C, s + 5)), db = p.make(randn(C, s + 6));
  const auto bias = [&](auto r) { return with_bias ? CRef(r(b)) : CRef(); };
  p.both([&](Backend& be, auto r) {
    be.layernorm_fwd(r(out), r(mean).f32(), r(rstd).f32(), r(x), r(w), bias(r), rows, C, 1e-5f);
  });
  p.expect_match(out, tol(dt, 1e-5), 1e-6, with_bias ? "layernorm_fwd" : "layernorm_fwd without bias");
  p.expect_match(mean, 1e-5, 1e-6, "layernorm mean");
  p.expect_match(rstd, 1e-5, 1e-6, "layernorm rstd");
  p.both([&](Backend& be, auto r) {
    be.layernorm_bwd(r(dx), r(dw).f32(), with_bias ? r(db).f32() : nullptr, r(g), r(x), r(w), r(mean).f32(),
                     r(rstd).f32(), rows, C);
  });
  p.expect_match(dx, tol(dt, 1e-5), 1e-6, "layernorm dx");
  p.expect_match(dw, 1e-4, 1e-5, "layernorm dw");  // sums over rows in another order
  p.expect_match(db, 1e-4, 1e-5, "layernorm db");
  p.both([&](Backend& be, auto r) { be.rmsnorm_fwd(r(out), r(rstd).f32(), r(x), r(w), rows, C, 1e-5f); });
  p.expect_match(out, tol(dt, 1e-5), 1e-6, "rmsnorm_fwd");
  // A fresh dx: the one above holds both backends' (slightly different) sums.
  Both dx2 = p.make(randn(n, s + 7), dt);
  p.both([&](Backend& be, auto r) { be.rmsnorm_bwd(r(dx2), r(dw).f32(), r(g), r(x), r(w), r(rstd).f32(), rows, C); });
  p.expect_match(dx2, tol(dt, 1e-5), 1e-6, "rmsnorm dx");
  p.expect_match(dw, 1e-4, 1e-5, "rmsnorm dw");
}

inline void embeddings(Pair& p, const Embedding& c) {
  std::vector<int32_t> tok(c.rows);
  std::mt19937 rng(c.seed);
  for (auto& t : tok) t = rng() % c.V;  // many repeats, some outside the shard
  Both tk = p.ints(tok), wte = p.make(randn((size_t)c.vocab_rows * c.C, c.seed + 1));
  Both wpe = p.make(randn((size_t)c.T * c.C, c.seed + 2));
  Both out = p.make(std::vector<float>((size_t)c.rows * c.C)), g = p.make(randn((size_t)c.rows * c.C, c.seed + 3));
  Both dwte = p.make(randn((size_t)c.vocab_rows * c.C, c.seed + 4)), dwpe = p.make(randn((size_t)c.T * c.C, c.seed + 5));
  p.both([&](Backend& be, auto r) {
    be.embedding_fwd(r(out), r(tk).i32(), c.rows, r(wte), c.offset, c.vocab_rows, c.C);
    be.position_fwd(r(out), r(wpe), c.rows, 5, c.T, c.C);
  });
  p.expect_match(out, 1e-6, 0, "embedding + position fwd");
  Buffer first = p.dut.alloc(dwte.n, DType::F32, Mem::Temporaries);
  p.dut.copy(first.ref(), dwte.d.ref(), dwte.n);
  p.both([&](Backend& be, auto r) {
    be.embedding_bwd(r(dwte).f32(), r(g), r(tk).i32(), c.rows, c.offset, c.vocab_rows, c.C);
  });
  p.expect_match(dwte, 1e-5, 1e-6, "embedding_bwd");
  p.dut.embedding_bwd(first.ref().f32(), g.d.ref(), tk.d.ref().i32(), c.rows, c.offset, c.vocab_rows, c.C);
  p.expect_bitwise(first, dwte.d, "embedding_bwd twice");
  p.both([&](Backend& be, auto r) { be.position_bwd(r(dwpe).f32(), r(g), c.rows, 5, c.T, c.C); });
  p.expect_match(dwpe, 1e-5, 1e-6, "position_bwd");
}

inline void rope(Pair& p, DType dt, const Attention& c) {
  const AttentionShape s = packed(c.s);
  Both q = p.make(randn((size_t)s.B * s.T * s.row, c.seed), dt);
  // Plain, and Llama 3.1's scaling with an original length that puts the
  // head's pairs in all three of its bands.
  const RopeFreqs llama3{500000.f, {RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 4 * s.T}};
  for (const RopeFreqs& f : {RopeFreqs{}, llama3})
    for (bool inv : {false, true}) {
      p.both([&](Backend& be, auto r) { be.rope(r(q), s, f, inv); });
      p.expect_match(q, tol(dt, 1e-5), 1e-6, inv ? "rope inverse" : "rope");
    }
}

inline void attention(Pair& p, DType dt, const Attention& c) {
  const AttentionShape s = packed(c.s);
  const size_t nin = (size_t)s.B * s.T * s.row, nout = (size_t)s.B * s.T * s.H * s.hd;
  Both qkv = p.make(randn(nin, c.seed), dt), out = p.make(std::vector<float>(nout), dt);
  Both dout = p.make(randn(nout, c.seed + 1), dt);
  Both stats = p.make(std::vector<float>((size_t)s.B * s.H * s.T * Backend::kAttentionStats));
  Both dqkv = p.make(std::vector<float>(nin), dt);
  p.both([&](Backend& be, auto r) { be.attention_fwd(r(out), r(stats).f32(), r(qkv), s); });
  // cuDNN multiplies bf16 probabilities by V: absolute errors ~2^-9 of the
  // output's scale, also where an output is near zero.
  const double att_atol = dt == DType::BF16 ? 2e-2 : 1e-5;
  p.expect_match(out, tol(dt, 1e-5), att_atol, "attention fwd");
  // Stats may differ in form ((max, sum) or (lse, 1)); max + log(sum) must agree.
  const auto sr = Pair::read(p.ref, stats.r), sd = Pair::read(p.dut, stats.d);
  for (size_t i = 0; i < sr.size(); i += 2)
    ASSERT_NEAR(sd[i] + std::log(sd[i + 1]), sr[i] + std::log(sr[i + 1]), 1e-4 * (1 + std::fabs(sr[i]))) << i;
  p.both([&](Backend& be, auto r) { be.attention_bwd(r(dqkv), r(dout), r(qkv), r(out), r(stats).f32(), s); });
  p.expect_match(dqkv, tol(dt, 1e-4), att_atol, "attention bwd");
  Both again = p.make(std::vector<float>(nin), dt);
  p.dut.attention_bwd(again.d.ref(), dout.d.ref(), qkv.d.ref(), out.d.ref(), stats.d.ref().f32(), s);
  p.expect_bitwise(again.d, dqkv.d, "attention bwd twice");
}

// Ring attention's pair ops as the ring calls them: this rank's k|v packed,
// its two chunks against its own block (causal on the diagonal, the late
// chunk seeing the early one whole) and against an earlier rank's block
// (both chunks seeing its early chunk, the late one its late chunk too),
// merged into one running output, and once against keys read in place from
// the packed q|k|v rows (kv_row = row); then the output, and the backward of
// each pair into dQ and the blocks' dK|dV. Each op is fed the reference's
// inputs, so a bf16 result of the output and gradient ops is held to the
// CPU's bits. A bf16 pair is cuDNN's on a GPU, its output and gradients
// rounded to bf16 once per pair before our kernels merge and add them (held
// within cuDNN's bf16 bounds, as attention is); the fp32 pairs are our own.
inline void ring_pairs(Pair& p, DType dt, const Attention& c) {
  const AttentionShape s = packed(c.s);
  const int chunk = s.T / 2, kv_row = 2 * s.KVH * s.hd;
  const size_t rows = (size_t)s.B * s.T, width = (size_t)s.H * s.hd, nstats = (size_t)s.B * s.H * s.T * 2;
  Both qkv = p.make(randn(rows * s.row, c.seed), dt), own = p.make(std::vector<float>(rows * kv_row), dt);
  Both other = p.make(randn(rows * kv_row, c.seed + 1), dt);
  p.both([&](Backend& be, auto r) { be.attention_kv_pack(r(own), r(qkv), s); });
  p.expect_match(own, 0, 0, "attention_kv_pack");
  const auto pair = [&](int q_half, int k_half, bool causal) {
    return AttentionPair{q_half * chunk, k_half * chunk, chunk, causal, s.T, kv_row, 0, s.KVH * s.hd};
  };
  struct Visit {
    Both* kv;
    AttentionPair pair;
  };
  AttentionPair in_place = pair(0, 0, true);
  in_place.kv_row = s.row, in_place.k_off = s.H * s.hd, in_place.v_off = (s.H + s.KVH) * s.hd;
  const std::vector<Visit> visits = {{&own, pair(0, 0, true)},    {&own, pair(1, 0, false)},
                                     {&own, pair(1, 1, true)},    {&other, pair(0, 0, false)},
                                     {&other, pair(1, 0, false)}, {&other, pair(1, 1, false)},
                                     {&qkv, in_place}};
  std::vector<float> start(nstats, 0.f);
  for (size_t i = 0; i < nstats; i += 2) start[i] = -INFINITY;
  Both acc = p.make(std::vector<float>(rows * width)), stats = p.make(start);
  for (const Visit& v : visits)
    p.both([&](Backend& be, auto r) { be.attention_pair_fwd(r(acc).f32(), r(stats).f32(), r(qkv), r(*v.kv), s, v.pair); });
  // The running state in the form every route agrees on (the merge of
  // cuDNN's blocks keeps the largest block log-sum-exp as its max): the
  // output so far acc / sum, and max + log(sum).
  const double att_atol = dt == DType::BF16 ? 2e-2 : 1e-6;
  {
    const auto ar = Pair::read(p.ref, acc.r), ad = Pair::read(p.dut, acc.d);
    const auto sr = Pair::read(p.ref, stats.r), sd = Pair::read(p.dut, stats.d);
    for (size_t i = 0; i < nstats; i += 2)
      ASSERT_NEAR(sd[i] + std::log(sd[i + 1]), sr[i] + std::log(sr[i + 1]), 1e-4 * (1 + std::fabs(sr[i])))
          << "attention_pair_fwd (max + log(sum)) at " << i / 2;
    const auto sum_of = [&](const std::vector<float>& st, size_t e) {  // e over [B*T, H*hd]
      const size_t t = e / width % s.T, b = e / width / s.T, h = e % width / s.hd;
      return st[((b * s.H + h) * s.T + t) * 2 + 1];
    };
    double scale = 0;
    for (size_t e = 0; e < ar.size(); e++) scale = std::max(scale, std::fabs((double)ar[e] / sum_of(sr, e)));
    for (size_t e = 0; e < ar.size(); e++) {
      const double r = ar[e] / sum_of(sr, e), d = ad[e] / sum_of(sd, e);
      ASSERT_NEAR(d, r, att_atol * std::max(1.0, scale) + tol(dt, 1e-5) * std::fabs(r))
          << "attention_pair_fwd (the running output / sum) at " << e;
    }
  }
  Both acc_in = p.make(Pair::read(p.ref, acc.r)), stats_in = p.make(Pair::read(p.ref, stats.r));
  Both out = p.make(std::vector<float>(rows * width), dt);
  p.both([&](Backend& be, auto r) { be.attention_pair_out(r(out), r(acc_in).f32(), r(stats_in).f32(), s); });
  p.expect_match(out, 1e-6, 1e-7, "attention_pair_out");
  Both dout = p.make(randn(rows * width, c.seed + 2), dt), dq = p.make(std::vector<float>(rows * width));
  Both dkv_own = p.make(std::vector<float>(rows * kv_row)), dkv_other = p.make(std::vector<float>(rows * kv_row));
  const auto backward = [&](Backend& be, auto r, Both& into_q, Both& into_own, Both& into_other) {
    for (const Visit& v : visits)
      be.attention_pair_bwd(r(into_q).f32(), r(v.kv == &other ? into_other : into_own).f32(), r(dout), r(qkv),
                            r(*v.kv), r(out), r(stats_in).f32(), s, v.pair);
  };
  p.both([&](Backend& be, auto r) { backward(be, r, dq, dkv_own, dkv_other); });
  const double grad_atol = dt == DType::BF16 ? 2e-2 : 1e-5;
  p.expect_match(dq, tol(dt, 1e-4), grad_atol, "attention_pair_bwd (dq)");
  p.expect_match(dkv_own, tol(dt, 1e-4), grad_atol, "attention_pair_bwd (the own block's dk, dv)");
  p.expect_match(dkv_other, tol(dt, 1e-4), grad_atol, "attention_pair_bwd (the other block's dk, dv)");
  Both dq_in = p.make(Pair::read(p.ref, dq.r)), dkv_in = p.make(Pair::read(p.ref, dkv_own.r));
  Both dqkv = p.make(std::vector<float>(rows * s.row), dt);
  p.both([&](Backend& be, auto r) { be.attention_pair_grads(r(dqkv), r(dq_in).f32(), r(dkv_in).f32(), s); });
  p.expect_match(dqkv, 0, 0, "attention_pair_grads");
  Both again = p.make(std::vector<float>(rows * width)), again_own = p.make(std::vector<float>(rows * kv_row));
  Both again_other = p.make(std::vector<float>(rows * kv_row));
  backward(p.dut, [](Both& b) { return b.d.ref(); }, again, again_own, again_other);
  p.expect_bitwise(again.d, dq.d, "attention_pair_bwd (dq) twice");
  p.expect_bitwise(again_own.d, dkv_own.d, "attention_pair_bwd (dk, dv) twice");
  p.expect_bitwise(again_other.d, dkv_other.d, "attention_pair_bwd (the other block's dk, dv) twice");
}

inline void cross_entropy(Pair& p, const RowsCols& c) {
  const int rows = c.rows, V = c.cols, off = V / 3;
  std::vector<int32_t> tg(rows);
  for (int r = 0; r < rows; r++) tg[r] = (r * 397) % (V + V / 2);  // some outside the shard
  const std::vector<float> h = randn((size_t)rows * V, c.seed, 3.f);
  Both t = p.ints(tg), logits = p.make(h), untouched = p.make(h);
  Both mx = p.make(std::vector<float>(rows)), sum = p.make(std::vector<float>(rows));
  Both tgt = p.make(std::vector<float>(rows)), loss = p.make(std::vector<float>(rows));
  p.both([&](Backend& be, auto r) {
    be.ce_row_stats(r(mx).f32(), r(sum).f32(), r(tgt).f32(), r(logits).f32(), r(t).i32(), rows, V, off);
  });
  p.expect_match(mx, 0, 0, "row max");
  p.expect_match(tgt, 0, 0, "target logits");
  p.expect_match(sum, 1e-5, 0, "exp sums");
  p.expect_bitwise(logits.d, untouched.d, "the statistics pass leaves the logits");
  // A shard's sum moved to a larger max (as tensor parallelism's is).
  std::vector<float> hm = Pair::read(p.ref, mx.r);
  for (int r = 0; r < rows; r++) hm[r] += 0.5f + r % 3;
  Both global = p.make(hm), rebased = p.make(Pair::read(p.ref, sum.r));
  p.both([&](Backend& be, auto r) { be.ce_rebase(r(rebased).f32(), r(mx).f32(), r(global).f32(), rows); });
  p.expect_match(rebased, 1e-6, 0, "rebased sums");
  p.both([&](Backend& be, auto r) {
    be.ce_finish(r(loss).f32(), r(logits).f32(), r(t).i32(), r(mx).f32(), r(sum).f32(), r(tgt).f32(), rows, V, off,
                 0.25f);
  });
  p.expect_match(loss, 1e-5, 1e-6, "losses");
  p.expect_match(logits, 1e-5, 1e-7, "dlogits");
}

// Sums of squares in two groups, and a plain sum (the step's loss rides in
// the same call) in a third, which a double loop checks on the CPU too.
inline void sums_of_squares(Pair& p, const Sums& c) {
  const std::vector<float> hb = randn(c.n2, c.seed + 1);
  Both a = p.make(randn(c.n1, c.seed)), b = p.make(hb);
  const auto run = [&](Backend& be, double* s) {
    const bool d = &be == &p.dut;
    const float *x = (d ? a.d : a.r).ref().f32(), *y = (d ? b.d : b.r).ref().f32();
    be.sumsq_groups({{x, c.n1, 0}, {y, c.n2, 1}, {x, 10, 1}, {y, c.n2, 2, false}}, s, 3);
  };
  double sr[3], sd[3], sd2[3];
  run(p.ref, sr), run(p.dut, sd), run(p.dut, sd2);
  double plain = 0;
  for (float x : hb) plain += x;
  EXPECT_NEAR(sr[2], plain, 1e-12 * (1 + std::fabs(plain))) << "the CPU backend's plain sum";
  for (int k = 0; k < 3; k++) {
    EXPECT_NEAR(sd[k], sr[k], 1e-12 * (1 + std::fabs(sr[k]))) << k;
    EXPECT_EQ(sd[k], sd2[k]) << "sums twice";
  }
}

// AdamW on fp32 masters, with and without the bf16 compute copy.
inline void adamw(Pair& p, size_t n, bool bf16_copy) {
  Both g = p.make(randn(n, 28)), w = p.make(randn(n, 30)), m = p.make(randn(n, 31, 0.1f));
  Both v = p.make(std::vector<float>(n, 0.01f)), copy = p.make(std::vector<float>(n), DType::BF16);
  p.both([&](Backend& be, auto r) {
    be.adamw(r(w).f32(), r(g).f32(), r(m).f32(), r(v).f32(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.3f, 0.7f,
             bf16_copy ? r(copy) : Ref());
  });
  p.expect_match(w, 1e-6, 1e-7, "adamw p");
  p.expect_match(m, 1e-6, 1e-7, "adamw m");  // beta1 m + (1 - beta1) g cancels where signs differ
  p.expect_match(v, 1e-6, 1e-7, "adamw v");
  // The copy is the updated master rounded once: equal to the CPU's wherever
  // the masters agree to the bit, and never off by more than one bf16 step.
  if (bf16_copy) p.expect_match(copy, 0, 0, "adamw bf16 copy");
}

// --- the typed suite ---

// Dut: static std::unique_ptr<Backend> make(std::string* why_not) (null: skip),
// static constexpr bool kCudnn (bf16 attention available), kStrict (bf16
// outputs held to the CPU's bits, see Pair::expect_match).
template <class Dut>
struct KernelOps : ::testing::Test {
  std::unique_ptr<Backend> dut;
  std::unique_ptr<Pair> p;
  void SetUp() override {
    std::string why;
    dut = Dut::make(&why);
    if (!dut) GTEST_SKIP() << why;
    p = std::make_unique<Pair>(*dut, Dut::kStrict);
  }
};
TYPED_TEST_SUITE_P(KernelOps);

TYPED_TEST_P(KernelOps, Elementwise) {
  for (DType dt : {DType::F32, DType::BF16})
    for (const RowsCols& c : kElementwise) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << c.rows << "x" << c.cols);
      elementwise(*this->p, dt, c);
    }
}
TYPED_TEST_P(KernelOps, Conversions) {
  for (const RowsCols& c : kElementwise) conversions(*this->p, c);
}
TYPED_TEST_P(KernelOps, Norms) {
  for (DType dt : {DType::F32, DType::BF16})
    for (const RowsCols& c : kNorms)
      for (bool bias : {true, false}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << c.rows << "x" << c.cols << (bias ? "" : " no bias"));
        norms(*this->p, dt, c, bias);
      }
}
TYPED_TEST_P(KernelOps, Embeddings) {
  for (const Embedding& c : kEmbeddings) embeddings(*this->p, c);
}
TYPED_TEST_P(KernelOps, Rope) {
  for (DType dt : {DType::F32, DType::BF16})
    for (const Attention& c : kRope) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " hd " << c.s.hd);
      rope(*this->p, dt, c);
    }
}
inline void attention_cases(Pair& p, DType dt, bool large) {
  for (const Attention& c : kAttention) {
    if (c.large != large) continue;
    SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B " << c.s.B << " T " << c.s.T << " H " << c.s.H
                                    << " KVH " << c.s.KVH << " hd " << c.s.hd);
    attention(p, dt, c);
  }
}
TYPED_TEST_P(KernelOps, AttentionFp32) { attention_cases(*this->p, DType::F32, false); }
TYPED_TEST_P(KernelOps, AttentionFp32Large) { attention_cases(*this->p, DType::F32, true); }
TYPED_TEST_P(KernelOps, AttentionBf16) {
  if (!TypeParam::kCudnn) GTEST_SKIP() << "bf16 attention is cuDNN's";
  attention_cases(*this->p, DType::BF16, false);
  attention_cases(*this->p, DType::BF16, true);
}
TYPED_TEST_P(KernelOps, RingPairs) {
  for (DType dt : {DType::F32, DType::BF16})
    for (const Attention& c : kRingPairs) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B " << c.s.B << " T " << c.s.T << " H " << c.s.H
                                      << " KVH " << c.s.KVH << " hd " << c.s.hd);
      ring_pairs(*this->p, dt, c);
    }
}
TYPED_TEST_P(KernelOps, CrossEntropy) {
  for (const RowsCols& c : kCrossEntropy) cross_entropy(*this->p, c);
}
TYPED_TEST_P(KernelOps, SumsOfSquares) {
  for (const Sums& c : kSums) sums_of_squares(*this->p, c);
}
TYPED_TEST_P(KernelOps, Adamw) {
  for (size_t n : kAdamw)
    for (bool copy : {false, true}) adamw(*this->p, n, copy);
}
REGISTER_TYPED_TEST_SUITE_P(KernelOps, Elementwise, Conversions, Norms, Embeddings, Rope, AttentionFp32,
                            AttentionFp32Large, AttentionBf16, RingPairs, CrossEntropy, SumsOfSquares, Adamw);

}  // namespace trainer::kernel_cases
