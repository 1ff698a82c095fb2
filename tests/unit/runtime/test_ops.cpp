// Every backend op: forward against a plain double-precision loop, backward
// against central finite differences of that same double reference. The
// references below are written independently of runtime/cpu/.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/errors.h"
#include "parallel/context_chunks.h"
#include "tests/support/reference_math.h"

using namespace trainer;
using Vec = std::vector<double>;

namespace {

using test_support::randn;
Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Central differences of a scalar function of x.
Vec numeric_grad(const std::function<double(const Vec&)>& f, const Vec& x, double h = 1e-5) {
  return test_support::central_differences(f, x, h);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

void expect_close(const std::vector<float>& got, const Vec& want, double rtol, double atol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); i++)
    ASSERT_NEAR(got[i], want[i], atol * std::max(1.0, scale) + rtol * std::fabs(want[i]))
        << what << " at " << i;
}

struct Fixture : ::testing::Test {
  CpuBackend be{2};
};

// ---- plain double references -------------------------------------------

Vec ref_matmul(bool ta, bool tb, int M, int N, int K, const Vec& A, const Vec& B) {
  Vec C((size_t)M * N, 0.0);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += (ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) *
             (tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j]);
      C[(size_t)i * N + j] = s;
    }
  return C;
}

Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int rows, int C, double eps) {
  Vec out(x.size());
  for (int r = 0; r < rows; r++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[r * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    v /= C;
    for (int c = 0; c < C; c++)
      out[r * C + c] = (x[r * C + c] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return out;
}

Vec ref_rmsnorm(const Vec& x, const Vec& w, int rows, int C, double eps) {
  Vec out(x.size());
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += x[r * C + c] * x[r * C + c];
    const double s = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) out[r * C + c] = x[r * C + c] * s * w[c];
  }
  return out;
}

double ref_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_silu(double x) { return x / (1 + std::exp(-x)); }

// Rotate-half RoPE on the q and k heads of packed rows [B*T, row].
Vec ref_rope(Vec qkv, const AttentionShape& s, double theta) {
  const int half = s.hd / 2;
  for (int bt = 0; bt < s.B * s.T; bt++) {
    const int t = bt % s.T;
    for (int h = 0; h < s.H + s.KVH; h++) {
      double* x = &qkv[(size_t)bt * s.row + h * s.hd];
      for (int i = 0; i < half; i++) {
        const double ang = t * std::pow(theta, -2.0 * i / s.hd);
        const double a = x[i], b = x[i + half];
        x[i] = a * std::cos(ang) - b * std::sin(ang);
        x[i + half] = b * std::cos(ang) + a * std::sin(ang);
      }
    }
  }
  return qkv;
}

Vec ref_attention(const Vec& qkv, const AttentionShape& s) {
  Vec out((size_t)s.B * s.T * s.H * s.hd, 0.0);
  const int group = s.H / s.KVH;
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++) {
      const int kv = h / group;
      for (int i = 0; i < s.T; i++) {
        const double* q = &qkv[((size_t)b * s.T + i) * s.row + h * s.hd];
        std::vector<double> sc(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; j++) {
          const double* k = &qkv[((size_t)b * s.T + j) * s.row + (s.H + kv) * s.hd];
          double d = 0;
          for (int c = 0; c < s.hd; c++) d += q[c] * k[c];
          sc[j] = d / std::sqrt((double)s.hd);
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; j++) sum += (sc[j] = std::exp(sc[j] - mx));
        double* o = &out[((size_t)b * s.T + i) * s.H * s.hd + h * s.hd];
        for (int j = 0; j <= i; j++) {
          const double* v = &qkv[((size_t)b * s.T + j) * s.row + (s.H + s.KVH + kv) * s.hd];
          for (int c = 0; c < s.hd; c++) o[c] += sc[j] / sum * v[c];
        }
      }
    }
  return out;
}

Vec ref_cross_entropy(const Vec& logits, const std::vector<int32_t>& tgt, int rows, int V) {
  Vec loss(rows);
  for (int r = 0; r < rows; r++) {
    double mx = -1e300, sum = 0;
    for (int j = 0; j < V; j++) mx = std::max(mx, logits[r * V + j]);
    for (int j = 0; j < V; j++) sum += std::exp(logits[r * V + j] - mx);
    loss[r] = std::log(sum) + mx - logits[r * V + tgt[r]];
  }
  return loss;
}

}  // namespace

TEST_F(Fixture, MatmulAllTransposes) {
  const int M = 7, N = 5, K = 9;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      auto A = randn((size_t)M * K, 1), B = randn((size_t)K * N, 2), C = randn((size_t)M * N, 3);
      Vec want = ref_matmul(ta, tb, M, N, K, to_d(A), to_d(B));
      for (size_t i = 0; i < want.size(); i++) want[i] = 0.5 * want[i] + 2.0 * C[i];
      be.matmul(ta, tb, M, N, K, 0.5f, A.data(), B.data(), 2.0f, C.data());
      expect_close(C, want, 1e-5, 1e-6, "matmul");
    }
}

// A block of rows between two pitches (context parallelism's all-to-all
// packs with it): every element of the block moved, nothing around it.
TEST_F(Fixture, CopyRowsMovesABlockBetweenPitches) {
  const size_t rows = 3, cols = 4, src_pitch = 7, dst_pitch = 5;
  const std::vector<float> src = randn(rows * src_pitch + 2, 1);
  std::vector<float> dst(rows * dst_pitch + 1, -1.f), want = dst;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) want[1 + r * dst_pitch + c] = src[2 + r * src_pitch + c];
  be.copy_rows(dst.data() + 1, dst_pitch, const_cast<float*>(src.data()) + 2, src_pitch, rows, cols);
  EXPECT_EQ(dst, want);
}

