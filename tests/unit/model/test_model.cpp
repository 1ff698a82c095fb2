// Model bookkeeping against known or hand-computed values: parameter counts
// (GPT-2 small is 124,439,808 parameters), initialisation statistics, weight
// decay groups, the LR schedule, FLOPs and the ZeRO-1 split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/flops.h"
#include "model/init.h"
#include "model/layer/layer_decl.h"
#include "model/lr_schedule.h"
#include "model/param_registry.h"
#include "model/param_units.h"
#include "model/layer/mlp.h"
#include "runtime/errors.h"

using namespace trainer;

namespace {
ModelConfig gpt2_small() {
  ModelConfig c;
  c.arch = Arch::GPT2;
  c.vocab_size = 50257;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.d_ff = 3072;
  c.seq_len = 1024;
  c.tie_embeddings = true;
  return c;
}
}  // namespace

// ZeRO-1's split: every element owned by exactly one rank's block or by the
// tail every rank keeps; blocks equal, so they reduce-scatter without padding.
TEST(Zero, RangesCoverEveryElementOnce) {
  for (size_t n : {0u, 1u, 3u, 7u, 8u, 1001u})
    for (int dp : {1, 2, 3, 4}) {
      std::vector<int> owners(n, 0), tail(n, 0);
      size_t block = 0;
      for (int r = 0; r < dp; r++) {
        const auto ranges = zero_ranges(n, r, dp);
        size_t local = 0;
        for (const OwnedRange& o : ranges) {
          EXPECT_EQ(o.local, local) << n << " " << dp;  // m and v hold the ranges back to back
          local += o.hi - o.lo;
          const bool is_tail = dp > 1 && o.hi == n && o.lo == n / dp * dp;
          if (!is_tail) block = o.hi - o.lo;
          for (size_t i = o.lo; i < o.hi; i++) (is_tail ? tail : owners)[i]++;
        }
        EXPECT_EQ(owned_count(ranges), local);
      }
      for (size_t i = 0; i < n; i++) {
        EXPECT_TRUE((owners[i] == 1 && tail[i] == 0) || (owners[i] == 0 && tail[i] == dp)) << n << " " << dp << " " << i;
      }
      if (dp > 1 && n >= (size_t)dp) {
        EXPECT_EQ(block, n / dp);
      }
    }
}

TEST(Registry, Gpt2SmallHasTheKnownParameterCount) {
  EXPECT_EQ(build_params(gpt2_small()).reg.total(), 124439808u);  // GPT-2 paper / llm.c
}

TEST(Registry, LlamaCountMatchesHandFormula) {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.vocab_size = 32000;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.n_kv_heads = 4;
  c.d_ff = 2048;
  c.tie_embeddings = false;
  const size_t d = 768, kv = 4 * 64, per_layer = d + d * d + 2 * kv * d + d * d + d + 3 * d * 2048;
  EXPECT_EQ(build_params(c).reg.total(), 2 * 32000 * d + 12 * per_layer + d);
}

TEST(Registry, OffsetsAreContiguousAndFusedTensorsAdjacent) {
  const ModelParams mp = build_params(gpt2_small());
  size_t next = 0;
  for (const ParamInfo& p : mp.reg.all()) {
    EXPECT_EQ(p.offset, next) << p.name;
    next += p.numel;
    EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name << ": decay on matrices and embeddings only";
  }
  const auto& r = mp.reg;
  EXPECT_EQ(r.at("layers.3.attn.wk").offset, r.at("layers.3.attn.wq").offset + 768 * 768);
  EXPECT_EQ(r.at("layers.3.attn.wv").offset, r.at("layers.3.attn.wk").offset + 768 * 768);
  EXPECT_EQ(mp.layers[3].wqkv, r.at("layers.3.attn.wq").offset);
  EXPECT_EQ(mp.lm_head, mp.wte) << "tied";
}

