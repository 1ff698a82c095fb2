// The CUDA backend. Without a GPU (the development and CI machines) the parts
// that need none run: device choice, graph-cache keys, the peak table, the
// no-GPU error; every GPU test skips. With one, every backend operation runs
// on both backends from the same inputs and is compared with the CPU backend
// (itself checked against float64 loops and finite differences in
// test_ops.cpp): fp32 to ~1e-5 relative (1e-4 where sums are long), bf16
// within PyTorch's bf16 bound (rtol 1.6e-2) on top of one rounding of the
// output. Determinism: the reductions without atomics give the same bits
// twice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cudnn_sdpa.h"
#include "runtime/errors.h"

using namespace trainer;

namespace {

TEST(CudaDevice, RanksMapToDevicesRoundRobinAndSharingIsReported) {
  EXPECT_EQ(cuda::choose_device(3, 8, 8).device, 3);
  EXPECT_FALSE(cuda::choose_device(3, 8, 8).shared);
  EXPECT_EQ(cuda::choose_device(5, 8, 4).device, 1);
  EXPECT_TRUE(cuda::choose_device(5, 8, 4).shared);
  EXPECT_EQ(cuda::choose_device(-1, 1, 2).device, 0);  // no launcher variables: device 0
  EXPECT_TRUE(cuda::choose_device(0, 4, 1).shared);    // four ranks on one GPU: the MPI path
}

TEST(CudaDevice, LocalRankComesFromTheLauncher) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) unsetenv(v);
  EXPECT_EQ(cuda::local_rank_from_env(), -1);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(cuda::local_rank_from_env(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);  // Open MPI's wins when both are set
  EXPECT_EQ(cuda::local_rank_from_env(), 2);
  unsetenv("SLURM_LOCALID");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST(CudaDevice, KnownPeaksComeFromTheTable) {
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H200", true), 989.4e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA A100-SXM4-80GB", true), 312e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H100 PCIe", true), 756.5e3);  // not the SXM row
  EXPECT_EQ(cuda::known_peak_gflops("Some Future GPU", true), 0);
}

TEST(CudnnSdpa, GraphKeysSeparateShapesAndDirections) {
  AttentionShape a{4, 1024, 12, 12, 64, 3 * 768}, b = a;
  b.KVH = 4;
  const cuda::SdpaKey fa = cuda::sdpa_key(a, false), ba = cuda::sdpa_key(a, true), fb = cuda::sdpa_key(b, false);
  EXPECT_TRUE(fa < ba || ba < fa);
  EXPECT_TRUE(fa < fb || fb < fa);
  EXPECT_FALSE(fa < cuda::sdpa_key(a, false));
  EXPECT_FALSE(cuda::sdpa_key(a, false) < fa);
}

TEST(CudaDevice, NoGpuStopsWithAUsageErrorAndAReason) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_NE(cuda::no_device_reason(), "");
  try {
    make_backend({"cuda"});
    FAIL() << "make_backend(cuda) succeeded without a GPU";
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code, kExitUsage);
    EXPECT_NE(std::string(e.what()).find("runtime.backend = \"cuda\""), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, VersionsNameEveryLibrary) {
  const std::string v = cuda::library_versions();
  for (const char* lib : {"CUDA runtime", "cuBLASLt", "cuDNN", "NCCL"}) EXPECT_NE(v.find(lib), std::string::npos) << v;
}

// --- on a GPU: both backends from the same inputs ---

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The same data on both backends; for bf16 the host data is rounded first.
struct Both {
  Buffer c, g;
  DType dt;
  size_t n;
};