// The Mixture-of-Experts rows by index against loops: gather (weighted,
// -1 a zero row), combine (accumulating, -1 skipped) and the row dots.
TEST_F(Fixture, RowsByIndexGatherCombineAndDot) {
  const int S = 5, rows = 4, k = 3, cols = 6, n = rows * k;
  const std::vector<float> src = randn((size_t)S * cols, 1), a = randn((size_t)rows * cols, 2), w = randn(n, 3);
  const std::vector<int32_t> index = {4, 0, -1, 2, 2, 1, -1, -1, 3, 0, 4, 1};
  std::vector<float> gathered((size_t)n * cols, -7.f), out = randn((size_t)rows * cols, 4), dots(n, -7.f);
  Vec want_g((size_t)n * cols), want_out = to_d(out), want_dots(n);
  for (int i = 0; i < n; i++)
    for (int c = 0; c < cols; c++) want_g[(size_t)i * cols + c] = index[i] < 0 ? 0.0 : (double)w[i] * src[(size_t)index[i] * cols + c];
  for (int t = 0; t < rows; t++)
    for (int j = 0; j < k; j++) {
      const int p = t * k + j;
      if (index[p] < 0) continue;
      for (int c = 0; c < cols; c++) {
        want_out[(size_t)t * cols + c] += (double)w[p] * src[(size_t)index[p] * cols + c];
        want_dots[p] += (double)a[(size_t)t * cols + c] * src[(size_t)index[p] * cols + c];
      }
    }
  be.gather_rows(gathered.data(), src.data(), S, index.data(), w.data(), n, cols);
  expect_close(gathered, want_g, 1e-7, 0, "gather_rows");
  be.combine_rows(out.data(), src.data(), S, index.data(), w.data(), rows, k, cols);
  expect_close(out, want_out, 1e-6, 1e-7, "combine_rows");
  be.row_dots(dots.data(), a.data(), src.data(), S, index.data(), rows, k, cols);
  expect_close(dots, want_dots, 1e-6, 1e-7, "row_dots");
  // Without weights: plain copies and sums.
  be.gather_rows(gathered.data(), src.data(), S, index.data(), nullptr, n, cols);
  for (int c = 0; c < cols; c++) EXPECT_EQ(gathered[c], src[4 * cols + c]);
}

TEST_F(Fixture, BiasAddAndGrad) {
  const int rows = 6, cols = 70;  // more than one column block
  auto y = randn(rows * cols, 1), b = randn(cols, 2), db = randn(cols, 3);
  Vec want_y = to_d(y), want_db = to_d(db);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) want_y[r * cols + c] += b[c], want_db[c] += y[r * cols + c];
  be.bias_bwd(db.data(), y.data(), rows, cols);
  expect_close(db, want_db, 1e-5, 1e-6, "bias_bwd");
  be.add_bias(y.data(), b.data(), rows, cols);
  expect_close(y, want_y, 1e-6, 1e-6, "add_bias");
}

TEST_F(Fixture, EmbeddingForwardBackward) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tok = {1, 4, 1, 0, 1, 3};  // repeats on purpose
  auto wte = randn(V * C, 1), wpe = randn(T * C, 2), dout = randn(B * T * C, 3);
  std::vector<float> out(B * T * C), dwte(V * C, 0.f), dwpe(T * C, 0.f);
  be.embedding_fwd(out.data(), tok.data(), B * T, wte.data(), 0, V, C);
  be.position_fwd(out.data(), wpe.data(), B * T, 0, T, C);
  Vec want(B * T * C), want_dwte(V * C, 0.0), want_dwpe(T * C, 0.0);
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++) {
      want[bt * C + c] = wte[tok[bt] * C + c] + wpe[(bt % T) * C + c];
      want_dwte[tok[bt] * C + c] += dout[bt * C + c];
      want_dwpe[(bt % T) * C + c] += dout[bt * C + c];
    }
  expect_close(out, want, 1e-6, 1e-6, "embedding fwd");
  be.embedding_bwd(dwte.data(), dout.data(), tok.data(), B * T, 0, V, C);
  be.position_bwd(dwpe.data(), dout.data(), B * T, 0, T, C);
  expect_close(dwte, want_dwte, 1e-6, 1e-6, "dwte");
  expect_close(dwpe, want_dwpe, 1e-6, 1e-6, "dwpe");
}

TEST_F(Fixture, EmbeddingShardsAndRowSlicesAddUp) {
  // Two vocabulary shards sum to the whole lookup; positions of a slice of
  // rows (sequence parallelism) follow the slice's global row numbers.
  const int rows = 7, T = 3, C = 4, V = 6;
  std::vector<int32_t> tok = {5, 0, 3, 2, 2, 4, 1};
  auto wte = randn(V * C, 1), wpe = randn(T * C, 2), dout = randn(rows * C, 3);
  std::vector<float> whole(rows * C), a(rows * C), b(rows * C);
  be.embedding_fwd(whole.data(), tok.data(), rows, wte.data(), 0, V, C);
  be.embedding_fwd(a.data(), tok.data(), rows, wte.data(), 0, 3, C);
  be.embedding_fwd(b.data(), tok.data(), rows, wte.data() + 3 * C, 3, 3, C);
  for (int i = 0; i < rows * C; i++) EXPECT_EQ(whole[i], a[i] + b[i]);
  std::vector<float> dw_whole(V * C, 0.f), dw_sh(V * C, 0.f);
  be.embedding_bwd(dw_whole.data(), dout.data(), tok.data(), rows, 0, V, C);
  be.embedding_bwd(dw_sh.data(), dout.data(), tok.data(), rows, 0, 3, C);
  be.embedding_bwd(dw_sh.data() + 3 * C, dout.data(), tok.data(), rows, 3, 3, C);
  EXPECT_EQ(dw_whole, dw_sh);
  std::vector<float> pos_all(rows * C, 0.f), pos_tail(3 * C, 0.f);
  be.position_fwd(pos_all.data(), wpe.data(), rows, 0, T, C);
  be.position_fwd(pos_tail.data(), wpe.data(), 3, 4, T, C);  // rows 4..6
  for (int i = 0; i < 3 * C; i++) EXPECT_EQ(pos_tail[i], pos_all[4 * C + i]);
  std::vector<float> dp_all(T * C, 0.f), dp_parts(T * C, 0.f);
  be.position_bwd(dp_all.data(), dout.data(), rows, 0, T, C);
  be.position_bwd(dp_parts.data(), dout.data(), 4, 0, T, C);
  be.position_bwd(dp_parts.data(), dout.data() + 4 * C, 3, 4, T, C);
  expect_close(dp_parts, to_d(dp_all), 1e-6, 1e-6, "position bwd by slices");
}