// A layer's tensors: its vectors (norm weights, biases) first, then its
// matrices, each kind in the order the blocks add them (fused neighbours
// stay neighbours), and the layer's offsets name the tensors they say.
TEST(Registry, ALayersVectorsComeBeforeItsMatrices) {
  ModelConfig llama = gpt2_small();
  llama.arch = Arch::Llama, llama.n_kv_heads = 4, llama.tie_embeddings = false;
  for (const ModelConfig& c : {gpt2_small(), llama}) {
    const ModelParams mp = build_params(c, 1, 0, {2, 5, false, false});  // a middle chunk: no embedding
    const auto& r = mp.reg;
    for (int l = 2; l < 5; l++) {
      const std::string p = "layers." + std::to_string(l) + ".";
      std::vector<size_t> dims;
      for (const ParamInfo& t : r.all())
        if (t.name.rfind(p, 0) == 0) dims.push_back(t.global_shape.size());
      EXPECT_TRUE(std::is_sorted(dims.begin(), dims.end())) << arch_name(c.arch) << " " << p;
      const LayerParams& lp = mp.layers[l - 2];
      // The layer's offsets and the tensors they name; fused neighbours.
      std::vector<std::pair<size_t, const char*>> named = {
          {lp.norm1.w, "attn_norm.weight"}, {lp.norm2.w, "mlp_norm.weight"}, {lp.wqkv, "attn.wq"}, {lp.wo, "attn.wo"}};
      std::vector<std::pair<const char*, const char*>> fused = {{"attn.wq", "attn.wk"}, {"attn.wk", "attn.wv"}};
      if (c.has_bias()) {
        named.insert(named.end(), {{lp.norm1.b, "attn_norm.bias"}, {lp.norm2.b, "mlp_norm.bias"},
                                   {lp.bqkv, "attn.bq"}, {lp.bo, "attn.bo"}});
        fused.insert(fused.end(), {{"attn.bq", "attn.bk"}, {"attn.bk", "attn.bv"}});
      }
      for (const auto& [offset, name] : named) EXPECT_EQ(offset, r.at(p + name).offset) << p << name;
      for (const auto& [a, b] : fused) EXPECT_EQ(r.at(p + b).offset, r.at(p + a).offset + r.at(p + a).numel) << p << b;
      EXPECT_EQ(lp.norm1.w, l == 2 ? 0u : mp.layers[l - 3].norm1.w + r.total() / 3) << "each layer starts at its first norm";
      size_t k = 0;
      for (const MlpParam& m : mlp_for(c, l).params()) EXPECT_EQ(lp.mlp[k++], r.at(p + "mlp." + m.name).offset) << m.name;
    }
  }
}

// ZeRO-3's units with zero_persist_below: a layer whose vectors are each
// below it is two units, its vectors' (held: kept for the step) and its
// matrices'; at or above it, or 0, one.
TEST(ParamUnits, PersistingVectorsAreAUnitOfTheirOwn) {
  const ModelConfig c = gpt2_small();
  const ModelParams mp = build_params(c);
  const size_t d = 768;
  for (size_t below : {(size_t)0, 4 * d, 4 * d + 1}) {  // GPT-2's largest vector: the MLP's 4d bias
    const ParamUnits u = param_units(mp, below);
    const bool split = below > 4 * d;
    ASSERT_EQ(u.all.size(), 2 + (split ? 2 : 1) * 12u) << below;
    size_t covered = 0;
    for (const ParamUnit& x : u.all) {
      EXPECT_EQ(x.lo, covered);
      covered = x.hi;
    }
    EXPECT_EQ(covered, mp.reg.total());
    for (int l = 0; l < 12; l++) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const int m = u.layer(l), v = u.persisting(l);
      EXPECT_FALSE(u.held(m));
      EXPECT_EQ(u.of(mp.reg.at(p + "attn.wq").offset), m);
      EXPECT_EQ(u.of(mp.reg.at(p + "mlp.b_proj").offset), split ? v : m);
      if (!split) {
        EXPECT_EQ(v, -1);
        continue;
      }
      EXPECT_TRUE(u.held(v));
      EXPECT_EQ(u.all[v].size(), 4 * d + 9 * d) << "2 norms x (w, b), q/k/v/o biases, MLP biases 4d + d";
    }
    size_t largest = 0;
    for (int l : u.layers) largest = std::max(largest, u.all[l].size());
    EXPECT_EQ(largest, 12 * d * d + (split ? 0 : 13 * d)) << "attention 4 d^2, MLP 8 d^2";
  }
}

