#include "ckpt/hf_export.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "ckpt/safetensors.h"
#include "model/layer/layer_decl.h"
#include "runtime/errors.h"
#include "runtime/float_text.h"

namespace fs = std::filesystem;

namespace trainer {

// Every model tensor of the checkpoint assembled to its global shape
// (load_pieces checks each is complete and consistent).
std::map<std::string, GlobalTensor> assemble_checkpoint(const std::string& dir) {
  std::map<std::string, std::vector<int>> shapes;
  for (const ManifestFile& f : manifest_files(dir)) {
    if (f.name.size() < 3 || f.name.substr(f.name.size() - 3) != ".h5") continue;
    H5File h(dir + "/" + f.name, H5File::Read);
    for (const std::string& n : h.list("param")) shapes[n] = h.get_attr("param/" + n, "global_shape");
  }
  std::map<std::string, GlobalTensor> out;
  std::vector<TensorPiece> pieces;
  for (const auto& [name, shape] : shapes) {
    GlobalTensor& t = out[name];
    t.shape = shape;
    size_t n = 1;
    for (int x : shape) n *= x;
    t.data.assign(n, 0.f);
    TensorPiece p;
    p.name = name, p.global_shape = shape, p.numel = n, p.data = t.data.data();
    pieces.push_back(p);
  }
  load_pieces(dir, "param", pieces);
  return out;
}

std::map<std::string, std::string> llama_layer_names(const ModelConfig& m) {
  std::map<std::string, std::string> names;
  for (const HfParam& p : layer_hf_params(m)) names[p.ours] = p.theirs;
  return names;
}

namespace {

// Writes tensors of the checkpoint under Hugging Face names to `emit`.
using Emit = std::function<void(const std::string&, const std::vector<float>&, const std::vector<int>&)>;
struct HfWriter {
  const std::map<std::string, GlobalTensor>& t;
  Emit emit;
  const GlobalTensor& get(const std::string& n) const {
    const auto it = t.find(n);
    if (it == t.end()) throw CheckpointError("checkpoint has no tensor " + n);
    return it->second;
  }
  void put(const std::string& name, const std::vector<float>& data, const std::vector<int>& shape) {
    emit(name, data, shape);
  }
  void copy(const std::string& hf, const std::string& ours) { put(hf, get(ours).data, get(ours).shape); }
  // [rows, cols] -> [cols, rows] (GPT-2's Conv1D stores [in, out]).
  void transposed(const std::string& hf, const GlobalTensor& g) {
    const int r = g.shape[0], c = g.shape[1];
    std::vector<float> o((size_t)r * c);
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++) o[(size_t)j * r + i] = g.data[(size_t)i * c + j];
    put(hf, o, {c, r});
  }
};

// A layer as its blocks declare it (layer_hf_params): row blocks of one of
// theirs joined in order (c_attn: [wq; wk; wv], then transposed), the
// others copied or transposed.
void gpt2_layer(HfWriter& w, const std::vector<HfParam>& params, int l) {
  const std::string p = "layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
  for (size_t i = 0; i < params.size(); i++) {
    const HfParam& q = params[i];
    if (q.block > 0) continue;  // joined with block 0
    if (q.block < 0) {
      if (q.transposed) w.transposed(h + q.theirs, w.get(p + q.ours));
      else w.copy(h + q.theirs, p + q.ours);
      continue;
    }
    GlobalTensor joined = w.get(p + q.ours);
    for (size_t j = i + 1; j < params.size(); j++)
      if (params[j].theirs == q.theirs) {
        const GlobalTensor& g = w.get(p + params[j].ours);
        joined.data.insert(joined.data.end(), g.data.begin(), g.data.end());
        joined.shape[0] += g.shape[0];
      }
    if (q.transposed) w.transposed(h + q.theirs, joined);
    else w.put(h + q.theirs, joined.data, joined.shape);
  }
}

void gpt2(HfWriter& w, const ModelConfig& m) {
  w.copy("transformer.wte.weight", "embed.tok");
  w.copy("transformer.wpe.weight", "embed.pos");
  const std::vector<HfParam> params = layer_hf_params(m);
  for (int l = 0; l < m.n_layers; l++) gpt2_layer(w, params, l);
  w.copy("transformer.ln_f.weight", "final_norm.weight");
  w.copy("transformer.ln_f.bias", "final_norm.bias");
}

void llama(HfWriter& w, const ModelConfig& m) {
  w.copy("model.embed_tokens.weight", "embed.tok");
  const std::map<std::string, std::string> names = llama_layer_names(m);
  for (int l = 0; l < m.n_layers; l++)
    for (const auto& [ours, hf] : names)
      w.copy("model.layers." + std::to_string(l) + "." + hf, "layers." + std::to_string(l) + "." + ours);
  w.copy("model.norm.weight", "final_norm.weight");
}

void write_tensors(const std::map<std::string, GlobalTensor>& t, const ModelConfig& m, const Emit& emit) {
  if (m.moe.enabled())
    throw CheckpointError("a Mixture-of-Experts model ([moe]) does not export to Hugging Face yet (issue 71)");
  HfWriter w{t, emit};
  if (m.arch == Arch::Llama) llama(w, m);
  else gpt2(w, m);
  // A tied head is the embedding: stored once, and loaders tie it back
  // (config.tie_word_embeddings); a second copy would travel into every
  // conversion (llama.cpp's GGUF).
  if (!m.tie_embeddings) w.copy("lm_head.weight", "lm_head.weight");
}

std::vector<bf16> rounded(const std::vector<float>& data) {
  std::vector<bf16> b(data.size());
  for (size_t i = 0; i < data.size(); i++) b[i] = to_bf16(data[i]);
  return b;
}

// A directory beside out_dir, renamed onto it when complete.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& p) : path(p) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (!fs::create_directories(path, ec) || ec) throw CheckpointError(path + ": cannot create: " + ec.message());
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

void export_hf(const std::map<std::string, GlobalTensor>& t, const ModelConfig& m, const std::string& out_path,
               DType dtype, const TextEnds& ends) {
  size_t bytes = 0;
  for (const auto& [name, g] : t) bytes += g.data.size() * sizeof(float);
  const std::string tmp = out_path + ".tmp";
  H5File f(tmp, H5File::Create, bytes);
  write_tensors(t, m, [&](const std::string& name, const std::vector<float>& data, const std::vector<int>& shape) {
    if (dtype == DType::F32) return f.write(name, data.data(), shape);
    f.write(name, rounded(data).data(), shape);
  });
  const bool llama = m.arch == Arch::Llama;
  f.set_string_attr("/", "format",
                    llama ? "Hugging Face LlamaForCausalLM names; Linear weights [out, in]; rotate-half RoPE"
                          : "Hugging Face GPT2LMHeadModel names; Conv1D weights [in, out], c_attn = [q k v]");
  f.set_string_attr("/", "dtype", dtype_name(dtype));
  f.set_string_attr("/", "config.json", hf_config_json(m, dtype, ends));
  f.close();
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw CheckpointError(out_path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
}

bool is_hf_h5_export(const std::string& path) {
  try {
    H5File f(path, H5File::Read);
    return f.has_attr("/", "config.json");
  } catch (const CheckpointError&) {
    return false;  // not HDF5, or unreadable: not ours to replace
  }
}

std::vector<std::string> export_hf_dir(
    const std::map<std::string, GlobalTensor>& t, const ModelConfig& m, const std::string& out_dir, DType dtype,
    size_t max_shard_bytes, const TextEnds& ends,
    const std::function<std::vector<std::string>(const std::string& dir)>& extra) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
    throw CheckpointError(out_dir + ": exists and is not a directory; a Hugging Face export is a directory of "
                          "files (config.json, model.safetensors, the tokenizer): give --output a new directory");
  if (fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec))
    throw CheckpointError(out_dir + ": exists and is not empty; export into a new directory");
  std::vector<SafeTensor> tensors;
  write_tensors(t, m, [&](const std::string& name, const std::vector<float>& data, const std::vector<int>& shape) {
    SafeTensor s{name, dtype, shape, {}};
    const void* p = data.data();
    std::vector<bf16> b;
    if (dtype == DType::BF16) b = rounded(data), p = b.data();
    const size_t n = data.size() * (dtype == DType::BF16 ? 2 : 4);
    s.bytes.assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    tensors.push_back(std::move(s));
  });
  TempDir tmp(out_dir + ".tmp");
  std::vector<std::string> files = write_safetensors(tmp.path, tensors, max_shard_bytes, {{"format", "pt"}});
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream f(tmp.path + "/" + name);
    if (!(f << text) || !f.flush()) throw CheckpointError(tmp.path + "/" + name + ": cannot write");
    files.push_back(name);
  };
  write("config.json", hf_config_json(m, dtype, ends));
  if (const std::string g = hf_generation_config_json(m, ends); !g.empty()) write("generation_config.json", g);
  if (extra)
    for (const std::string& f : extra(tmp.path)) files.push_back(f);
  fs::remove(out_dir, ec);  // an empty directory makes way
  fs::rename(tmp.path, out_dir, ec);
  if (ec) throw CheckpointError(out_dir + ": cannot rename " + tmp.path + " into place: " + ec.message());
  tmp.path.clear();
  return files;
}