TEST_F(Fixture, LayerNormForwardBackward) {
  const int rows = 5, C = 67;
  const double eps = 1e-5;
  auto x = randn(rows * C, 1, 2.f), w = randn(C, 2), b = randn(C, 3), R = randn(rows * C, 4);
  std::vector<float> out(rows * C), mean(rows), rstd(rows);
  be.layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C, eps);
  expect_close(out, ref_layernorm(to_d(x), to_d(w), to_d(b), rows, C, eps), 1e-5, 1e-5, "ln fwd");
  // L = sum(out * R): dout = R. Backward accumulates, so start from 1.
  std::vector<float> dx(rows * C, 1.f), dw(C, 1.f), db(C, 1.f);
  be.layernorm_bwd(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                   rstd.data(), rows, C);
  const Vec Rd = to_d(R);
  Vec gx = numeric_grad([&](const Vec& v) { return dot(ref_layernorm(v, to_d(w), to_d(b), rows, C, eps), Rd); }, to_d(x));
  Vec gw = numeric_grad([&](const Vec& v) { return dot(ref_layernorm(to_d(x), v, to_d(b), rows, C, eps), Rd); }, to_d(w));
  Vec gb = numeric_grad([&](const Vec& v) { return dot(ref_layernorm(to_d(x), to_d(w), v, rows, C, eps), Rd); }, to_d(b));
  for (auto* g : {&gx, &gw, &gb})
    for (double& v : *g) v += 1.0;
  expect_close(dx, gx, 1e-4, 1e-4, "ln dx");
  expect_close(dw, gw, 1e-4, 1e-4, "ln dw");
  expect_close(db, gb, 1e-4, 1e-4, "ln db");
}

TEST_F(Fixture, RmsNormForwardBackward) {
  const int rows = 4, C = 66;
  const double eps = 1e-6;
  auto x = randn(rows * C, 1, 2.f), w = randn(C, 2), R = randn(rows * C, 4);
  std::vector<float> out(rows * C), rstd(rows);
  be.rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), rows, C, eps);
  expect_close(out, ref_rmsnorm(to_d(x), to_d(w), rows, C, eps), 1e-5, 1e-5, "rms fwd");
  std::vector<float> dx(rows * C, 0.f), dw(C, 0.f);
  be.rmsnorm_bwd(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), rows, C);
  const Vec Rd = to_d(R);
  expect_close(dx, numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(v, to_d(w), rows, C, eps), Rd); }, to_d(x)), 1e-4, 1e-4, "rms dx");
  expect_close(dw, numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(to_d(x), v, rows, C, eps), Rd); }, to_d(w)), 1e-4, 1e-4, "rms dw");
}

TEST_F(Fixture, GeluForwardBackward) {
  const size_t n = 301;
  auto x = randn(n, 1, 3.f), R = randn(n, 2);
  std::vector<float> out(n), dx(n);
  be.gelu_fwd(out.data(), x.data(), n);
  Vec want(n);
  for (size_t i = 0; i < n; i++) want[i] = ref_gelu(x[i]);
  expect_close(out, want, 1e-5, 1e-6, "gelu fwd");
  be.gelu_bwd(dx.data(), x.data(), R.data(), n);
  auto f = [&](const Vec& v) { double s = 0; for (size_t i = 0; i < n; i++) s += ref_gelu(v[i]) * R[i]; return s; };
  expect_close(dx, numeric_grad(f, to_d(x)), 1e-4, 1e-5, "gelu bwd");
}

TEST_F(Fixture, SwigluForwardBackward) {
  const int rows = 3, F = 17;
  auto gu = randn(rows * 2 * F, 1, 2.f), R = randn(rows * F, 2);
  auto ref = [&](const Vec& v) {
    Vec o(rows * F);
    for (int r = 0; r < rows; r++)
      for (int f = 0; f < F; f++) o[r * F + f] = ref_silu(v[r * 2 * F + f]) * v[r * 2 * F + F + f];
    return o;
  };
  std::vector<float> out(rows * F), dgu(rows * 2 * F);
  be.swiglu_fwd(out.data(), gu.data(), rows, F);
  expect_close(out, ref(to_d(gu)), 1e-5, 1e-6, "swiglu fwd");
  be.swiglu_bwd(dgu.data(), gu.data(), R.data(), rows, F);
  expect_close(dgu, numeric_grad([&](const Vec& v) { return dot(ref(v), to_d(R)); }, to_d(gu)), 1e-4, 1e-5, "swiglu bwd");
}

TEST_F(Fixture, RopeForwardAndInverseIsBackward) {
  AttentionShape s{2, 5, 4, 2, 8, 0};
  s.row = (s.H + 2 * s.KVH) * s.hd;
  auto x = randn((size_t)s.B * s.T * s.row, 1), R = randn((size_t)s.B * s.T * s.row, 2);
  auto fwd = x;
  be.rope(fwd.data(), s, RopeFreqs{}, false);
  expect_close(fwd, ref_rope(to_d(x), s, 10000.0), 1e-5, 1e-6, "rope fwd");
  auto bwd = R;
  be.rope(bwd.data(), s, RopeFreqs{}, true);
  auto f = [&](const Vec& v) { return dot(ref_rope(v, s, 10000.0), to_d(R)); };
  expect_close(bwd, numeric_grad(f, to_d(x)), 1e-4, 1e-5, "rope bwd");
}