// Every tensor of a layer in the registry has exactly one Hugging Face name
// as its blocks declare them (the registry as the reference); row blocks of
// one of theirs are numbered 0.. in order, and GPT-2's and Llama's names are
// the model types' (transformers' GPT2 and Llama modules).
TEST(Registry, EveryLayerTensorHasOneHuggingFaceName) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    ModelConfig c = gpt2_small();
    c.arch = arch, c.n_layers = 1;
    std::multiset<std::string> ours;
    std::map<std::string, int> blocks;
    for (const HfParam& p : layer_hf_params(c)) {
      ours.insert("layers.0." + p.ours);
      if (p.block >= 0) EXPECT_EQ(p.block, blocks[p.theirs]++) << p.ours;
    }
    std::multiset<std::string> registry;
    const ModelParams mp = build_params(c, 1, 0, ChunkSpec{0, 1, false, false});
    for (const ParamInfo& p : mp.reg.all()) registry.insert(p.name);
    EXPECT_EQ(ours, registry) << arch_name(arch);
  }
  std::map<std::string, std::string> theirs;
  ModelConfig c = gpt2_small();
  for (const HfParam& p : layer_hf_params(c)) theirs[p.ours] = p.theirs;
  EXPECT_EQ(theirs["attn.wk"], "attn.c_attn.weight");
  EXPECT_EQ(theirs["mlp_norm.bias"], "ln_2.bias");
  c.arch = Arch::Llama;
  theirs.clear();
  for (const HfParam& p : layer_hf_params(c)) theirs[p.ours] = p.theirs;
  EXPECT_EQ(theirs["attn.wk"], "self_attn.k_proj.weight");
  EXPECT_EQ(theirs["attn_norm.weight"], "input_layernorm.weight");
}

TEST(Init, Gpt2Statistics) {
  ModelConfig c = gpt2_small();
  c.vocab_size = 1000;
  c.d_model = 256;
  c.d_ff = 1024;
  c.n_heads = 4;
  c.n_layers = 8;
  const ModelParams mp = build_params(c);
  std::vector<float> w(mp.reg.total());
  init_params(mp, c, 1, w.data());
  auto stats = [&](const std::string& name) {
    const ParamInfo& p = mp.reg.at(name);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < p.numel; i++) s += w[p.offset + i], s2 += (double)w[p.offset + i] * w[p.offset + i];
    return std::make_pair(s / p.numel, std::sqrt(s2 / p.numel));
  };
  EXPECT_NEAR(stats("embed.tok").second, 0.02, 0.0005);
  EXPECT_NEAR(stats("layers.2.mlp.w_fc").second, 0.02, 0.0005);
  EXPECT_NEAR(stats("layers.2.attn.wo").second, 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(stats("layers.2.mlp.w_proj").second, 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(stats("layers.2.mlp.w_fc").first, 0.0, 0.0005);
  EXPECT_EQ(stats("layers.2.attn_norm.weight"), std::make_pair(1.0, 1.0));
  EXPECT_EQ(stats("layers.2.attn.bq"), std::make_pair(0.0, 0.0));
  // Same seed, same weights; another seed, others.
  std::vector<float> again(w.size()), other(w.size());
  init_params(mp, c, 1, again.data());
  init_params(mp, c, 2, other.data());
  EXPECT_EQ(w, again);
  EXPECT_NE(w, other);
}

TEST(LrSchedule, WarmupThenDecayToMinAtTheLastStep) {
  LrConfig c;
  c.lr = 1.0f;
  c.min_lr = 0.1f;
  c.warmup_steps = 10;
  c.schedule = LrSchedule::Cosine;
  EXPECT_FLOAT_EQ(lr_at(c, 0, 110), 0.1f);  // (0+1)/10
  EXPECT_FLOAT_EQ(lr_at(c, 9, 110), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 10, 110), 1.0f);
  EXPECT_NEAR(lr_at(c, 59, 110), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 49 / 99.0)), 1e-6);
  EXPECT_FLOAT_EQ(lr_at(c, 109, 110), 0.1f);
  c.schedule = LrSchedule::Linear;
  EXPECT_NEAR(lr_at(c, 10 + 33, 110), 1.0 - 0.9 * 33 / 99.0, 1e-6);
  EXPECT_FLOAT_EQ(lr_at(c, 109, 110), 0.1f);
  c.schedule = LrSchedule::Constant;
  EXPECT_FLOAT_EQ(lr_at(c, 80, 110), 1.0f);
}

TEST(Flops, Gpt2SmallPerToken) {
  ModelConfig c = gpt2_small();
  // 6 * (12 layers * 12 d^2 + V d) + 12 * L * T * d
  const double want = 6.0 * (12 * 12.0 * 768 * 768 + 50257.0 * 768) + 12.0 * 12 * 1024 * 768;
  EXPECT_DOUBLE_EQ(train_flops_per_token(c), want);
}