struct Gpu : ::testing::Test {
  CpuBackend cpu{2};
  std::unique_ptr<CudaBackend> gpu;
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda::no_device_reason();
    gpu = std::make_unique<CudaBackend>(CudaOptions{});
  }
  Both make(const std::vector<float>& h, DType dt = DType::F32) {
    Both b{cpu.alloc(h.size(), dt, Mem::Temporaries), gpu->alloc(h.size(), dt, Mem::Temporaries), dt, h.size()};
    if (dt == DType::BF16) {
      std::vector<bf16> r(h.size());
      for (size_t i = 0; i < h.size(); i++) r[i] = to_bf16(h[i]);
      cpu.from_host(b.c.ref(), r.data(), r.size());
      gpu->from_host(b.g.ref(), r.data(), r.size());
    } else {
      cpu.from_host(b.c.ref(), h.data(), h.size());
      gpu->from_host(b.g.ref(), h.data(), h.size());
    }
    return b;
  }
  Both ints(const std::vector<int32_t>& h) {
    Both b{cpu.alloc(h.size(), DType::I32, Mem::Temporaries), gpu->alloc(h.size(), DType::I32, Mem::Temporaries),
           DType::I32, h.size()};
    cpu.from_host(b.c.ref(), h.data(), h.size());
    gpu->from_host(b.g.ref(), h.data(), h.size());
    return b;
  }
  std::vector<float> read(Backend& be, const Buffer& b) {
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
  // GPU against CPU: |g - c| <= atol * max|c| + rtol * |c| (+ one bf16 ulp of c for bf16 outputs).
  void expect_match(const Both& b, double rtol, double atol, const char* what) {
    const auto c = read(cpu, b.c), g = read(*gpu, b.g);
    double scale = 0;
    for (float x : c) scale = std::max(scale, (double)std::fabs(x));
    const double ulp = b.dt == DType::BF16 ? 1.0 / 128 : 0;
    for (size_t i = 0; i < c.size(); i++)
      ASSERT_NEAR(g[i], c[i], atol * std::max(1.0, scale) + (rtol + ulp) * std::fabs(c[i])) << what << " at " << i;
  }
  void expect_bitwise(const Buffer& a, const Buffer& b, const char* what) {
    const auto x = read(*gpu, a), y = read(*gpu, b);
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << what;
  }
};

double tol(DType dt, double fp32) { return dt == DType::BF16 ? 1.6e-2 : fp32; }

TEST_F(Gpu, MatmulAllTransposesAndTypes) {
  const int M = 67, N = 45, K = 129;
  for (DType dt : {DType::F32, DType::BF16})
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      Both A = make(randn((size_t)M * K, 1 + t), dt), B = make(randn((size_t)K * N, 2 + t), dt);
      Both C = make(randn((size_t)M * N, 3 + t), dt);
      for (Backend* be : {(Backend*)&cpu, (Backend*)gpu.get()}) {
        const bool g = be == gpu.get();
        be->matmul(ta, tb, M, N, K, 0.5f, (g ? A.g : A.c).ref(), (g ? B.g : B.c).ref(), 1.f, (g ? C.g : C.c).ref());
      }
      expect_match(C, tol(dt, 1e-5), 1e-6, "matmul");
    }
}

TEST_F(Gpu, MatmulMixesFp32GradientsWithBf16Weights) {  // the LM head's backward
  const int M = 32, N = 40, K = 300;
  Both A = make(randn((size_t)M * K, 5)), B = make(randn((size_t)K * N, 6), DType::BF16);
  Both C = make(std::vector<float>((size_t)M * N), DType::BF16);
  cpu.matmul(false, false, M, N, K, 1.f, A.c.ref(), B.c.ref(), 0.f, C.c.ref());
  gpu->matmul(false, false, M, N, K, 1.f, A.g.ref(), B.g.ref(), 0.f, C.g.ref());
  // The GPU rounds the fp32 operand to bf16 first: errors of ~2^-9 per term
  // add up over K = 300 (a wrong layout would be off by the values' scale).
  expect_match(C, 3e-2, 3e-3, "mixed matmul");
}

TEST_F(Gpu, ElementwiseOps) {
  const int rows = 37, F = 96;
  for (DType dt : {DType::F32, DType::BF16}) {
    const size_t n = (size_t)rows * F;
    Both x = make(randn(n, 7), dt), y = make(randn(n, 8), dt), out = make(std::vector<float>(n), dt);
    cpu.gelu_fwd(out.c.ref(), x.c.ref(), n), gpu->gelu_fwd(out.g.ref(), x.g.ref(), n);
    expect_match(out, tol(dt, 1e-5), 1e-6, "gelu_fwd");
    cpu.gelu_bwd(out.c.ref(), x.c.ref(), y.c.ref(), n), gpu->gelu_bwd(out.g.ref(), x.g.ref(), y.g.ref(), n);
    expect_match(out, tol(dt, 1e-5), 1e-6, "gelu_bwd");
    cpu.add(out.c.ref(), x.c.ref(), y.c.ref(), n), gpu->add(out.g.ref(), x.g.ref(), y.g.ref(), n);
    expect_match(out, tol(dt, 1e-6), 0, "add");
    Both gu = make(randn(2 * n, 9), dt), half = make(std::vector<float>(n), dt), dgu = make(std::vector<float>(2 * n), dt);
    cpu.swiglu_fwd(half.c.ref(), gu.c.ref(), rows, F), gpu->swiglu_fwd(half.g.ref(), gu.g.ref(), rows, F);
    expect_match(half, tol(dt, 1e-5), 1e-6, "swiglu_fwd");
    cpu.swiglu_bwd(dgu.c.ref(), gu.c.ref(), x.c.ref(), rows, F), gpu->swiglu_bwd(dgu.g.ref(), gu.g.ref(), x.g.ref(), rows, F);
    expect_match(dgu, tol(dt, 1e-5), 1e-6, "swiglu_bwd");
    Both b = make(randn(F, 10), dt);
    cpu.add_bias(x.c.ref(), b.c.ref(), rows, F), gpu->add_bias(x.g.ref(), b.g.ref(), rows, F);
    expect_match(x, tol(dt, 1e-6), 0, "add_bias");
    Both db = make(randn(F, 11));
    cpu.bias_bwd(db.c.ref().f32(), y.c.ref(), rows, F), gpu->bias_bwd(db.g.ref().f32(), y.g.ref(), rows, F);
    expect_match(db, 1e-5, 1e-6, "bias_bwd");
    Both wide = make(std::vector<float>(n));
    cpu.convert(wide.c.ref(), x.c.ref(), n), gpu->convert(wide.g.ref(), x.g.ref(), n);
    expect_match(wide, 0, 0, "convert");
  }
}