// Against a double-precision reference (forward) and finite differences
// (backward), with the whole sequence in one block and in blocks of 2 and 4
// query rows (the path long sequences take). The statistics are each row's
// max and sum of exponentials, checked against the reference's scores.
TEST_F(Fixture, CausalGqaAttentionForwardBackward) {
  AttentionShape s{2, 7, 4, 2, 4, 0};  // 4 query heads share 2 kv heads; 7 rows: a short last block
  s.row = (s.H + 2 * s.KVH) * s.hd;
  const size_t n_in = (size_t)s.B * s.T * s.row, n_out = (size_t)s.B * s.T * s.H * s.hd;
  auto qkv = randn(n_in, 1), R = randn(n_out, 2);
  auto f = [&](const Vec& v) { return dot(ref_attention(v, s), to_d(R)); };
  const Vec grad_ref = numeric_grad(f, to_d(qkv));
  for (int block : {Backend::kAttentionBlock, 4, 2}) {
    be.set_attention_block(block);
    std::vector<float> out(n_out), stats((size_t)s.B * s.H * s.T * Backend::kAttentionStats), dqkv(n_in, 123.f);
    be.attention_fwd(out.data(), stats.data(), qkv.data(), s);
    expect_close(out, ref_attention(to_d(qkv), s), 1e-5, 1e-6, ("attention fwd, block " + std::to_string(block)).c_str());
    // Row 3 of head 1 (kv head 0), batch 0: max and sum of exp over its 4 visible scores.
    double mx = -1e30, sum = 0;
    std::vector<double> sc(4, 0.0);
    for (int j = 0; j < 4; j++) {
      for (int e = 0; e < s.hd; e++)
        sc[j] += (double)qkv[(size_t)3 * s.row + 1 * s.hd + e] * qkv[(size_t)j * s.row + (s.H + 0) * s.hd + e];
      sc[j] /= std::sqrt((double)s.hd);
      mx = std::max(mx, sc[j]);
    }
    for (int j = 0; j < 4; j++) sum += std::exp(sc[j] - mx);
    const float* st = stats.data() + ((size_t)1 * s.T + 3) * Backend::kAttentionStats;
    EXPECT_NEAR(st[0], mx, 1e-5) << "block " << block;
    EXPECT_NEAR(st[1], sum, 1e-5 * sum) << "block " << block;
    be.attention_bwd(dqkv.data(), R.data(), qkv.data(), out.data(), stats.data(), s);
    expect_close(dqkv, grad_ref, 1e-4, 1e-5, ("attention bwd, block " + std::to_string(block)).c_str());
  }
  be.set_attention_block(Backend::kAttentionBlock);
}

