// What only the CUDA backend holds is planned for runtime.backend = "cuda"
// and nothing else: cuDNN's deterministic attention backward keeps B x H x
// T^2 fp32 (4x from T = 4096 to 8192, none without determinism or in fp32),
// the LM head's logits gradient in bf16 (the head stage), cuBLASLt's 32 MiB.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/memory_plan.h"
#include "model/rank_layout.h"
#include "model/transformer.h"
#include "planning/null_comm.h"
#include "runtime/cpu/cpu_backend.h"

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
  // world, cp and dp x cp (the world's was missed when only cp split it)
  EXPECT_DOUBLE_EQ(at(1024).nccl_buffers, 3 * 2.0 * 16 * 4 * 1048576);
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

// The memory plan is what the model allocates: its activations, backward
// scratch and collective buffers, for both MLPs (GPT-2's GELU, Llama's
// SwiGLU), every recompute mode (and full recomputation of one layer of
// two), a whole model and a pipeline chunk without the head keeping two
// micro-batches, fp32 and bf16, one rank and one rank of tp 2 with sequence
// parallelism (its group a stand-in that moves nothing). Every tensor here
// is a multiple of 64 bytes, so the model's slices carry no alignment
// padding and the only difference left is the CPU backend's 64 bytes per
// allocation: anything the plan counts otherwise than the model allocates
// it (what a recompute mode keeps, the workspace the recomputing layers
// share, a slot, the head's buffers, a row count under sequence
// parallelism; the smallest tensor, a norm's statistics, is 128 bytes)
// would show. Both read the declarations (model/layer/layer_decl.h,
// attention.h, mlp.h); the forward and backward that use the buffers are
// held to PyTorch and finite differences elsewhere. The attention's
// per-thread buffers, which the backend allocates at the first attention,
// are left out of the plan (threads 0).
TEST(MemoryPlan, IsWhatTheModelAllocates) {
  // GPT-2, Llama, Llama with Mixture-of-Experts MLPs (its first layer dense, a shared expert)
  for (int kind = 0; kind < 3; kind++) {
    const Arch arch = kind == 0 ? Arch::GPT2 : Arch::Llama;
    const bool moe = kind == 2;
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 128, c.d_model = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 128;
    c.seq_len = 32;
    if (moe) c.moe.experts = 4, c.moe.top_k = 2, c.moe.expert_ffn = 96, c.moe.shared_expert_ffn = 64, c.moe.dense_layers = 1;
    for (int tp : {1, 2})
      for (int ep : {1, 2})  // (expert parallelism: its exchange's buffers)
      for (DType dt : {DType::F32, DType::BF16})
        for (ChunkLayout chunk : {ChunkLayout{ChunkSpec{0, 2, true, true}, 1}, ChunkLayout{ChunkSpec{0, 2, true, false}, 2}})
          for (RecomputeConfig rc : {RecomputeConfig{RecomputeMode::None, -1}, RecomputeConfig{RecomputeMode::Selective, -1},
                                     RecomputeConfig{RecomputeMode::Full, -1}, RecomputeConfig{RecomputeMode::Full, 1}}) {
            // (with replicas a bf16 run's data-parallel wire copy is planned:
            // the replica reduction's, which is not built here)
            if (ep > 1 && (!moe || dt != DType::F32)) continue;
            RankLayout l = single_rank_layout(2, dt);
            l.chunks = {chunk};
            l.tp = tp, l.sequence_parallel = true, l.threads = 0, l.dp = ep, l.ep = ep;
            const OpPhase phase = OpPhase::Forward;
            NullDataComm group(tp, &phase), experts(ep, &phase);
            NullControlComm control(tp), experts_control(ep);
            CpuBackend be(1);
            const Transformer model(be, c, l, chunk, tp > 1 ? TensorParallel{&group, &control} : TensorParallel{}, rc,
                                    ContextParallel{}, ep > 1 ? ExpertParallel{&experts, &experts_control} : ExpertParallel{});
            const MemoryPlan plan = plan_memory(c, l, rc);
            const std::string what = std::string(arch_name(arch)) + (moe ? " moe" : "") + " tp " + std::to_string(tp) +
                                     (ep > 1 ? " ep 2" : "") + " " + dtype_name(dt) +
                                     (chunk.spec.head ? " whole" : " no head, 2 slots") + " " + recompute_name(rc.mode) +
                                     (rc.layers > 0 ? " of 1 layer" : "");
            // activations: the saved ones, the fp32 ones, the step's losses
            // (head), each slot's tokens; scratch: one; collectives: one
            // under tp (nothing to allocate without it); scratch: one, and
            // one of fp32 for the experts' router
            const int allocations[] = {2 + (chunk.spec.head ? 1 : 0) + 2 * chunk.slots, moe ? 2 : 1, tp > 1 ? 1 : 0};
            const Mem kinds[] = {Mem::Activations, Mem::Temporaries, Mem::Comm};
            for (int k = 0; k < 3; k++) {
              const double got = (double)be.memory().current[(int)kinds[k]], want = plan.bytes[(int)kinds[k]];
              EXPECT_EQ(got - want, 64.0 * allocations[k])
                  << what << ": " << mem_name(kinds[k]) << " allocated " << got << " bytes, planned " << want;
            }
            std::printf("  %-44s activations %7.0f bytes allocated, %7.0f planned\n", what.c_str(),
                        (double)be.memory().current[(int)Mem::Activations], plan.bytes[(int)Mem::Activations]);
          }
  }
}