TEST_F(Gpu, NormsForwardBackward) {
  const int rows = 300, C = 200;  // more than one row chunk
  for (DType dt : {DType::F32, DType::BF16}) {
    const size_t n = (size_t)rows * C;
    Both x = make(randn(n, 12), dt), w = make(randn(C, 13), dt), b = make(randn(C, 14), dt), g = make(randn(n, 15), dt);
    Both out = make(std::vector<float>(n), dt), dx = make(randn(n, 16), dt);
    Both mean = make(std::vector<float>(rows)), rstd = make(std::vector<float>(rows));
    Both dw = make(randn(C, 17)), db = make(randn(C, 18));
    cpu.layernorm_fwd(out.c.ref(), mean.c.ref().f32(), rstd.c.ref().f32(), x.c.ref(), w.c.ref(), b.c.ref(), rows, C, 1e-5f);
    gpu->layernorm_fwd(out.g.ref(), mean.g.ref().f32(), rstd.g.ref().f32(), x.g.ref(), w.g.ref(), b.g.ref(), rows, C, 1e-5f);
    expect_match(out, tol(dt, 1e-5), 1e-6, "layernorm_fwd");
    expect_match(rstd, 1e-5, 1e-6, "layernorm rstd");
    cpu.layernorm_bwd(dx.c.ref(), dw.c.ref().f32(), db.c.ref().f32(), g.c.ref(), x.c.ref(), w.c.ref(), mean.c.ref().f32(),
                      rstd.c.ref().f32(), rows, C);
    gpu->layernorm_bwd(dx.g.ref(), dw.g.ref().f32(), db.g.ref().f32(), g.g.ref(), x.g.ref(), w.g.ref(),
                       mean.g.ref().f32(), rstd.g.ref().f32(), rows, C);
    expect_match(dx, tol(dt, 1e-5), 1e-6, "layernorm dx");
    expect_match(dw, 1e-4, 1e-5, "layernorm dw");  // sums of 300 rows in another order
    expect_match(db, 1e-4, 1e-5, "layernorm db");
    cpu.rmsnorm_fwd(out.c.ref(), rstd.c.ref().f32(), x.c.ref(), w.c.ref(), rows, C, 1e-5f);
    gpu->rmsnorm_fwd(out.g.ref(), rstd.g.ref().f32(), x.g.ref(), w.g.ref(), rows, C, 1e-5f);
    expect_match(out, tol(dt, 1e-5), 1e-6, "rmsnorm_fwd");
    cpu.rmsnorm_bwd(dx.c.ref(), dw.c.ref().f32(), g.c.ref(), x.c.ref(), w.c.ref(), rstd.c.ref().f32(), rows, C);
    gpu->rmsnorm_bwd(dx.g.ref(), dw.g.ref().f32(), g.g.ref(), x.g.ref(), w.g.ref(), rstd.g.ref().f32(), rows, C);
    expect_match(dx, tol(dt, 1e-5), 1e-6, "rmsnorm dx");
    expect_match(dw, 1e-4, 1e-5, "rmsnorm dw");
  }
}