// Ring attention (context parallelism): the sequence cut into 2 x cp chunks,
// rank r holding chunks r and 2cp-1-r (parallel/context_chunks.h), each rank
// visiting every rank's keys pair by pair, its own from its packed q|k|v
// buffer and the others' as the k|v rows that travel the ring. Put back in
// order, the outputs are the double-precision causal attention's and the
// gradients the finite differences', and the merged statistics (max, sum)
// are those attention_fwd keeps for the whole sequence, for MHA and GQA,
// cp 1, 2 and 4, with the query rows in one block and in blocks of 3 and 2.
TEST_F(Fixture, RingAttentionPairsAddUpToCausalAttention) {
  for (int kv_heads : {4, 2}) {
    AttentionShape full{2, 16, 4, kv_heads, 4, 0};
    full.row = (full.H + 2 * full.KVH) * full.hd;
    const int width = full.H * full.hd, kv_row = 2 * full.KVH * full.hd;
    const size_t n_in = (size_t)full.B * full.T * full.row, n_out = (size_t)full.B * full.T * width;
    auto qkv = randn(n_in, 11), R = randn(n_out, 12);
    const Vec out_ref = ref_attention(to_d(qkv), full);
    std::vector<float> full_out(n_out), full_stats((size_t)full.B * full.H * full.T * Backend::kAttentionStats);
    be.attention_fwd(full_out.data(), full_stats.data(), qkv.data(), full);
    const Vec grad_ref = numeric_grad([&](const Vec& v) { return dot(ref_attention(v, full), to_d(R)); }, to_d(qkv));
    for (int cp : {1, 2, 4})
      for (int block : {Backend::kAttentionBlock, 3, 2}) {  // 3: a short last block
        be.set_attention_block(block);
        const int C = full.T / (2 * cp);
        AttentionShape loc = full;
        loc.T = 2 * C;
        const size_t loc_rows = (size_t)full.B * loc.T;
        // Global row of local row t of rank r.
        auto global = [&](int r, int b, int t) { return (size_t)b * full.T + cp_chunk(cp, r, t / C) * C + t % C; };
        // Rank r's rows of x (stride floats a row), n floats from `from` of each.
        auto gather = [&](const std::vector<float>& x, int stride, int r, int from, int n) {
          std::vector<float> y(loc_rows * n);
          for (int b = 0; b < full.B; b++)
            for (int t = 0; t < loc.T; t++)
              std::copy_n(x.begin() + global(r, b, t) * stride + from, n, y.begin() + ((size_t)b * loc.T + t) * n);
          return y;
        };
        std::vector<std::vector<float>> lq(cp), lkv(cp), lout(cp), lstats(cp), dq(cp), dkv(cp);
        for (int r = 0; r < cp; r++) {
          lq[r] = gather(qkv, full.row, r, 0, full.row);
          lkv[r].resize(loc_rows * kv_row);
          be.attention_kv_pack(lkv[r].data(), lq[r].data(), loc);  // what travels the ring
          dq[r].assign(loc_rows * width, 0.f);
          dkv[r].assign(loc_rows * kv_row, 0.f);
        }
        auto pair = [&](int r, int src, const ChunkPair& cpair) {
          return src == r ? AttentionPair{cpair.q_half * C, cpair.k_half * C, C, cpair.causal, loc.T, loc.row, width,
                                          width + full.KVH * full.hd}
                          : AttentionPair{cpair.q_half * C, cpair.k_half * C, C, cpair.causal, loc.T, kv_row, 0,
                                          full.KVH * full.hd};
        };
        auto kv_of = [&](int r, int src) { return src == r ? lq[src].data() : lkv[src].data(); };
        std::vector<float> out(n_out), dqkv(n_in, 0.f);
        for (int r = 0; r < cp; r++) {
          std::vector<float> acc(loc_rows * width, 0.f);
          lstats[r].resize((size_t)full.B * full.H * loc.T * Backend::kAttentionStats);
          for (size_t i = 0; i < lstats[r].size(); i += Backend::kAttentionStats)
            lstats[r][i] = -INFINITY, lstats[r][i + 1] = 0.f;
          for (int src = 0; src < cp; src++)
            for (const ChunkPair& cpair : ring_pairs(cp, r, src))
              be.attention_pair_fwd(acc.data(), lstats[r].data(), lq[r].data(), kv_of(r, src), loc, pair(r, src, cpair));
          lout[r].resize(loc_rows * width);
          be.attention_pair_out(lout[r].data(), acc.data(), lstats[r].data(), loc);
          for (int b = 0; b < full.B; b++)
            for (int t = 0; t < loc.T; t++)
              std::copy_n(lout[r].begin() + ((size_t)b * loc.T + t) * width, width, out.begin() + global(r, b, t) * width);
        }
        const std::string what = "cp " + std::to_string(cp) + ", kv heads " + std::to_string(kv_heads) + ", block " +
                                 std::to_string(block);
        expect_close(out, out_ref, 1e-5, 1e-6, ("ring attention fwd, " + what).c_str());
        for (int r = 0; r < cp; r++)
          for (int b = 0; b < full.B; b++)
            for (int h = 0; h < full.H; h++)
              for (int t = 0; t < loc.T; t++) {
                const float* got = &lstats[r][(((size_t)b * full.H + h) * loc.T + t) * Backend::kAttentionStats];
                const float* want = &full_stats[(((size_t)b * full.H + h) * full.T + global(r, b, t) - (size_t)b * full.T) *
                                                Backend::kAttentionStats];
                ASSERT_NEAR(got[0], want[0], 1e-5) << "max, " << what;
                ASSERT_NEAR(got[1], want[1], 1e-5 * want[1]) << "sum, " << what;
              }
        for (int r = 0; r < cp; r++) {
          const std::vector<float> dout = gather(R, width, r, 0, width);
          for (int src = 0; src < cp; src++)
            for (const ChunkPair& cpair : ring_pairs(cp, r, src))
              be.attention_pair_bwd(dq[r].data(), dkv[src].data(), dout.data(), lq[r].data(), kv_of(r, src),
                                    lout[r].data(), lstats[r].data(), loc, pair(r, src, cpair));
        }
        for (int r = 0; r < cp; r++) {  // each rank's dq and its block's dkv, home again
          std::vector<float> local(loc_rows * full.row);
          be.attention_pair_grads(local.data(), dq[r].data(), dkv[r].data(), loc);
          for (int b = 0; b < full.B; b++)
            for (int t = 0; t < loc.T; t++)
              std::copy_n(local.begin() + ((size_t)b * loc.T + t) * full.row, full.row,
                          dqkv.begin() + global(r, b, t) * full.row);
        }
        expect_close(dqkv, grad_ref, 1e-4, 1e-5, ("ring attention bwd, " + what).c_str());
      }
  }
  be.set_attention_block(Backend::kAttentionBlock);
}

// The cross-entropy passes, run over the whole vocabulary or over vocabulary
// shards combined as tensor parallelism does (the max's maximum, each shard's
// sum rebased to it, sums added).
std::vector<float> cross_entropy(CpuBackend& be, std::vector<float>& logits,
                                 const std::vector<int32_t>& tgt, int rows, int V, int shards,
                                 float grad_scale) {
  const int Vs = V / shards;
  std::vector<std::vector<float>> part(shards), mx(shards, std::vector<float>(rows)),
      su(shards, std::vector<float>(rows)), tg(shards, std::vector<float>(rows));
  std::vector<float> gmax(rows, -INFINITY), sum(rows, 0.f), target(rows, 0.f), loss(rows);
  for (int s = 0; s < shards; s++) {  // shard s holds columns [s*Vs, (s+1)*Vs)
    part[s].resize((size_t)rows * Vs);
    for (int r = 0; r < rows; r++)
      std::copy_n(logits.begin() + r * V + s * Vs, Vs, part[s].begin() + r * Vs);
    be.ce_row_stats(mx[s].data(), su[s].data(), tg[s].data(), part[s].data(), tgt.data(), rows, Vs,
                    s * Vs);
    for (int r = 0; r < rows; r++) gmax[r] = std::max(gmax[r], mx[s][r]);
  }
  for (int s = 0; s < shards; s++) {
    be.ce_rebase(su[s].data(), mx[s].data(), gmax.data(), rows);
    for (int r = 0; r < rows; r++) sum[r] += su[s][r], target[r] += tg[s][r];
  }
  for (int s = 0; s < shards; s++) {
    be.ce_finish(loss.data(), part[s].data(), tgt.data(), gmax.data(), sum.data(), target.data(),
                 rows, Vs, s * Vs, grad_scale);
    if (grad_scale != 0.f)
      for (int r = 0; r < rows; r++)
        std::copy_n(part[s].begin() + r * Vs, Vs, logits.begin() + r * V + s * Vs);
  }
  return loss;
}