namespace {
// An id the vocabulary holds, else null.
nlohmann::ordered_json id_or_null(const std::optional<uint32_t>& id, const ModelConfig& m) {
  return id && *id < (uint32_t)m.vocab_size ? nlohmann::ordered_json(*id) : nlohmann::ordered_json(nullptr);
}
}  // namespace

std::string hf_generation_config_json(const ModelConfig& m, const TextEnds& ends) {
  const nlohmann::ordered_json eos = id_or_null(ends.eos, m);
  if (eos.is_null()) return "";
  nlohmann::ordered_json j = {{"bos_token_id", id_or_null(ends.bos, m)}, {"eos_token_id", eos}};
  if (const nlohmann::ordered_json pad = id_or_null(ends.pad, m); !pad.is_null()) j["pad_token_id"] = pad;
  j["transformers_version"] = kHfTransformersVersion;
  return j.dump(2) + "\n";
}

std::string hf_config_json(const ModelConfig& m, DType dtype, const TextEnds& ends) {
  nlohmann::ordered_json j;
  const char* torch_dtype = dtype == DType::BF16 ? "bfloat16" : "float32";
  if (m.arch == Arch::GPT2) {
    j = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", m.vocab_size},
         {"n_positions", m.seq_len}, {"n_ctx", m.seq_len}, {"n_embd", m.d_model}, {"n_layer", m.n_layers},
         {"n_head", m.n_heads}, {"n_inner", m.d_ff}, {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", float_as_written(m.norm_eps)}, {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0},
         {"scale_attn_weights", true}, {"tie_word_embeddings", m.tie_embeddings}, {"torch_dtype", torch_dtype}};
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", m.vocab_size},
         {"hidden_size", m.d_model}, {"intermediate_size", m.d_ff}, {"num_hidden_layers", m.n_layers},
         {"num_attention_heads", m.n_heads}, {"num_key_value_heads", m.n_kv_heads},
         {"max_position_embeddings", m.seq_len}, {"hidden_act", "silu"}, {"rms_norm_eps", float_as_written(m.norm_eps)},
         {"rope_theta", float_as_written(m.rope_theta)}, {"attention_bias", false}, {"tie_word_embeddings", m.tie_embeddings},
         {"torch_dtype", torch_dtype}};
    const RopeScaling& s = m.rope_scaling;
    if (s.type == RopeScaling::Type::Llama3)  // transformers 4.43+ form, which 5.x still reads
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.factor}, {"low_freq_factor", s.low_freq_factor},
                           {"high_freq_factor", s.high_freq_factor},
                           {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  j["bos_token_id"] = id_or_null(ends.bos, m);
  j["eos_token_id"] = id_or_null(ends.eos, m);
  if (const nlohmann::ordered_json pad = id_or_null(ends.pad, m); !pad.is_null()) j["pad_token_id"] = pad;
  j["transformers_version"] = kHfTransformersVersion;
  return j.dump(2) + "\n";
}

}  // namespace trainer