TEST_F(Gpu, EmbeddingsAreDeterministicWithRepeatedTokens) {
  const int rows = 700, C = 48, V = 50, off = 10, vrows = 25, T = 35;
  std::vector<int32_t> tok(rows);
  std::mt19937 r(3);
  for (auto& t : tok) t = r() % V;  // many repeats, some outside the shard
  Both tk = ints(tok), wte = make(randn((size_t)vrows * C, 19)), wpe = make(randn((size_t)T * C, 20));
  Both out = make(std::vector<float>((size_t)rows * C)), g = make(randn((size_t)rows * C, 21));
  Both dwte = make(randn((size_t)vrows * C, 22)), dwpe = make(randn((size_t)T * C, 23));
  cpu.embedding_fwd(out.c.ref(), tk.c.ref().i32(), rows, wte.c.ref(), off, vrows, C);
  gpu->embedding_fwd(out.g.ref(), tk.g.ref().i32(), rows, wte.g.ref(), off, vrows, C);
  cpu.position_fwd(out.c.ref(), wpe.c.ref(), rows, 5, T, C), gpu->position_fwd(out.g.ref(), wpe.g.ref(), rows, 5, T, C);
  expect_match(out, 1e-6, 0, "embedding + position fwd");
  Buffer first = gpu->alloc(dwte.n, DType::F32, Mem::Temporaries);
  gpu->copy(first.ref(), dwte.g.ref(), dwte.n);
  cpu.embedding_bwd(dwte.c.ref().f32(), g.c.ref(), tk.c.ref().i32(), rows, off, vrows, C);
  gpu->embedding_bwd(dwte.g.ref().f32(), g.g.ref(), tk.g.ref().i32(), rows, off, vrows, C);
  expect_match(dwte, 1e-5, 1e-6, "embedding_bwd");
  gpu->embedding_bwd(first.ref().f32(), g.g.ref(), tk.g.ref().i32(), rows, off, vrows, C);
  expect_bitwise(first, dwte.g, "embedding_bwd twice");
  cpu.position_bwd(dwpe.c.ref().f32(), g.c.ref(), rows, 5, T, C), gpu->position_bwd(dwpe.g.ref().f32(), g.g.ref(), rows, 5, T, C);
  expect_match(dwpe, 1e-5, 1e-6, "position_bwd");
}

TEST_F(Gpu, RopeAndItsInverse) {
  AttentionShape s{2, 33, 4, 2, 16, 0};
  s.row = (s.H + 2 * s.KVH) * s.hd;
  for (DType dt : {DType::F32, DType::BF16}) {
    Both q = make(randn((size_t)s.B * s.T * s.row, 24), dt);
    for (bool inv : {false, true}) {
      cpu.rope(q.c.ref(), s, 10000.f, inv), gpu->rope(q.g.ref(), s, 10000.f, inv);
      expect_match(q, tol(dt, 1e-5), 1e-6, inv ? "rope inverse" : "rope");
    }
  }
}

TEST_F(Gpu, AttentionForwardBackwardBothPrecisions) {
  for (DType dt : {DType::F32, DType::BF16}) {
    AttentionShape s{2, 200, 8, 2, 64, 0};  // GQA, several cuDNN tiles
    s.row = (s.H + 2 * s.KVH) * s.hd;
    const size_t nin = (size_t)s.B * s.T * s.row, nout = (size_t)s.B * s.T * s.H * s.hd;
    Both qkv = make(randn(nin, 25), dt), out = make(std::vector<float>(nout), dt), dout = make(randn(nout, 26), dt);
    Both stats = make(std::vector<float>((size_t)s.B * s.H * s.T * Backend::kAttentionStats));
    Both dqkv = make(std::vector<float>(nin), dt);
    cpu.attention_fwd(out.c.ref(), stats.c.ref().f32(), qkv.c.ref(), s);
    gpu->attention_fwd(out.g.ref(), stats.g.ref().f32(), qkv.g.ref(), s);
    // cuDNN multiplies bf16 probabilities by V: absolute errors ~2^-9 of the
    // output's scale, also where an output is near zero.
    const double att_atol = dt == DType::BF16 ? 2e-2 : 1e-5;
    expect_match(out, tol(dt, 1e-5), att_atol, "attention fwd");
    // Stats may differ in form ((max, sum) or (lse, 1)); max + log(sum) must agree.
    const auto sc = read(cpu, stats.c), sg = read(*gpu, stats.g);
    for (size_t i = 0; i < sc.size(); i += 2)
      ASSERT_NEAR(sg[i] + std::log(sg[i + 1]), sc[i] + std::log(sc[i + 1]), 1e-4 * (1 + std::fabs(sc[i]))) << i;
    cpu.attention_bwd(dqkv.c.ref(), dout.c.ref(), qkv.c.ref(), out.c.ref(), stats.c.ref().f32(), s);
    gpu->attention_bwd(dqkv.g.ref(), dout.g.ref(), qkv.g.ref(), out.g.ref(), stats.g.ref().f32(), s);
    expect_match(dqkv, tol(dt, 1e-4), att_atol, "attention bwd");
    Both again = make(std::vector<float>(nin), dt);
    gpu->attention_bwd(again.g.ref(), dout.g.ref(), qkv.g.ref(), out.g.ref(), stats.g.ref().f32(), s);
    expect_bitwise(again.g, dqkv.g, "attention bwd twice");
  }
}