TEST_F(Fixture, CrossEntropyLossAndGradient) {
  const int rows = 5, V = 38;
  auto logits = randn(rows * V, 1, 3.f);
  std::vector<int32_t> tgt = {0, 37, 5, 20, 19};  // both shards, both edges
  const Vec want = ref_cross_entropy(to_d(logits), tgt, rows, V);
  auto f = [&](const Vec& v) { double s = 0; for (double l : ref_cross_entropy(v, tgt, rows, V)) s += 0.25 * l; return s; };
  const Vec want_grad = numeric_grad(f, to_d(logits));
  for (int shards : {1, 2, 19}) {
    std::vector<float> work = logits;
    auto loss = cross_entropy(be, work, tgt, rows, V, shards, 0.f);
    expect_close(loss, want, 1e-5, 1e-6, "ce loss (eval)");
    EXPECT_EQ(work, logits) << "eval must not touch the logits";
    loss = cross_entropy(be, work, tgt, rows, V, shards, 0.25f);
    expect_close(loss, want, 1e-5, 1e-6, "ce loss (train)");
    expect_close(work, want_grad, 1e-4, 1e-5, "ce grad");
  }
}

TEST_F(Fixture, Sumsq) {
  const size_t n = (1 << 17) + 3;  // several fixed chunks
  auto x = randn(n, 1);
  double want = 0;
  for (float v : x) want += (double)v * v;
  EXPECT_NEAR(be.sumsq(x.data(), n), want, 1e-9 * want);
  // Grouped: spans add into their group, each as one sumsq would (bit for bit).
  const size_t a = 1000, b = 5000;
  double sums[2] = {-1, -1};
  be.sumsq_groups({{x.data(), a, 1}, {x.data() + a, b, 0}, {x.data() + a + b, n - a - b, 1}}, sums, 2);
  EXPECT_EQ(sums[0], be.sumsq(x.data() + a, b));
  EXPECT_EQ(sums[1], be.sumsq(x.data(), a) + be.sumsq(x.data() + a + b, n - a - b));
  EXPECT_NEAR(sums[0] + sums[1], want, 1e-9 * want);
}

TEST_F(Fixture, AdamWMatchesTheFormula) {
  const size_t n = 40000;  // several chunks
  const double gs = 0.7;   // clipping coefficient
  auto p = randn(n, 1), g = randn(n, 2), m = randn(n, 3, 0.1f), v = randn(n, 4, 0.1f);
  for (auto& x : v) x = std::fabs(x);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, bc1 = 1 - std::pow(b1, 3), bc2 = 1 - std::pow(b2, 3);
  Vec wp(n);
  for (size_t i = 0; i < n; i++) {
    const double gi = g[i] * gs;
    const double mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
    wp[i] = p[i] * (1 - lr * wd) - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
  }
  be.adamw(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, bc1, bc2, gs);
  expect_close(p, wp, 1e-5, 1e-6, "adamw");
}

namespace {
// bf16 by another route than runtime/dtype.h: the two bf16 neighbours of x
// (its top 16 bits, and the next value up in magnitude), the nearer one in
// double arithmetic, an even last bit on a tie.
float ref_round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  const double dlo = std::fabs((double)x - flo), dhi = std::fabs((double)fhi - x);
  if (dlo != dhi) return dlo < dhi ? flo : fhi;
  return ((lo >> 16) & 1) ? fhi : flo;
}
std::vector<bf16> to_bf16_vec(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); i++) o[i] = to_bf16(v[i]);
  return o;
}
std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); i++) o[i] = from_bf16(v[i]);
  return o;
}
}  // namespace

TEST(Bf16, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.f, -7);  // bf16's spacing at 1.0
  EXPECT_EQ(from_bf16(to_bf16(1.f + ulp / 2)), 1.f);                    // tie: to the even 1.0
  EXPECT_EQ(from_bf16(to_bf16(1.f + 3 * ulp / 2)), 1.f + 2 * ulp);      // tie: to the even 1 + 2 ulp
  EXPECT_EQ(from_bf16(to_bf16(1.f + ulp / 2 + 1e-6f)), 1.f + ulp);      // just above the tie
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(3.4028235e38f))));           // rounds past the largest bf16
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  EXPECT_EQ(from_bf16(to_bf16(-0.f)), 0.f);
  for (float x : randn(100000, 41, 3.f)) ASSERT_EQ(from_bf16(to_bf16(x)), ref_round_bf16(x)) << x;
}

// A bf16 kernel call is the fp32 computation on the widened inputs, rounded
// once: checked against the double references of the fp32 tests.
TEST_F(Fixture, Bf16ArgumentsComputeInFp32AndRoundOnce) {
  const int M = 7, N = 9, K = 33;
  const std::vector<bf16> A = to_bf16_vec(randn(M * K, 42)), B = to_bf16_vec(randn(K * N, 43));
  std::vector<bf16> C(M * N);
  be.matmul(false, false, M, N, K, 1.f, A.data(), B.data(), 0.f, C.data());
  const std::vector<float> a = widen(A), b = widen(B);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
      // fp32 accumulation then one rounding: within one bf16 ulp of the exact sum.
      ASSERT_NEAR(from_bf16(C[i * N + j]), s, std::fabs(s) * std::ldexp(1.0, -7) + 1e-5) << i << "," << j;
    }
  // Mixed: bf16 inputs accumulating into an fp32 output (a weight gradient).
  std::vector<float> acc(M * N, 1.f);
  be.matmul(false, false, M, N, K, 1.f, A.data(), B.data(), 1.f, acc.data());
  for (int i = 0; i < M * N; i++) {
    double s = 1;
    for (int k = 0; k < K; k++) s += (double)a[(i / N) * K + k] * b[k * N + i % N];
    ASSERT_NEAR(acc[i], s, 1e-4 * std::max(1.0, std::fabs(s)));
  }
  // Rows combined: out + sum of weighted rows in fp32, rounded once.
  {
    const int rows = 5, k = 3, cols = 16, S = 4;
    const std::vector<bf16> src = to_bf16_vec(randn((size_t)S * cols, 45));
    std::vector<bf16> out = to_bf16_vec(randn((size_t)rows * cols, 46));
    const std::vector<float> w = randn((size_t)rows * k, 47), before = widen(out), s = widen(src);
    std::vector<int32_t> index((size_t)rows * k);
    for (size_t p = 0; p < index.size(); p++) index[p] = (int32_t)((p * 7) % S);
    be.combine_rows(out.data(), src.data(), S, index.data(), w.data(), rows, k, cols);
    for (int t = 0; t < rows; t++)
      for (int c = 0; c < cols; c++) {
        double want = before[(size_t)t * cols + c];
        for (int j = 0; j < k; j++) want += (double)w[t * k + j] * s[(size_t)index[t * k + j] * cols + c];
        ASSERT_NEAR(from_bf16(out[(size_t)t * cols + c]), want, std::fabs(want) * std::ldexp(1.0, -8) + 1e-5);
      }
  }
  // Elementwise: GELU of bf16 is round(gelu(widened x)).
  const std::vector<bf16> x = to_bf16_vec(randn(1000, 44));
  std::vector<bf16> y(x.size());
  be.gelu_fwd(y.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double v = from_bf16(x[i]);
    const double g = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    ASSERT_NEAR(from_bf16(y[i]), g, std::fabs(g) * std::ldexp(1.0, -8) + 1e-6) << v;
  }
}

