// The CUDA backend. Without a GPU (the development and CI machines) the parts
// that need none run: device choice, graph-cache keys, the peak table, the
// no-GPU error; every GPU test skips. With one, every backend operation runs
// on both backends from the same inputs and is compared with the CPU backend:
// the op cases of tests/support/kernel_cases.h (shared with the CPU tier, which runs
// the same kernels without a GPU), and here the cuBLASLt products and the
// device allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/environment.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cudnn_sdpa.h"
#include "runtime/cuda/nvml_state.h"
#include "runtime/errors.h"
#include "tests/support/kernel_cases.h"

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
  EXPECT_EQ(launcher_local_rank(), -1);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(launcher_local_rank(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);  // Open MPI's wins when both are set
  EXPECT_EQ(launcher_local_rank(), 2);
  unsetenv("SLURM_LOCALID");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST(CudaDevice, KnownPeaksComeFromTheTable) {
  using cuda::MathMode;
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H200", MathMode::Bf16), 989.4e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA A100-SXM4-80GB", MathMode::Bf16), 312e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H100 PCIe", MathMode::Bf16), 756.5e3);  // not the SXM row
  EXPECT_EQ(cuda::known_peak_gflops("Some Future GPU", MathMode::Bf16), 0);
  // MFU of TF32 products against the TF32 peak (half the bf16 one), not bf16's.
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H200", MathMode::Tf32), 494.7e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA A100-SXM4-80GB", MathMode::Tf32), 156e3);
  EXPECT_DOUBLE_EQ(cuda::known_peak_gflops("NVIDIA H200", MathMode::Fp32), 66.9e3);
}

TEST(CudnnSdpa, GraphKeysSeparateShapesAndDirections) {
  AttentionShape a{4, 1024, 12, 12, 64, 3 * 768}, b = a;
  b.KVH = 4;
  const cuda::SdpaKey fa = cuda::sdpa_key(a, false), ba = cuda::sdpa_key(a, true), fb = cuda::sdpa_key(b, false);
  EXPECT_TRUE(fa < ba || ba < fa);
  EXPECT_TRUE(fa < fb || fb < fa);
  EXPECT_FALSE(fa < cuda::sdpa_key(a, false));
  EXPECT_FALSE(cuda::sdpa_key(a, false) < fa);
  // Ring pairs: one graph per mask and direction whichever rows a pair
  // starts at (those are pointer offsets), none shared with the whole sequence's.
  const int kv_row = 2 * a.KVH * a.hd;
  const AttentionPair diag{0, 0, a.T / 2, true, a.T, kv_row, 0, a.KVH * a.hd};
  AttentionPair late = diag, full = diag;
  late.q0 = late.k0 = a.T / 2, full.causal = false;
  const auto same = [](const cuda::SdpaKey& x, const cuda::SdpaKey& y) { return !(x < y) && !(y < x); };
  EXPECT_TRUE(same(cuda::sdpa_key(a, diag, false), cuda::sdpa_key(a, late, false)));
  EXPECT_FALSE(same(cuda::sdpa_key(a, diag, false), cuda::sdpa_key(a, full, false)));
  EXPECT_FALSE(same(cuda::sdpa_key(a, diag, false), cuda::sdpa_key(a, diag, true)));
  EXPECT_FALSE(same(cuda::sdpa_key(a, diag, false), fa));
  AttentionPair in_place = diag;  // keys read from the packed q|k|v rows
  in_place.kv_row = a.row, in_place.k_off = a.H * a.hd, in_place.v_off = (a.H + a.KVH) * a.hd;
  EXPECT_FALSE(same(cuda::sdpa_key(a, diag, false), cuda::sdpa_key(a, in_place, false)));
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

// NVML: without a driver it says why there is nothing; with a GPU it reads
// every GPU of the node, the one the product runs on marked, with figures a
// data-center GPU offers (its clock within its maximum, a temperature).
TEST(NvmlState, ReadsTheNodesGpusOrSaysWhyNot) {
  const NodeGpus g = cuda::read_node_gpus(0);
  if (cuda::device_count() == 0) {
    EXPECT_TRUE(g.gpus.empty());
    EXPECT_NE(g.missing, "");
    GTEST_SKIP() << "no GPU: " << g.missing;
  }
  ASSERT_EQ(g.missing, "");
  ASSERT_GE((int)g.gpus.size(), cuda::device_count());
  int marked = 0;
  for (const GpuState& s : g.gpus) {
    marked += s.ran_product;
    EXPECT_NE(s.name, "");
    EXPECT_GT(s.max_sm_clock_mhz, 0) << s.name;
    EXPECT_LE(s.sm_clock_mhz, s.max_sm_clock_mhz) << s.name;
    EXPECT_GT(s.temperature_c, 0) << s.name;
    std::printf("NVML: GPU %d %s (%s): SM %.0f of %.0f MHz, %d C (slowdown %d C), ECC uncorrected %lld, PCIe x%d "
                "of x%d%s\n", s.index, s.name.c_str(), s.bus_id.c_str(), s.sm_clock_mhz, s.max_sm_clock_mhz,
                s.temperature_c, s.slowdown_temperature_c, s.ecc_uncorrected, s.pcie_width, s.max_pcie_width,
                gpu_fault({s}).text.empty() ? "" : (": " + gpu_fault({s}).text).c_str());
  }
  EXPECT_EQ(marked, 1) << "CUDA device 0 is one of NVML's GPUs, found by its PCI address";
}

TEST(CudaDevice, VersionsNameEveryLibrary) {
  const std::string v = cuda::library_versions();
  for (const char* lib : {"CUDA runtime", "cuBLASLt", "cuDNN", "NCCL"}) EXPECT_NE(v.find(lib), std::string::npos) << v;
}

// --- on a GPU: both backends from the same inputs ---

struct CudaOnGpu {
  static std::unique_ptr<Backend> make(std::string* why) {
    if (cuda::device_count() == 0) {
      *why = "no GPU: " + cuda::no_device_reason();
      return nullptr;
    }
    return std::make_unique<CudaBackend>(CudaOptions{});
  }
  static constexpr bool kCudnn = true, kStrict = false;
};

}  // namespace

