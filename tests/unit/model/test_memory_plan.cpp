// What only the CUDA backend holds is planned for runtime.backend = "cuda"
// and nothing else: cuDNN's deterministic attention backward keeps B x H x
// T^2 fp32 (4x from T = 4096 to 8192, none without determinism or in fp32),
// the LM head's logits gradient in bf16 (the head stage), cuBLASLt's 32 MiB.
#include <gtest/gtest.h>

#include "model/memory_plan.h"
#include "model/rank_layout.h"

using namespace trainer;

TEST(CudaMemoryPlan, CountsTheBackendsOwnBuffersOnlyOnCuda) {
  ModelConfig c;  // a small Llama: 3 layers of width 128, 4 heads sharing 2 key-value heads
  c.arch = Arch::Llama;
  c.vocab_size = 512, c.d_model = 128, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 384;
  c.seq_len = 64;
  c.tie_embeddings = false;
  RankLayout l;
  l.micro_batch = 2;
  l.compute = DType::BF16;
  l.chunks = {{ChunkSpec{0, c.n_layers, true, true}, 1}};
  EXPECT_EQ(plan_memory(c, l, {}).cuda.total(), 0);  // the CPU backend
  l.cuda = true;
  const auto at = [&](int T) {
    c.seq_len = T;
    return plan_memory(c, l, {}).cuda;
  };
  const CudaMemory a = at(4096), b = at(8192);
  EXPECT_DOUBLE_EQ(a.attention_workspace, 2.0 * c.n_heads * 4096.0 * 4096 * 4);
  EXPECT_DOUBLE_EQ(b.attention_workspace / a.attention_workspace, 4.0);
  EXPECT_DOUBLE_EQ(a.logits_grad_bf16, 2.0 * 4096 * c.vocab_size * 2);
  EXPECT_DOUBLE_EQ(a.gemm_workspace, 32.0 * 1048576);
  EXPECT_EQ(a.nccl_buffers, 0);  // one rank: no communicator
  EXPECT_GT(plan_memory(c, l, {}).total(), plan_memory(c, l, {}).cuda.total());
  l.deterministic_attention = false;  // linear in T: dQ accumulated in fp32
  EXPECT_DOUBLE_EQ(at(8192).attention_workspace, 2.0 * c.n_heads * 8192 * c.head_dim() * 4);
  l.deterministic_attention = true, l.compute = DType::F32;
  EXPECT_EQ(at(8192).attention_workspace, 0);  // fp32 attention runs the own kernels
  EXPECT_EQ(at(8192).logits_grad_bf16, 0);
  l.dp = 2, l.tp = 2;
  EXPECT_DOUBLE_EQ(at(1024).nccl_buffers, 3 * 2.0 * 16 * 4 * 1048576);  // world, dp, tp
  // The all-to-all's attention runs on the whole sequence of heads / cp of the
  // heads: cuDNN's deterministic workspace is B x (H / cp) x seq_len^2 fp32,
  // cp times one of B x H x (seq_len / cp)^2; the ring's chunk pairs are
  // cuDNN's one pair at a time, B x H x (seq_len / cp / 2)^2, and cuDNN's
  // bf16 gradient of a pair (its q|k|v rows) is a block of its own.
  l.dp = 1, l.tp = 1, l.cp = 2, l.compute = DType::BF16, l.cp_comm = CpComm::A2a;
  EXPECT_DOUBLE_EQ(at(8192).attention_workspace, 2.0 * (c.n_heads / 2) * 8192.0 * 8192 * 4);
  l.tp = 2;  // a rank's heads are H / tp / cp
  EXPECT_DOUBLE_EQ(at(8192).attention_workspace, 2.0 * (c.n_heads / 4) * 8192.0 * 8192 * 4);
  EXPECT_EQ(at(8192).attention_block, 0);
  l.tp = 1, l.cp_comm = CpComm::Ring;
  EXPECT_DOUBLE_EQ(at(8192).attention_workspace, 2.0 * c.n_heads * 2048.0 * 2048 * 4);
  const double row = (c.n_heads + 2.0 * c.n_kv_heads) * c.head_dim();
  EXPECT_DOUBLE_EQ(at(8192).attention_block, 2.0 * 2048 * row * 2);
  l.compute = DType::F32;  // fp32 pairs are our own kernels: neither
  EXPECT_EQ(at(8192).attention_workspace, 0);
  EXPECT_EQ(at(8192).attention_block, 0);
}