// ---- kernel sets: the same bits from generic, AVX2 and AVX-512 -----------

namespace {

// Runs f under every kernel set this process may run and restores the set
// after (also when f throws: later tests run on the set they expect).
template <class F>
void for_each_kernel_set(F f) {
  struct Restore {
    cpu::KernelSet was = cpu::kernel_set();
    ~Restore() { cpu::use_kernel_set(was); }
  } restore;
  for (cpu::KernelSet s : cpu::kKernelSets)
    if (s <= cpu::kernel_limits().widest()) {
      cpu::use_kernel_set(s);
      f(s);
    }
}

// Everything one kernel set computes on x (and y) of length n, as bits.
std::vector<uint32_t> kernel_outputs(const std::vector<float>& x, const std::vector<float>& y) {
  const size_t n = x.size();
  std::vector<float> out;
  auto keep = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
  auto keep_double = [&](double d) {
    float two[2];
    std::memcpy(two, &d, sizeof d);
    out.insert(out.end(), two, two + 2);
  };
  std::vector<float> a(n), b(n);
  cpu::gelu_fwd(a.data(), x.data(), n), keep(a);
  cpu::gelu_bwd(a.data(), x.data(), y.data(), n), keep(a);
  cpu::swiglu_fwd(a.data(), x.data(), y.data(), n), keep(a);
  cpu::swiglu_bwd(a.data(), b.data(), x.data(), y.data(), x.data(), n), keep(a), keep(b);
  const float mx = cpu::max_of(x.data(), n);
  out.push_back(mx);
  keep_double(cpu::exp_shift_sum(x.data(), n, mx));
  a = x, keep_double(cpu::exp_shift_inplace(a.data(), n, mx)), keep(a);
  b = x, cpu::exp_shift(b.data(), n, mx), keep(b);
  keep_double(cpu::sumsq(x.data(), n));
  b = y, cpu::softmax_bwd_row(a.data(), b.data(), n), keep(b);
  a = x, cpu::scale_inplace(a.data(), 0.37f, n), keep(a);
  std::vector<float> p = x, m(y), v(n);
  for (size_t i = 0; i < n; i++) v[i] = y[i] * y[i] * 0.01f;
  cpu::adamw(p.data(), y.data(), m.data(), v.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f, 0.7f);
  keep(p), keep(m), keep(v);
  std::vector<uint32_t> bits(out.size());
  std::memcpy(bits.data(), out.data(), out.size() * sizeof(float));
  return bits;
}

}  // namespace

// Every kernel, at lengths around the vector widths and a vocabulary row,
// returns the same bits in every set this CPU runs (on an AVX-512 machine:
// all three). Sums are held to a double loop too, so a set that agreed with
// the others on a wrong answer would still fail.
TEST(KernelSets, EveryKernelGivesTheSameBitsInEverySet) {
  int sets = 0;
  for (size_t n : {1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 4099, 50304}) {
    std::vector<float> x = randn(n, 11 + (unsigned)n, 4.f), y = randn(n, 12 + (unsigned)n);
    x[n / 2] = 90.f;   // past exp's clamp
    x[0] = -100.f;     // below it
    std::vector<uint32_t> first;
    sets = 0;
    for_each_kernel_set([&](cpu::KernelSet s) {
      const std::vector<uint32_t> got = kernel_outputs(x, y);
      if (first.empty()) first = got;
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); i++) differ += got[i] != first[i];
      EXPECT_EQ(differ, 0u) << cpu::kernel_set_name(s) << " differs from generic in " << differ
                            << " words at n = " << n;
      sets++;
      // The sums against double, on x without its outliers (beside exp(90)
      // every other term would vanish, and a dropped one go unseen); and
      // exp_shift_sum equal to exp_shift_inplace's sum, which adds the same
      // terms in the same lanes.
      std::vector<float> z = randn(n, 13 + (unsigned)n, 3.f);
      double mx = -1e300, es = 0, ss = 0;
      for (float v : z) mx = std::max(mx, (double)v);
      for (float v : z) es += std::exp((double)v - mx), ss += (double)v * v;
      const double sum = cpu::exp_shift_sum(z.data(), n, (float)mx);
      EXPECT_NEAR(sum, es, 1e-6 * es) << cpu::kernel_set_name(s) << " n " << n;
      EXPECT_EQ(sum, cpu::exp_shift_inplace(z.data(), n, (float)mx)) << cpu::kernel_set_name(s) << " n " << n;
      z = randn(n, 13 + (unsigned)n, 3.f);
      EXPECT_NEAR(cpu::sumsq(z.data(), n), ss, 1e-12 * ss) << cpu::kernel_set_name(s) << " n " << n;
    });
  }
  // A zero maximum has one sign in every set (+0), whichever lane saw -0 first.
  std::vector<float> zeros(37, -1.f);
  for (size_t i = 0; i < zeros.size(); i += 3) zeros[i] = (i % 2) ? 0.f : -0.f;
  for_each_kernel_set([&](cpu::KernelSet s) {
    const float m = cpu::max_of(zeros.data(), zeros.size());
    EXPECT_TRUE(m == 0.f && !std::signbit(m)) << cpu::kernel_set_name(s);
  });
  std::printf("kernel sets compared in this process: %d (%s)\n", sets,
              cpu::kernel_sets_up_to(cpu::kernel_limits().widest()).c_str());
  EXPECT_GE(sets, 1);
}

