#include "ckpt/hf_import.h"

#include <cmath>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

// (field, ours, theirs) for each config.json field that differs from the recipe.
std::vector<std::string> config_differences(const nlohmann::json& c, const ModelConfig& m) {
  std::vector<std::string> out;
  auto text = [](double x) {
    return x == std::floor(x) && std::fabs(x) < 1e15 ? std::to_string((long long)x) : nlohmann::json(x).dump();
  };
  auto num = [&](const char* key, double ours, double dflt) {
    const double theirs = c.contains(key) && c[key].is_number() ? c[key].get<double>() : dflt;
    if ((float)theirs != (float)ours) out.push_back(std::string(key) + ": recipe " + text(ours) + ", config.json " + text(theirs));
  };
  const bool gpt2 = m.arch == Arch::GPT2;
  const std::string type = c.value("model_type", "");
  if (type != (gpt2 ? "gpt2" : "llama"))
    out.push_back("model_type: recipe " + std::string(gpt2 ? "gpt2" : "llama") + ", config.json \"" + type + "\"");
  const bool tied = c.value("tie_word_embeddings", gpt2);  // transformers' defaults: GPT-2 tied, Llama not
  if (tied != m.tie_embeddings)
    out.push_back(std::string("tie_word_embeddings: recipe ") + (m.tie_embeddings ? "true" : "false") +
                  ", config.json " + (tied ? "true" : "false"));
  num("vocab_size", m.vocab_size, -1);
  if (gpt2) {
    num("n_embd", m.d_model, -1);
    num("n_layer", m.n_layers, -1);
    num("n_head", m.n_heads, -1);
    num("n_inner", m.d_ff, c.contains("n_embd") ? 4 * c["n_embd"].get<double>() : -1);
    num("layer_norm_epsilon", m.norm_eps, 1e-5);
    const std::string act = c.value("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      out.push_back("activation_function: the trainer's GELU is the tanh form (gelu_new), config.json \"" + act + "\"");
    if (c.value("n_positions", 1024) < m.seq_len)
      out.push_back("n_positions: config.json " + std::to_string(c.value("n_positions", 1024)) +
                    " is shorter than model.seq_len " + std::to_string(m.seq_len));
  } else {
    num("hidden_size", m.d_model, -1);
    num("num_hidden_layers", m.n_layers, -1);
    num("num_attention_heads", m.n_heads, -1);
    num("num_key_value_heads", m.n_kv_heads, c.value("num_attention_heads", -1.0));
    num("intermediate_size", m.d_ff, -1);
    num("rms_norm_eps", m.norm_eps, 1e-6);
    num("rope_theta", m.rope_theta, 10000);
    if (c.value("hidden_act", "silu") != "silu") out.push_back("hidden_act: the trainer's MLP is SwiGLU (silu)");
  }
  return out;
}

GlobalTensor take(const LoadedTensor& t) { return {t.shape, t.data}; }

GlobalTensor transposed(const LoadedTensor& t) {
  const int r = t.shape[0], c = t.shape[1];
  GlobalTensor o{{c, r}, std::vector<float>((size_t)r * c)};
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) o.data[(size_t)j * r + i] = t.data[(size_t)i * c + j];
  return o;
}

// Rows [from, from + n) of a 2-D tensor, or elements of a 1-D one.
GlobalTensor rows(const GlobalTensor& t, int from, int n) {
  const size_t width = t.shape.size() == 2 ? (size_t)t.shape[1] : 1;
  GlobalTensor o{t.shape, {}};
  o.shape[0] = n;
  o.data.assign(t.data.begin() + (size_t)from * width, t.data.begin() + (size_t)(from + n) * width);
  return o;
}

struct Mapper {
  std::map<std::string, LoadedTensor>& hf;
  std::map<std::string, GlobalTensor> out;
  std::vector<std::string> missing;
  const LoadedTensor* get(const std::string& name) {
    const auto it = hf.find(name);
    if (it == hf.end()) {
      missing.push_back(name);
      return nullptr;
    }
    return &it->second;
  }
  void done(const std::string& name) { hf.erase(name); }
  void copy(const std::string& ours, const std::string& theirs) {
    if (const LoadedTensor* t = get(theirs)) out[ours] = take(*t), done(theirs);
  }
  void conv1d(const std::string& ours, const std::string& theirs) {  // [in, out] -> [out, in]
    if (const LoadedTensor* t = get(theirs); t && t->shape.size() == 2) out[ours] = transposed(*t), done(theirs);
  }
};

