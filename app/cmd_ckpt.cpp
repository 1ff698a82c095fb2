// `trainer ckpt inspect|verify|export`: look into checkpoints without MPI.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "app/commands.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

const char* kCkptUsage =
    "usage: trainer ckpt inspect PATH              layout, step, files and tensors\n"
    "       trainer ckpt verify PATH               every checksum, and every tensor complete\n"
    "       trainer ckpt export PATH --output F.h5 one HDF5 file, Hugging Face names\n"
    "  PATH: a step directory (run/checkpoints/step_00000100), a checkpoint directory\n"
    "  (its `latest`, else its newest step) or its `latest` file. Exit 4 when the\n"
    "  checkpoint is broken or PATH is not a checkpoint, or the export cannot be written.\n";


struct GlobalTensor {
  std::vector<int> shape;
  std::vector<float> data;
};

// Every model tensor of the checkpoint assembled to its global shape
// (load_pieces checks each is complete and consistent).
std::map<std::string, GlobalTensor> assemble(const std::string& dir) {
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
    pieces.push_back({name, shape, -1, 0, t.data.data(), n});
  }
  load_pieces(dir, "param", pieces);
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return s;
}

// Hugging Face names and layouts (see docs/ARCHITECTURE.md, "Export").
// Written to OUT.tmp and renamed when whole: a failed export (a full disk)
// leaves no file that looks like a model.
void export_hf(const std::map<std::string, GlobalTensor>& t, const std::string& out_path) {
  const bool llama = !t.count("embed.pos");
  size_t bytes = 0;
  for (const auto& [name, g] : t) bytes += g.data.size() * sizeof(float);
  const std::string tmp = out_path + ".tmp";
  H5File f(tmp, H5File::Create, bytes);
  auto put = [&](const std::string& name, const std::vector<float>& data, std::vector<int> shape) {
    f.write(name, data.data(), shape);
  };
  auto get = [&](const std::string& n) -> const GlobalTensor& {
    const auto it = t.find(n);
    if (it == t.end()) throw CheckpointError("checkpoint has no tensor " + n);
    return it->second;
  };
  // [rows, cols] -> [cols, rows] (GPT-2's Conv1D stores [in, out]).
  auto transpose = [](const GlobalTensor& g) {
    const int r = g.shape[0], c = g.shape[1];
    std::vector<float> o((size_t)r * c);
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++) o[(size_t)j * r + i] = g.data[(size_t)i * c + j];
    return o;
  };
  int layers = 0;
  while (t.count("layers." + std::to_string(layers) + ".attn.wq")) layers++;
  if (!llama) {
    put("transformer.wte.weight", get("embed.tok").data, get("embed.tok").shape);
    put("transformer.wpe.weight", get("embed.pos").data, get("embed.pos").shape);
    for (int l = 0; l < layers; l++) {
      const std::string p = "layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
      put(h + "ln_1.weight", get(p + "attn_norm.weight").data, get(p + "attn_norm.weight").shape);
      put(h + "ln_1.bias", get(p + "attn_norm.bias").data, get(p + "attn_norm.bias").shape);
      // c_attn: [d, 3d] = [wq; wk; wv]^T, bias [bq bk bv]
      GlobalTensor qkv;
      qkv.shape = {0, get(p + "attn.wq").shape[1]};
      std::vector<float> b;
      for (const char* w : {"q", "k", "v"}) {
        const GlobalTensor& g = get(p + "attn.w" + std::string(w));
        qkv.data.insert(qkv.data.end(), g.data.begin(), g.data.end());
        qkv.shape[0] += g.shape[0];
        const GlobalTensor& gb = get(p + "attn.b" + std::string(w));
        b.insert(b.end(), gb.data.begin(), gb.data.end());
      }
      put(h + "attn.c_attn.weight", transpose(qkv), {qkv.shape[1], qkv.shape[0]});
      put(h + "attn.c_attn.bias", b, {(int)b.size()});
      const GlobalTensor& wo = get(p + "attn.wo");
      put(h + "attn.c_proj.weight", transpose(wo), {wo.shape[1], wo.shape[0]});
      put(h + "attn.c_proj.bias", get(p + "attn.bo").data, get(p + "attn.bo").shape);
      put(h + "ln_2.weight", get(p + "mlp_norm.weight").data, get(p + "mlp_norm.weight").shape);
      put(h + "ln_2.bias", get(p + "mlp_norm.bias").data, get(p + "mlp_norm.bias").shape);
      const GlobalTensor& fc = get(p + "mlp.w_fc");
      put(h + "mlp.c_fc.weight", transpose(fc), {fc.shape[1], fc.shape[0]});
      put(h + "mlp.c_fc.bias", get(p + "mlp.b_fc").data, get(p + "mlp.b_fc").shape);
      const GlobalTensor& pr = get(p + "mlp.w_proj");
      put(h + "mlp.c_proj.weight", transpose(pr), {pr.shape[1], pr.shape[0]});
      put(h + "mlp.c_proj.bias", get(p + "mlp.b_proj").data, get(p + "mlp.b_proj").shape);
    }
    put("transformer.ln_f.weight", get("final_norm.weight").data, get("final_norm.weight").shape);
    put("transformer.ln_f.bias", get("final_norm.bias").data, get("final_norm.bias").shape);
    const GlobalTensor& head = t.count("lm_head.weight") ? get("lm_head.weight") : get("embed.tok");
    put("lm_head.weight", head.data, head.shape);
  } else {
    put("model.embed_tokens.weight", get("embed.tok").data, get("embed.tok").shape);
    const std::map<std::string, std::string> names = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"attn.wq", "self_attn.q_proj.weight"},
        {"attn.wk", "self_attn.k_proj.weight"},         {"attn.wv", "self_attn.v_proj.weight"},
        {"attn.wo", "self_attn.o_proj.weight"},         {"mlp_norm.weight", "post_attention_layernorm.weight"},
        {"mlp.w_gate", "mlp.gate_proj.weight"},         {"mlp.w_up", "mlp.up_proj.weight"},
        {"mlp.w_down", "mlp.down_proj.weight"}};
    for (int l = 0; l < layers; l++)
      for (const auto& [ours, hf] : names) {
        const GlobalTensor& g = get("layers." + std::to_string(l) + "." + ours);
        put("model.layers." + std::to_string(l) + "." + hf, g.data, g.shape);
      }
    put("model.norm.weight", get("final_norm.weight").data, get("final_norm.weight").shape);
    const GlobalTensor& head = t.count("lm_head.weight") ? get("lm_head.weight") : get("embed.tok");
    put("lm_head.weight", head.data, head.shape);
  }
  f.set_string_attr("/", "format",
                    llama ? "Hugging Face LlamaForCausalLM names; Linear weights [out, in]; rotate-half RoPE"
                          : "Hugging Face GPT2LMHeadModel names; Conv1D weights [in, out], c_attn = [q k v]");
  f.close();
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw CheckpointError(out_path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h")) {
    std::fputs(kCkptUsage, argc < 2 && !(argc == 1 && argv[0][0] == '-') ? stderr : stdout);
    return argc < 2 && !(argc == 1 && argv[0][0] == '-') ? kExitUsage : 0;
  }
  const std::string cmd = argv[0];
  if (cmd != "inspect" && cmd != "verify" && cmd != "export")
    throw RecipeError("ckpt: unknown subcommand \"" + cmd + "\"\n" + kCkptUsage);
  const std::string dir = find_checkpoint(argv[1]);
  if (cmd == "inspect") {
    const TrainingState st = read_manifest(dir, false);
    std::printf("%s: step %ld, %llu samples consumed, AdamW step %ld, saved as dp %d x pp %d x tp %d by trainer %s\n",
                dir.c_str(), st.step, (unsigned long long)st.samples, st.adam_steps, st.dp, st.pp, st.tp,
                manifest_version(dir).c_str());
    for (const ManifestFile& f : manifest_files(dir))
      std::printf("  file %-14s %10zu bytes  crc32 %08x\n", f.name.c_str(), f.bytes, f.crc);
    std::map<std::string, std::pair<std::vector<int>, int>> tensors;  // shape, pieces
    for (const ManifestFile& f : manifest_files(dir)) {
      if (f.name.size() < 3 || f.name.substr(f.name.size() - 3) != ".h5") continue;
      H5File h(dir + "/" + f.name, H5File::Read);
      for (const std::string& n : h.list("param")) {
        auto& e = tensors[n];
        e.first = h.get_attr("param/" + n, "global_shape");
        e.second++;
      }
    }
    for (const auto& [name, e] : tensors)
      std::printf("  tensor %-32s %-14s in %d piece(s)\n", name.c_str(), join(e.first).c_str(), e.second);
    return 0;
  }
  if (cmd == "verify") {
    read_manifest(dir, true);
    const auto t = assemble(dir);
    std::printf("%s: ok (%zu tensors complete, every checksum matches)\n", dir.c_str(), t.size());
    return 0;
  }
  if (cmd == "export") {
    std::string out;
    for (int i = 2; i < argc; i++)
      if (!std::strcmp(argv[i], "--output") && i + 1 < argc) out = argv[++i];
    if (out.empty()) throw RecipeError(std::string("ckpt export needs --output FILE.h5\n") + kCkptUsage);
    read_manifest(dir, true);
    export_hf(assemble(dir), out);
    std::printf("exported %s to %s\n", dir.c_str(), out.c_str());
    return 0;
  }
  throw RecipeError("ckpt: unknown subcommand \"" + cmd + "\"\n" + kCkptUsage);
}

}  // namespace trainer
