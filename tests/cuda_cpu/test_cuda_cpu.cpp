// The CUDA backend's own kernels (runtime/cuda/*.cu) run on the CPU: the op
// cases of tests/support/kernel_cases.h against the CPU backend, in the thread order
// TRAINER_EMU_ORDER names (ctest runs forward, reverse and random, and once
// under ASan+UBSan); the glue kernels between cuDNN's and the backend's
// attention statistics against their formula; our bf16 rounding against the
// CUDA toolkit's own cuda_bf16.h; and the emulator itself, shown to catch
// what it exists to catch (a missing barrier, a divergent barrier, a shuffle
// naming an exited lane).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/init.h"
#include "model/transformer.h"
#include "tests/cuda_cpu/cuda_emu.h"
#include "tests/cuda_cpu/emu_backend.h"
#include "tests/support/kernel_cases.h"

using namespace trainer;

namespace {

struct CudaKernelsOnCpu {
  static std::unique_ptr<Backend> make(std::string*) { return std::make_unique<EmuBackend>(); }
  static constexpr bool kCudnn = false, kStrict = true;
};

}  // namespace

namespace trainer::kernel_cases {
INSTANTIATE_TYPED_TEST_SUITE_P(CudaCpu, KernelOps, CudaKernelsOnCpu);
}

namespace {

TEST(CudaCpuGlue, AttentionStatsConvertBothWays) {
  EmuBackend be;
  const size_t rows = 1000;
  std::vector<float> lse = kernel_cases::randn(rows, 40, 4.f);
  Buffer l = be.alloc(rows, DType::F32, Mem::Temporaries), st = be.alloc(2 * rows, DType::F32, Mem::Temporaries);
  Buffer back = be.alloc(rows, DType::F32, Mem::Temporaries);
  be.from_host(l.ref(), lse.data(), rows);
  be.lse_to_stats(st.ref().f32(), l.ref().f32(), rows);
  const std::vector<float> s = host_copy(be, st.ref(), 2 * rows);
  for (size_t i = 0; i < rows; i++) ASSERT_TRUE(s[2 * i] == lse[i] && s[2 * i + 1] == 1.f) << i;
  // (max, sum) pairs back to max + log(sum).
  std::vector<float> pairs(2 * rows);
  for (size_t i = 0; i < rows; i++) pairs[2 * i] = lse[i], pairs[2 * i + 1] = 1.f + (float)i / 7;
  be.from_host(st.ref(), pairs.data(), 2 * rows);
  be.stats_to_lse(back.ref().f32(), st.ref().f32(), rows);
  const std::vector<float> b = host_copy(be, back.ref(), rows);
  for (size_t i = 0; i < rows; i++) ASSERT_NEAR(b[i], lse[i] + std::log(1.0 + i / 7.0), 1e-5 * (1 + std::fabs(b[i]))) << i;
}

// A whole training step of a small model on the CUDA kernels (products on
// the CPU backend, as cuBLASLt's are not emulated) against the CPU backend:
// the model code as it drives a GPU (token staging and its events, the loss
// kept on the device, the one read of loss and gradient norm), its loss and
// every gradient, for both architectures.
TEST(CudaCpuModel, ATrainingStepMatchesTheCpuBackend) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    ModelConfig c;
    c.arch = arch, c.vocab_size = 64, c.d_model = 32, c.n_layers = 2, c.n_heads = 4;
    c.n_kv_heads = arch == Arch::Llama ? 2 : 4, c.d_ff = 64, c.seq_len = 16, c.tie_embeddings = arch == Arch::GPT2;
    const int B = 2, BT = B * c.seq_len;
    std::vector<int32_t> tokens(BT + 1);
    for (int i = 0; i <= BT; i++) tokens[i] = (i * 37 + 11) % c.vocab_size;
    struct Out {
      double loss, sumsq;
      std::vector<float> grads;
    };
    const auto step = [&](Backend& be) {
      Transformer m(be, c, single_rank_layout(B, DType::F32), ChunkLayout{});
      std::vector<float> host(m.num_params());
      init_params(m.layout(), c, 3, host.data());
      be.from_host(m.params().ref(), host.data(), host.size());
      m.keep_losses_on_device(true);
      m.reset_step_losses();
      m.forward(tokens.data(), tokens.data() + 1, 1.0f / BT);
      m.backward();
      double sums[3];
      be.sumsq_groups(m.step_sum_spans(0, m.num_params()), sums, 3);
      return Out{sums[2] / BT, sums[0] + sums[1], host_copy(be, m.grads().ref(), m.num_params())};
    };
    CpuBackend cpu(1);
    EmuBackend emu;
    const Out r = step(cpu), d = step(emu);
    EXPECT_NEAR(d.loss, r.loss, 1e-5 * r.loss) << arch_name(arch);
    EXPECT_NEAR(d.sumsq, r.sumsq, 1e-4 * r.sumsq) << arch_name(arch);
    double scale = 0;
    for (float g : r.grads) scale = std::max(scale, (double)std::fabs(g));
    for (size_t i = 0; i < r.grads.size(); i++)
      ASSERT_NEAR(d.grads[i], r.grads[i], 1e-4 * scale + 1e-4 * std::fabs(r.grads[i])) << arch_name(arch) << " " << i;
  }
}