// Every custom kernel's op cases (tests/support/kernel_cases.h), the same table the
// CPU tier runs.
namespace trainer::kernel_cases {
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, KernelOps, CudaOnGpu);
}

namespace {

using kernel_cases::Both;
using kernel_cases::randn;
using kernel_cases::tol;

// What only the GPU has: cuBLASLt products and the device allocator.
struct Gpu : ::testing::Test {
  std::unique_ptr<CudaBackend> gpu;
  std::unique_ptr<kernel_cases::Pair> p;
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda::no_device_reason();
    gpu = std::make_unique<CudaBackend>(CudaOptions{});
    p = std::make_unique<kernel_cases::Pair>(*gpu, false);
  }
};

TEST_F(Gpu, MatmulAllTransposesAndTypes) {
  const int M = 67, N = 45, K = 129;
  for (DType dt : {DType::F32, DType::BF16})
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      Both A = p->make(randn((size_t)M * K, 1 + t), dt), B = p->make(randn((size_t)K * N, 2 + t), dt);
      Both C = p->make(randn((size_t)M * N, 3 + t), dt);
      p->both([&](Backend& be, auto r) { be.matmul(ta, tb, M, N, K, 0.5f, r(A), r(B), 1.f, r(C)); });
      p->expect_match(C, tol(dt, 1e-5), 1e-6, "matmul");
    }
}

TEST_F(Gpu, MatmulMixesFp32GradientsWithBf16Weights) {  // the LM head's backward
  const int M = 32, N = 40, K = 300;
  Both A = p->make(randn((size_t)M * K, 5)), B = p->make(randn((size_t)K * N, 6), DType::BF16);
  Both C = p->make(std::vector<float>((size_t)M * N), DType::BF16);
  p->both([&](Backend& be, auto r) { be.matmul(false, false, M, N, K, 1.f, r(A), r(B), 0.f, r(C)); });
  // The GPU rounds the fp32 operand to bf16 first: errors of ~2^-9 per term
  // add up over K = 300 (a wrong layout would be off by the values' scale).
  p->expect_match(C, 3e-2, 3e-3, "mixed matmul");
}

// The LM head's fp32 logits gradient is rounded to bf16 once for its two
// products: product_operand gives what convert gives; fp32 runs keep fp32.
TEST_F(Gpu, ProductOperandRoundsTheFp32OperandOnce) {
  const size_t n = 5000;
  Both x = p->make(randn(n, 41)), ref = p->make(std::vector<float>(n), DType::BF16);
  gpu->convert(ref.d.ref(), x.d.ref(), n);
  const CRef narrow = gpu->product_operand(x.d.ref(), n, DType::BF16);
  ASSERT_EQ(narrow.dt, DType::BF16);
  std::vector<bf16> a(n), b(n);
  gpu->to_host(a.data(), narrow, n), gpu->to_host(b.data(), ref.d.ref(), n);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(a[i].bits, b[i].bits) << i;
  EXPECT_EQ(gpu->product_operand(x.d.ref(), n, DType::F32).p, x.d.ref().p);
}

// Each stream has its ring of events: 5000 compute-stream events later, the
// communication stream's handle still names its own stream's slot; a handle
// that was never recorded is an error, not a wait on some other event.
TEST_F(Gpu, EventHandlesKeepToTheirStream) {
  const Backend::Event comm = gpu->record_event(Backend::kCommStream);
  for (int i = 0; i < 5000; i++) gpu->record_event(Backend::kComputeStream);
  EXPECT_EQ(comm.stream, Backend::kCommStream);
  gpu->synchronize_event(comm);
  EXPECT_TRUE(gpu->event_done(comm));
  EXPECT_THROW(gpu->wait_event(Backend::kComputeStream, Backend::Event{Backend::kCommStream, 1u << 30}),
               std::logic_error);
  // A default Event marks nothing: a staging slot never filled waits for nothing.
  EXPECT_TRUE(gpu->event_done(Backend::Event{}));
  gpu->synchronize_event(Backend::Event{});
  gpu->wait_event(Backend::kComputeStream, Backend::Event{});
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