TEST_F(Gpu, CrossEntropyStepsAndGradient) {
  const int rows = 19, V = 3001, off = 1000;
  std::vector<int32_t> tg(rows);
  for (int r = 0; r < rows; r++) tg[r] = (r * 397) % 5000;  // some outside the shard
  Both t = ints(tg), logits = make(randn((size_t)rows * V, 27, 3.f));
  Both mx = make(std::vector<float>(rows)), sum = make(std::vector<float>(rows)), tgt = make(std::vector<float>(rows));
  Both loss = make(std::vector<float>(rows));
  for (Backend* be : {(Backend*)&cpu, (Backend*)gpu.get()}) {
    auto p = [&](Both& b) { return (be == &cpu ? b.c : b.g).ref().f32(); };
    const int32_t* tp = (be == &cpu ? t.c : t.g).ref().i32();
    be->row_max(p(mx), p(logits), rows, V);
    be->ce_exp_sum(p(sum), p(tgt), p(logits), tp, p(mx), rows, V, off, true);
    be->ce_finish(p(loss), p(logits), tp, p(mx), p(sum), p(tgt), rows, V, off, 0.25f);
  }
  expect_match(mx, 0, 0, "row max");
  expect_match(sum, 1e-5, 0, "exp sums");
  expect_match(loss, 1e-5, 1e-6, "losses");
  expect_match(logits, 1e-5, 1e-7, "dlogits");
}

TEST_F(Gpu, SumsOfSquaresAndAdamw) {
  const size_t n1 = 200000, n2 = 77;  // several pieces, and a short span
  Both a = make(randn(n1, 28)), b = make(randn(n2, 29));
  const auto run = [&](Backend& be, Both& x, Both& y, double* s) {
    const bool g = &be == gpu.get();
    be.sumsq_groups({{(g ? x.g : x.c).ref().f32(), n1, 0}, {(g ? y.g : y.c).ref().f32(), n2, 1},
                     {(g ? x.g : x.c).ref().f32(), 10, 1}}, s, 2);
  };
  double sc[2], sg[2], sg2[2];
  run(cpu, a, b, sc), run(*gpu, a, b, sg), run(*gpu, a, b, sg2);
  for (int k = 0; k < 2; k++) {
    EXPECT_NEAR(sg[k], sc[k], 1e-12 * sc[k]) << k;
    EXPECT_EQ(sg[k], sg2[k]) << "sumsq twice";
  }
  Both p = make(randn(n1, 30)), m = make(randn(n1, 31, 0.1f)), v = make(std::vector<float>(n1, 0.01f));
  cpu.adamw(p.c.ref().f32(), a.c.ref().f32(), m.c.ref().f32(), v.c.ref().f32(), n1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
            0.3f, 0.7f);
  gpu->adamw(p.g.ref().f32(), a.g.ref().f32(), m.g.ref().f32(), v.g.ref().f32(), n1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
             0.5f, 0.3f, 0.7f);
  expect_match(p, 1e-6, 1e-7, "adamw p");
  expect_match(m, 1e-6, 0, "adamw m");
  expect_match(v, 1e-6, 0, "adamw v");
}

TEST_F(Gpu, MemoryIsCountedByCategoryAndOutOfMemorySaysWhat) {
  const size_t before = gpu->memory().current[(int)Mem::Activations];
  {
    Buffer b = gpu->alloc(1000, DType::BF16, Mem::Activations);
    EXPECT_EQ(gpu->memory().current[(int)Mem::Activations], before + 2000);
  }
  EXPECT_EQ(gpu->memory().current[(int)Mem::Activations], before);
  try {
    Buffer huge = gpu->alloc((size_t)1 << 50, DType::F32, Mem::Optimizer);
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const std::runtime_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("optimizer"), std::string::npos) << w;
    EXPECT_NE(w.find("free of"), std::string::npos) << w;
  }
}

}  // namespace