#ifdef TRAINER_TOOLKIT_BF16
}  // namespace
uint16_t toolkit_float2bfloat16_rn(float f);  // tests/cuda_cpu/toolkit_bf16.cpp
float toolkit_bfloat162float(uint16_t b);
namespace {

// Every 16th fp32 bit pattern (all exponents, both signs, halfway cases among
// them) rounds as the toolkit rounds; every bf16 widens as the toolkit widens.
TEST(CudaCpuBf16, RoundingIsTheToolkits) {
  size_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 16) {
    float f;
    const uint32_t bits = (uint32_t)u;
    std::memcpy(&f, &bits, 4);
    const __nv_bfloat16 ours = __float2bfloat16_rn(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(__bfloat162float(ours))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(ours.x, toolkit_float2bfloat16_rn(f)) << std::hex << bits;
    checked++;
  }
  for (uint32_t b = 0; b <= 0xffff; b++) {
    const float t = toolkit_bfloat162float((uint16_t)b), o = __bfloat162float({(unsigned short)b});
    ASSERT_TRUE(std::memcmp(&t, &o, 4) == 0 || (std::isnan(t) && std::isnan(o))) << std::hex << b;
  }
  EXPECT_GT(checked, 250'000'000u);
}
#endif

// --- the emulator catches what it is for ---

void expect_fault(const std::function<void()>& launch, const std::string& what) {
  try {
    launch();
    ADD_FAILURE() << "no fault reported; expected: " << what;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// A block sum whose lane-0 writes are read without the barrier between them:
// some thread reads a slot another warp has not written yet (NaN), in every
// order the scheduler runs.
float racy_block_sum(float v, float* sh, bool with_barrier) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) sh[warp] = v;
  if (with_barrier) __syncthreads();
  v = lane < blockDim.x / 32 ? sh[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

TEST(CudaCpuEmulator, AMissingBarrierReadsNaN) {
  for (bool barrier : {true, false}) {
    std::vector<float> out(128);
    trainer_emu::Launch(1, 128)("sum", [&] {
      static char site;
      float(&sh)[32] = trainer_emu::shared<float[32]>(&site);
      out[threadIdx.x] = racy_block_sum(1.f, sh, barrier);
    });
    bool nan = false;
    for (float v : out) {
      nan |= std::isnan(v);
      EXPECT_TRUE(std::isnan(v) || v == 128.f) << v;
    }
    EXPECT_EQ(nan, !barrier) << trainer_emu::order_name();
  }
}

TEST(CudaCpuEmulator, ABarrierInDivergentCodeIsAFault) {
  expect_fault([] { trainer_emu::Launch(2, 64)("divergent", [] { if (threadIdx.x >= 32) __syncthreads(); }); },
               "a barrier in divergent code");
}

TEST(CudaCpuEmulator, AShuffleNamingAnExitedLaneIsAFault) {
  expect_fault(
      [] {
        trainer_emu::Launch(1, 32)("exited", [] {
          if (threadIdx.x == 5) return;
          (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
        });
      },
      "which has exited");
}

// Warps are synchronised on their own: warp 0 runs more shuffles than warp 1,
// which a block-wide barrier per shuffle would deadlock or mix up.
TEST(CudaCpuEmulator, WarpsShuffleIndependently) {
  std::vector<int> out(64);
  trainer_emu::Launch(1, 64)("warps", [&] {
    int v = threadIdx.x;
    const int rounds = threadIdx.x < 32 ? 5 : 2;
    for (int r = 0; r < rounds; r++) v = __shfl_down_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
  });
  for (int l = 0; l < 32; l++) EXPECT_EQ(out[l], std::min(l + 5, 31)) << l;
  for (int l = 0; l < 32; l++) EXPECT_EQ(out[32 + l], 32 + std::min(l + 2, 31)) << l;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  trainer_emu::set_order_from_env();
  std::printf("CUDA kernels on the CPU, %s thread order\n", trainer_emu::order_name().c_str());
  return RUN_ALL_TESTS();
}