// A set the CPU lacks, or that TRAINER_CPU_KERNELS caps away, is refused
// naming why and what may run; "auto" is the widest allowed. (Pretend CPUs:
// this machine's own limits are what the binary checks, tests/e2e/cpu_kernels_check.py.)
TEST(KernelSets, ASetOutOfReachIsRefusedNamingWhy) {
  using cpu::KernelSet;
  const cpu::KernelLimits avx2_cpu{KernelSet::Avx2}, capped{KernelSet::Avx512, KernelSet::Avx2};
  EXPECT_EQ(cpu::resolve_kernel_set("auto", avx2_cpu), KernelSet::Avx2);
  EXPECT_EQ(cpu::resolve_kernel_set("auto", capped), KernelSet::Avx2);
  EXPECT_EQ(cpu::resolve_kernel_set("generic", avx2_cpu), KernelSet::Generic);
  EXPECT_EQ(cpu::resolve_kernel_set("avx512", {KernelSet::Avx512}), KernelSet::Avx512);
  auto refusal = [](const std::string& name, const cpu::KernelLimits& l, const char* what) {
    try {
      cpu::resolve_kernel_set(name, l, what);
    } catch (const RecipeError& e) {
      EXPECT_EQ(e.exit_code, 2);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string m = refusal("avx512", avx2_cpu, "runtime.cpu_kernels");
  EXPECT_NE(m.find("runtime.cpu_kernels = \"avx512\" but this CPU lacks AVX-512"), std::string::npos) << m;
  EXPECT_NE(m.find("the sets allowed are generic, avx2"), std::string::npos) << m;
  m = refusal("avx512", capped, "runtime.cpu_kernels");
  EXPECT_NE(m.find("TRAINER_CPU_KERNELS = \"avx2\" caps this process"), std::string::npos) << m;
  EXPECT_NE(m.find("generic, avx2, avx512"), std::string::npos) << m;
  m = refusal("avx2", {KernelSet::Generic}, "TRAINER_CPU_KERNELS");
  EXPECT_NE(m.find("TRAINER_CPU_KERNELS = \"avx2\" but this CPU lacks AVX2 with FMA"), std::string::npos) << m;
  m = refusal("sse", {}, "runtime.cpu_kernels");
  EXPECT_NE(m.find("is not a kernel set"), std::string::npos) << m;
}

// Rows shaped like a confident model's: a few logits near the top and tens
// of thousands whose exponentials are below 1e-8 (an fp32 running sum of
// about 3 rounds each away: the loss read ~1e-4 low). Loss and gradient
// against a float64 loop, in every kernel set.
TEST_F(Fixture, CrossEntropyOfConfidentRowsMatchesFloat64) {
  for (int V : {50304, 128256}) {
    const int rows = 3;
    std::mt19937 g(V);
    std::uniform_real_distribution<float> tiny(-25.f, -17.5f), top(-1.5f, 0.f);
    std::vector<float> logits((size_t)rows * V);
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < V; j++) logits[(size_t)r * V + j] = 9.f + (j % 2500 == 7 ? top(g) : tiny(g));
    std::vector<int32_t> tgt = {7, 2507, 12345};  // two likely tokens and an unlikely one
    const Vec want = ref_cross_entropy(to_d(logits), tgt, rows, V);
    size_t below = 0;
    for (int j = 0; j < V; j++) below += std::exp((double)logits[j] - 9.0) < 1e-8;
    EXPECT_GT(below, (size_t)V * 8 / 10) << "most terms below 1e-8, as in a confident model";
    for_each_kernel_set([&](cpu::KernelSet s) {
      std::vector<float> work = logits;
      const std::vector<float> loss = cross_entropy(be, work, tgt, rows, V, 1, 1.f);
      for (int r = 0; r < rows; r++) {
        EXPECT_NEAR(loss[r], want[r], 1e-6 * std::fabs(want[r]))
            << "V " << V << " row " << r << " (" << cpu::kernel_set_name(s) << ")";
        double mx = -1e300, sum = 0;
        for (int j = 0; j < V; j++) mx = std::max(mx, (double)logits[(size_t)r * V + j]);
        for (int j = 0; j < V; j++) sum += std::exp((double)logits[(size_t)r * V + j] - mx);
        // Each element's error, in units of its bound: the fp32 argument
        // logit - max rounds by half an ulp of |logit - max| (that much,
        // relative, in its exponential: ~1e-6 at 25), plus a few roundings of
        // the exponential, the sum and the scale (4 x 2^-24); the target's
        // p - 1 rounds once more.
        double worst = 0;
        for (int j = 0; j < V; j++) {
          const double arg = (double)logits[(size_t)r * V + j] - mx, p = std::exp(arg) / sum;
          const double want = p - (j == tgt[r]);
          const double bound = (4 + std::fabs(arg)) * 0x1p-24 * p + 0x1p-24 * std::fabs(want) + 1e-300;
          worst = std::max(worst, std::fabs(work[(size_t)r * V + j] - want) / bound);
        }
        EXPECT_LE(worst, 1.0) << "gradient, V " << V << " row " << r << " (" << cpu::kernel_set_name(s) << ")";
      }
    });
  }
}
