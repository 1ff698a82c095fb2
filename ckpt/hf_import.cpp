#include "ckpt/hf_import.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "model/layer/layer_decl.h"
#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace {

// RoPE as config.json gives it: transformers 5 keeps the base and the scaling
// in rope_parameters ({rope_type, rope_theta, factor, ...}); 4.x has a
// top-level rope_theta and rope_scaling (rope_type, or the older "type").
struct HfRope {
  double theta = 10000;
  RopeScaling scaling;
  std::string theta_field = "rope_theta";
  std::vector<std::string> problems;  // what the trainer cannot represent
};

HfRope read_rope(const nlohmann::json& c) {
  HfRope r;
  const auto number = [&](const nlohmann::json& o, const std::string& where, const char* key, double& out) {
    if (!o.contains(key) || o[key].is_null()) return false;  // null: absent, as transformers reads it
    if (!o[key].is_number()) r.problems.push_back(where + key + ": expected a number, config.json has " + o[key].dump());
    else out = o[key].get<double>();
    return true;
  };
  if (c.contains("rope_theta")) number(c, "", "rope_theta", r.theta);
  const bool v5 = c.contains("rope_parameters") && !c["rope_parameters"].is_null();
  const char* field = v5 ? "rope_parameters" : "rope_scaling";
  if (v5 && c.contains("rope_scaling") && !c["rope_scaling"].is_null() && c["rope_scaling"] != c["rope_parameters"])
    r.problems.push_back("rope_scaling and rope_parameters: both given and they differ; config.json must say one thing");
  if (!c.contains(field) || c[field].is_null()) return r;
  const nlohmann::json& p = c[field];
  const std::string where = std::string(field) + ".";
  if (!p.is_object()) {
    r.problems.push_back(std::string(field) + ": expected an object, config.json has " + p.dump());
    return r;
  }
  if (v5 && number(p, where, "rope_theta", r.theta)) r.theta_field = where + "rope_theta";
  const nlohmann::json type = p.contains("rope_type") ? p["rope_type"] : p.value("type", nlohmann::json("default"));
  if (!type.is_string()) {
    r.problems.push_back(where + "rope_type: expected a string, config.json has " + type.dump());
    return r;
  }
  const std::string t = type.get<std::string>();
  if (t == "default") return r;
  if (t != "llama3") {
    r.problems.push_back(where + "rope_type: \"" + t + "\" changes the positions in a way the trainer does not "
                         "implement (it has \"llama3\")");
    return r;
  }
  RopeScaling& s = r.scaling;
  s.type = RopeScaling::Type::Llama3;
  double orig = 0;
  for (auto [key, out] : {std::pair<const char*, double*>{"factor", &s.factor}, {"low_freq_factor", &s.low_freq_factor},
                          {"high_freq_factor", &s.high_freq_factor}, {"original_max_position_embeddings", &orig}})
    if (!number(p, where, key, *out)) r.problems.push_back(where + key + ": missing (llama3 scaling needs it)");
  if (orig != std::floor(orig) || orig < 1 || orig > 2147483647.0)
    r.problems.push_back(where + "original_max_position_embeddings: expected a positive integer, config.json has " +
                         nlohmann::json(orig).dump());
  else
    s.original_max_position_embeddings = (int)orig;
  for (auto it = p.begin(); it != p.end(); ++it)
    if (it.key() != "rope_type" && it.key() != "type" && it.key() != "rope_theta" && it.key() != "factor" &&
        it.key() != "low_freq_factor" && it.key() != "high_freq_factor" &&
        it.key() != "original_max_position_embeddings")
      r.problems.push_back(where + it.key() + ": a field of llama3 scaling the trainer does not know");
  return r;
}

// Fields that change what a model computes, at the value that does not:
// another value is refused by name rather than ignored.
void unsupported_fields(const nlohmann::json& c, bool gpt2, std::vector<std::string>& out) {
  const std::vector<std::pair<const char*, nlohmann::json>> neutral =
      gpt2 ? std::vector<std::pair<const char*, nlohmann::json>>{{"scale_attn_weights", true},
                                                                 {"scale_attn_by_inverse_layer_idx", false},
                                                                 {"add_cross_attention", false}}
           : std::vector<std::pair<const char*, nlohmann::json>>{{"attention_bias", false},
                                                                 {"mlp_bias", false},
                                                                 {"partial_rotary_factor", 1.0},
                                                                 {"sliding_window", nullptr},
                                                                 {"attn_logit_softcapping", nullptr},
                                                                 {"final_logit_softcapping", nullptr}};
  for (const auto& [key, value] : neutral)
    if (c.contains(key) && c[key] != value)
      out.push_back(std::string(key) + ": config.json " + c[key].dump() + "; the trainer computes only " + value.dump());
  if (!gpt2 && c.contains("head_dim") && c["head_dim"].is_number() && c.contains("hidden_size") &&
      c.contains("num_attention_heads") && c["hidden_size"].is_number() && c["num_attention_heads"].is_number() &&
      c["num_attention_heads"].get<double>() > 0 &&
      c["head_dim"].get<double>() != c["hidden_size"].get<double>() / c["num_attention_heads"].get<double>())
    out.push_back("head_dim: config.json " + c["head_dim"].dump() + "; the trainer's heads are hidden_size / "
                  "num_attention_heads wide");
}

