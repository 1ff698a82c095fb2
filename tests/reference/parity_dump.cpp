// Writes what the PyTorch parity check compares against: initial weights, a
// batch, the loss, every gradient, and the weights after 3 AdamW steps (with
// gradient clipping) for a small model of the given architecture.
//   parity_dump gpt2|llama|llama3 OUT.h5
// llama3: Llama with Llama 3.1's RoPE scaling (theta 500000; the original
// length 64 puts this head's pairs in all three bands of the formula), and
// q/k weights 16x larger so that attention, and so the positions, move the loss.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/hdf5_tensors.h"
#include "model/adamw.h"
#include "model/init.h"
#include "model/transformer.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/rng.h"

using namespace trainer;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: parity_dump gpt2|llama|llama3 OUT.h5\n");
    return 2;
  }
  const bool scaled = !std::strcmp(argv[1], "llama3");
  const bool llama = scaled || !std::strcmp(argv[1], "llama");
  ModelConfig c;
  c.arch = llama ? Arch::Llama : Arch::GPT2;
  c.vocab_size = 256;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = llama ? 2 : 4;
  c.d_ff = llama ? 96 : 256;
  c.seq_len = 32;
  c.tie_embeddings = !llama;
  c.norm_eps = llama ? 1e-6f : 1e-5f;
  if (scaled) {
    c.rope_theta = 500000.f;
    c.rope_scaling = {RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 64};
  }
  const int B = 2, BT = B * c.seq_len;
  const float lr = 1e-3f, clip = 1.0f;
  AdamWConfig ac;  // beta 0.9/0.95, eps 1e-8, weight decay 0.1

  CpuBackend be(1);
  Transformer model(be, c, single_rank_layout(B), ChunkLayout{});
  {
    std::vector<float> init(model.num_params());
    init_params(model.layout(), c, 7, init.data());
    if (scaled)
      for (const ParamInfo& p : model.registry().all())
        if (p.name.find("attn.wq") != std::string::npos || p.name.find("attn.wk") != std::string::npos)
          for (size_t i = 0; i < p.numel; i++) init[p.offset + i] *= 16.f;
    be.from_host(model.params().ref(), init.data(), init.size());
  }
  std::vector<int32_t> tokens(BT + 1);
  Rng rng(11);
  for (auto& t : tokens) t = (int32_t)rng.below(c.vocab_size);

  H5File f(argv[2], H5File::Create);
  const int32_t cfg[] = {llama, c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads,
                         c.d_ff, c.seq_len, c.tie_embeddings, B};
  f.write("config", cfg, {10});
  f.write_scalar("norm_eps", c.norm_eps);
  f.write_scalar("rope_theta", c.rope_theta);
  if (scaled) {
    const RopeScaling& s = c.rope_scaling;
    const float fields[] = {(float)s.factor, (float)s.low_freq_factor, (float)s.high_freq_factor,
                            (float)s.original_max_position_embeddings};
    f.write("rope_llama3", fields, {4});
  }
  f.write_scalar("lr", lr);
  f.write_scalar("grad_clip", clip);
  f.write("inputs", tokens.data(), {B, c.seq_len});
  f.write("targets", tokens.data() + 1, {B, c.seq_len});
  // The batch is [B, T] of one token stream: row b holds tokens b*T..b*T+T.
  for (const ParamInfo& p : model.registry().all())
    f.write("init/" + p.name, host_copy(be, model.params().ref(p.offset), p.numel).data(), p.shape);

  AdamW opt(be, model.registry(), ac);
  for (int step = 0; step < 3; step++) {
    be.zero(model.grads().ref(), model.num_params());
    const double loss = model.forward(tokens.data(), tokens.data() + 1, 1.0f / BT);
    model.backward();
    if (step == 0) {
      f.write_scalar("loss", loss);
      for (const ParamInfo& p : model.registry().all())
        f.write("grad/" + p.name, host_copy(be, model.grads().ref(p.offset), p.numel).data(), p.shape);
    }
    const double norm = std::sqrt(model.grad_sumsq());
    opt.step(model.params(), model.grads(), lr, clip_coefficient(norm, clip));
  }
  for (const ParamInfo& p : model.registry().all())
    f.write("after3/" + p.name, host_copy(be, model.params().ref(p.offset), p.numel).data(), p.shape);
  f.close();
  return 0;
}
