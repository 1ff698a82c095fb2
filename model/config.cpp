#include "model/config.h"

namespace trainer {

const char* arch_name(Arch a) { return a == Arch::GPT2 ? "gpt2" : "llama"; }

std::vector<std::pair<std::string, std::string>> validate(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::string>> err;
  auto positive = [&](const char* key, int v) {
    if (v <= 0) err.push_back({key, "must be a positive integer, got " + std::to_string(v)});
  };
  positive("vocab_size", c.vocab_size);
  positive("d_model", c.d_model);
  positive("n_layers", c.n_layers);
  positive("n_heads", c.n_heads);
  positive("d_ff", c.d_ff);
  positive("seq_len", c.seq_len);
  if (!err.empty()) return err;
  if (c.d_model % c.n_heads != 0)
    err.push_back({"n_heads", "n_heads = " + std::to_string(c.n_heads) +
                                  " must divide d_model = " + std::to_string(c.d_model)});
  if (c.arch == Arch::GPT2 && c.rope_scaling.type != RopeScaling::Type::None)
    err.push_back({"rope_scaling", "gpt2 has learned positions, not RoPE: set rope_scaling = {} or arch = \"llama\""});
  if (c.arch == Arch::Llama) {
    if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
      err.push_back({"n_kv_heads", "n_kv_heads = " + std::to_string(c.n_kv_heads) +
                                       " must be positive and divide n_heads = " +
                                       std::to_string(c.n_heads)});
    if (c.d_model % c.n_heads == 0 && c.head_dim() % 2 != 0)
      err.push_back({"n_heads", "RoPE needs an even head dimension (d_model / n_heads = " +
                                    std::to_string(c.head_dim()) + ")"});
  }
  return err;
}

}  // namespace trainer