// (field, ours, theirs) for each config.json field that differs from the recipe.
std::vector<std::string> config_differences(const nlohmann::json& c, const ModelConfig& m) {
  std::vector<std::string> out;
  auto text = [](double x) {
    return x == std::floor(x) && std::fabs(x) < 1e15 ? std::to_string((long long)x) : nlohmann::json(x).dump();
  };
  // A field of the wrong JSON type is named with what it holds (exit 4), and
  // the default stands in for it so the other fields are still compared.
  // null is absent, as transformers reads it (GPT2Config saves "n_inner": null).
  std::set<std::string> wrong;  // fields named for their type: not compared again
  auto present = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto typed = [&](const char* key, bool ok, const char* expected) {
    if (present(key) && !ok) {
      out.push_back(std::string(key) + ": expected " + expected + ", config.json has " + c[key].dump());
      wrong.insert(key);
    }
    return present(key) && ok;
  };
  auto number = [&](const char* key, double dflt) {
    return typed(key, present(key) && c[key].is_number(), "a number") ? c[key].get<double>() : dflt;
  };
  auto string = [&](const char* key, const char* dflt) {
    return typed(key, present(key) && c[key].is_string(), "a string") ? c[key].get<std::string>() : std::string(dflt);
  };
  auto num = [&](const char* key, double ours, double dflt) {
    const double theirs = number(key, dflt);
    if (wrong.count(key)) return;
    if ((float)theirs != (float)ours) out.push_back(std::string(key) + ": recipe " + text(ours) + ", config.json " + text(theirs));
  };
  const bool gpt2 = m.arch == Arch::GPT2;
  const std::string type = string("model_type", "");
  if (!wrong.count("model_type") && type != (gpt2 ? "gpt2" : "llama"))
    out.push_back("model_type: recipe " + std::string(gpt2 ? "gpt2" : "llama") + ", config.json \"" + type + "\"");
  // transformers' defaults: GPT-2 tied, Llama not
  const bool tied = typed("tie_word_embeddings", present("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean(),
                          "true or false") ? c["tie_word_embeddings"].get<bool>() : gpt2;
  if (!wrong.count("tie_word_embeddings") && tied != m.tie_embeddings)
    out.push_back(std::string("tie_word_embeddings: recipe ") + (m.tie_embeddings ? "true" : "false") +
                  ", config.json " + (tied ? "true" : "false"));
  num("vocab_size", m.vocab_size, -1);
  if (gpt2) {
    num("n_embd", m.d_model, -1);
    num("n_layer", m.n_layers, -1);
    num("n_head", m.n_heads, -1);
    const double n_embd = c.contains("n_embd") && c["n_embd"].is_number() ? c["n_embd"].get<double>() : -1;
    num("n_inner", m.d_ff, n_embd > 0 ? 4 * n_embd : -1);
    num("layer_norm_epsilon", m.norm_eps, 1e-5);
    const std::string act = string("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      out.push_back("activation_function: the trainer's GELU is the tanh form (gelu_new), config.json \"" + act + "\"");
    const double positions = number("n_positions", 1024);
    if (positions < m.seq_len)
      out.push_back("n_positions: config.json " + text(positions) + " is shorter than model.seq_len " +
                    std::to_string(m.seq_len));
  } else {
    num("hidden_size", m.d_model, -1);
    num("num_hidden_layers", m.n_layers, -1);
    num("num_attention_heads", m.n_heads, -1);
    const double heads = c.contains("num_attention_heads") && c["num_attention_heads"].is_number()
                             ? c["num_attention_heads"].get<double>() : -1;
    num("num_key_value_heads", m.n_kv_heads, heads);
    num("intermediate_size", m.d_ff, -1);
    num("rms_norm_eps", m.norm_eps, 1e-6);
    const HfRope rope = read_rope(c);
    out.insert(out.end(), rope.problems.begin(), rope.problems.end());
    if (rope.problems.empty() && (float)rope.theta != m.rope_theta)
      out.push_back(rope.theta_field + ": recipe " + text(m.rope_theta) + ", config.json " + text(rope.theta) +
                    " (model.rope_theta)");
    if (rope.problems.empty() && rope.scaling != m.rope_scaling)
      out.push_back("rope_scaling: recipe " + rope_scaling_toml(m.rope_scaling) + ", config.json " +
                    rope_scaling_toml(rope.scaling) + " (model.rope_scaling)");
    if (string("hidden_act", "silu") != "silu") out.push_back("hidden_act: the trainer's MLP is SwiGLU (silu)");
  }
  unsupported_fields(c, gpt2, out);
  return out;
}

// A model that learned to begin or end text with other ids than the data's
// tokenizer would, after training, never stop (or stop at an ordinary
// token). A config may list several eos ids (Llama 3.1: end of text, of a
// turn, of a message): the data's must be among them.
void special_id_differences(const nlohmann::json& c, const TextEnds& data, std::vector<std::string>& out) {
  for (const auto& [key, ours] : {std::pair{"bos_token_id", data.bos}, {"eos_token_id", data.eos}}) {
    if (!ours || !c.contains(key) || c[key].is_null()) continue;
    const nlohmann::json& v = c[key];
    bool has = false, typed = v.is_number_integer();
    if (v.is_array()) {
      typed = true;
      for (const auto& x : v) {
        typed = typed && x.is_number_integer();
        has = has || (x.is_number_integer() && x.get<int64_t>() == (int64_t)*ours);
      }
    } else if (typed) {
      has = v.get<int64_t>() == (int64_t)*ours;
    }
    if (!typed) out.push_back(std::string(key) + ": expected an id (or a list of ids), config.json has " + v.dump());
    else if (!has)
      out.push_back(std::string(key) + ": config.json " + v.dump() + ", but the run's data was tokenized with " +
                    std::to_string(*ours) + " (its tokenizer, data_info.json): the model would " +
                    (std::string(key) == "eos_token_id" ? "end" : "begin") +
                    " text with another token; start from a model of the data's tokenizer");
  }
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
  // A layer as its blocks declare it (layer_hf_params); one of theirs that
  // holds several of ours as row blocks is split by our shapes (the
  // registry's) where its size is theirs summed.
  const std::vector<HfParam> params = layer_hf_params(m);
  const ModelParams shapes = build_params(m, 1, 0, ChunkSpec{0, std::min(1, m.n_layers), false, false});
  auto rows_of = [&](const HfParam& q) { return shapes.reg.find("layers.0." + q.ours)->global_shape; };
  for (int l = 0; l < m.n_layers; l++) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    for (size_t i = 0; i < params.size(); i++) {
      const HfParam& q = params[i];
      if (q.block > 0) continue;  // split with block 0
      if (q.block < 0) {
        if (q.transposed) mp.conv1d(p + q.ours, h + q.theirs);
        else mp.copy(p + q.ours, h + q.theirs);
        continue;
      }
      std::vector<const HfParam*> blocks;
      int total = 0;
      for (size_t j = i; j < params.size(); j++)
        if (params[j].theirs == q.theirs) blocks.push_back(&params[j]), total += rows_of(params[j])[0];
      const size_t rank = rows_of(q).size();
      const LoadedTensor* t = mp.get(h + q.theirs);
      if (!t || t->shape.size() != rank || t->shape[q.transposed && rank == 2 ? 1 : 0] != total) continue;
      const GlobalTensor all = q.transposed && rank == 2 ? transposed(*t) : take(*t);  // our blocks' rows, in order
      int first = 0;
      for (const HfParam* b : blocks) {
        const int n = rows_of(*b)[0];
        mp.out[p + b->ours] = rows(all, first, n);
        first += n;
      }
      mp.done(h + q.theirs);
    }
    mp.hf.erase(h + "attn.bias");  // the causal-mask buffers older transformers save
    mp.hf.erase(h + "attn.masked_bias");
  }
  mp.copy("final_norm.weight", "transformer.ln_f.weight");
  mp.copy("final_norm.bias", "transformer.ln_f.bias");
}

void llama(Mapper& mp, const ModelConfig& m) {
  mp.copy("embed.tok", "model.embed_tokens.weight");
  const std::map<std::string, std::string> names = llama_layer_names(m);
  for (int l = 0; l < m.n_layers; l++) {
    for (const auto& [ours, hf] : names)
      mp.copy("layers." + std::to_string(l) + "." + ours, "model.layers." + std::to_string(l) + "." + hf);
    mp.hf.erase("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq");  // recomputed, not weights
  }
  mp.copy("final_norm.weight", "model.norm.weight");
}

}  // namespace

std::map<std::string, GlobalTensor> import_hf_dir(const std::string& dir, const ModelConfig& m,
                                                  const TextEnds& data_ends) {
  if (m.moe.enabled())
    throw CheckpointError("checkpoint.init_from: a Mixture-of-Experts model ([moe]) does not import from Hugging "
                          "Face yet (issue 71)");
  if (const std::string why = not_regular_file(dir + "/config.json"); !why.empty())
    throw CheckpointError(dir + "/config.json: " + why);
  std::ifstream f(dir + "/config.json");
  if (!f) throw CheckpointError(dir + "/config.json: cannot read (checkpoint.init_from names a Hugging Face model directory)");
  const nlohmann::json c = nlohmann::json::parse(f, nullptr, false);
  if (c.is_discarded() || !c.is_object()) throw CheckpointError(dir + "/config.json: not a JSON object");
  std::vector<std::string> problems = config_differences(c, m);
  special_id_differences(c, data_ends, problems);
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