void gpt2(Mapper& mp, const ModelConfig& m) {
  mp.copy("embed.tok", "transformer.wte.weight");
  if (const LoadedTensor* pos = mp.get("transformer.wpe.weight"); pos && pos->shape.size() == 2) {
    mp.out["embed.pos"] = rows(take(*pos), 0, std::min(pos->shape[0], m.seq_len));  // a longer table is cut
    mp.done("transformer.wpe.weight");
  }
  const int d = m.d_model;
  for (int l = 0; l < m.n_layers; l++) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    mp.copy(p + "attn_norm.weight", h + "ln_1.weight");
    mp.copy(p + "attn_norm.bias", h + "ln_1.bias");
    if (const LoadedTensor* w = mp.get(h + "attn.c_attn.weight"); w && w->shape.size() == 2 && w->shape[1] == 3 * d) {
      const GlobalTensor qkv = transposed(*w);  // [3d, d]: q rows, k rows, v rows
      for (int k = 0; k < 3; k++) mp.out[p + "attn.w" + "qkv"[k]] = rows(qkv, k * d, d);
      mp.done(h + "attn.c_attn.weight");
    }
    if (const LoadedTensor* b = mp.get(h + "attn.c_attn.bias"); b && b->shape.size() == 1 && b->shape[0] == 3 * d) {
      for (int k = 0; k < 3; k++) mp.out[p + "attn.b" + "qkv"[k]] = rows(take(*b), k * d, d);
      mp.done(h + "attn.c_attn.bias");
    }
    mp.conv1d(p + "attn.wo", h + "attn.c_proj.weight");
    mp.copy(p + "attn.bo", h + "attn.c_proj.bias");
    mp.copy(p + "mlp_norm.weight", h + "ln_2.weight");
    mp.copy(p + "mlp_norm.bias", h + "ln_2.bias");
    mp.conv1d(p + "mlp.w_fc", h + "mlp.c_fc.weight");
    mp.copy(p + "mlp.b_fc", h + "mlp.c_fc.bias");
    mp.conv1d(p + "mlp.w_proj", h + "mlp.c_proj.weight");
    mp.copy(p + "mlp.b_proj", h + "mlp.c_proj.bias");
    mp.hf.erase(h + "attn.bias");  // the causal-mask buffers older transformers save
    mp.hf.erase(h + "attn.masked_bias");
  }
  mp.copy("final_norm.weight", "transformer.ln_f.weight");
  mp.copy("final_norm.bias", "transformer.ln_f.bias");
}

void llama(Mapper& mp, const ModelConfig& m) {
  mp.copy("embed.tok", "model.embed_tokens.weight");
  for (int l = 0; l < m.n_layers; l++) {
    for (const auto& [ours, hf] : llama_layer_names())
      mp.copy("layers." + std::to_string(l) + "." + ours, "model.layers." + std::to_string(l) + "." + hf);
    mp.hf.erase("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq");  // recomputed, not weights
  }
  mp.copy("final_norm.weight", "model.norm.weight");
}

}  // namespace

std::map<std::string, GlobalTensor> import_hf_dir(const std::string& dir, const ModelConfig& m) {
  std::ifstream f(dir + "/config.json");
  if (!f) throw CheckpointError(dir + "/config.json: cannot read (checkpoint.init_from names a Hugging Face model directory)");
  const nlohmann::json c = nlohmann::json::parse(f, nullptr, false);
  if (c.is_discarded() || !c.is_object()) throw CheckpointError(dir + "/config.json: not a JSON object");
  std::vector<std::string> problems = config_differences(c, m);
  std::map<std::string, LoadedTensor> hf = read_safetensors_dir(dir);
  Mapper mp{hf, {}, {}};
  if (m.arch == Arch::GPT2) gpt2(mp, m);
  else llama(mp, m);
  if (!m.tie_embeddings) mp.copy("lm_head.weight", "lm_head.weight");
  else hf.erase("lm_head.weight");  // a tied head is the embedding (some writers save it anyway)
  for (const std::string& n : mp.missing) problems.push_back("tensor " + n + ": missing from " + dir);
  for (const auto& [n, t] : hf) problems.push_back("tensor " + n + ": not part of this model");
  if (!problems.empty()) {
    std::string msg = dir + " does not match the recipe's model (" + std::to_string(problems.size()) + " difference(s)):";
    for (const std::string& p : problems) msg += "\n  " + p;
    throw CheckpointError(msg);
  }
  return std::move(mp.out);
}

}  // namespace trainer
