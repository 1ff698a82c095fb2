#include "model/layer/attention.h"

#include "model/memory_plan.h"
#include "parallel/context_attention.h"
#include "runtime/cuda_memory.h"

#include <stdexcept>

namespace trainer {

SavedActs Attention::saved(const LayerShape& s) {
  const size_t stats = s.B * s.H * s.T * Backend::kAttentionStats;  // per query row and head
  const Kept k = Kept::UnlessFull;
  return {{s.M * s.Q, false, k}, {stats, true, k}, {s.M * s.att, false, k}};
}

std::vector<size_t> Attention::scratch(const LayerShape& s) { return {s.M * s.att, s.M * s.Q}; }

void Attention::add_params(ParamRegistry& r, const std::string& p, const ModelConfig& c, LayerParams& lp) {
  const int d = c.d_model, hd = c.head_dim(), H = c.n_heads, KV = c.kv_heads();
  const Sharding col = Sharding::Dim0;
  // wq|wk|wv adjacent: this rank's [q+k+v heads x d] projection is one matrix.
  lp.wqkv = r.add(p + "attn.wq", {H * hd, d}, true, col).offset;
  r.add(p + "attn.wk", {KV * hd, d}, true, col);
  r.add(p + "attn.wv", {KV * hd, d}, true, col);
  if (c.has_bias()) {
    lp.bqkv = r.add(p + "attn.bq", {H * hd}, false, col).offset;
    r.add(p + "attn.bk", {KV * hd}, false, col);
    r.add(p + "attn.bv", {KV * hd}, false, col);
  }
  lp.wo = r.add(p + "attn.wo", {d, H * hd}, true, Sharding::Dim1).offset;
  if (c.has_bias()) lp.bo = r.add(p + "attn.bo", {d}, false, Sharding::Replicated, true).offset;
}

std::vector<HfParam> Attention::hf_params(const ModelConfig& c) {
  if (c.arch == Arch::Llama)
    return {{"attn.wq", "self_attn.q_proj.weight"},
            {"attn.wk", "self_attn.k_proj.weight"},
            {"attn.wv", "self_attn.v_proj.weight"},
            {"attn.wo", "self_attn.o_proj.weight"}};
  return {{"attn.wq", "attn.c_attn.weight", true, 0}, {"attn.wk", "attn.c_attn.weight", true, 1},
          {"attn.wv", "attn.c_attn.weight", true, 2}, {"attn.bq", "attn.c_attn.bias", false, 0},
          {"attn.bk", "attn.c_attn.bias", false, 1},  {"attn.bv", "attn.c_attn.bias", false, 2},
          {"attn.wo", "attn.c_proj.weight", true},    {"attn.bo", "attn.c_proj.bias"}};
}

double Attention::matmul_params(const ModelConfig& c) {
  const double d = c.d_model;
  return d * c.qkv_dim() + d * d;
}

double Attention::rerun_flops(const LayerShape& s) {
  const double qkv = 2.0 * s.M * s.d * s.Q, out_proj = 2.0 * s.M * s.att * s.d;
  const double core = 2.0 * 2 * s.B * s.H * s.T * s.keys * s.hd;  // QK^T and PV
  return qkv + core + out_proj;
}

AttentionShape Attention::attention_shape(const LayerShape& s) {
  return {(int)s.B, (int)s.T, (int)s.H, (int)s.KV, (int)s.hd, (int)s.Q};
}

// Ring attention (parallel/ring_attention.h): two k|v blocks in flight,
// three fp32 dK|dV blocks, the fp32 running output (then dq) and the
// statistics' start. All-to-all (parallel/ulysses_attention.h): its send and
// receive buffers, each as large as this rank's q|k|v, and the head group's
// whole sequence of q|k|v, output, output gradient and dq|dk|dv (as many
// elements as this rank's own).
Attention::Buffers Attention::context_buffers(const LayerShape& s, const RankLayout& l, double e) {
  const double f = 4, M = s.M, Q = s.Q, att = s.att;
  Buffers b;
  if (l.cp > 1 && l.cp_comm == CpComm::Ring) {
    const double kv = M * 2 * s.KV * s.hd;
    b.comm = 2 * kv * e + 3 * kv * f;
    b.temporaries = (M * att + (double)s.B * s.H * s.T * Backend::kAttentionStats) * f;
  }
  if (l.cp > 1 && l.cp_comm == CpComm::A2a) {
    b.comm = 2 * M * Q * e;
    b.temporaries = (2 * M * Q + 2 * M * att) * e;
  }
  return b;
}

// The all-to-all's attention runs on whole sequences.
double Attention::backward_rows(const LayerShape& s, const RankLayout& l) {
  return l.cp > 1 && l.cp_comm == CpComm::A2a ? s.keys : s.T;
}

// cuDNN's workspace: the all-to-all's attention runs on whole sequences of
// H / cp heads, the ring's on one chunk pair at a time (T / 2 queries against
// T / 2 keys), whose bf16 output and packed gradient cuDNN writes into a
// block of their own before our kernels fold them in; the allocator keeps
// the forward's output block besides.
void Attention::plan_cuda(const LayerShape& s, const RankLayout& l, CudaMemory& m) {
  const double B = s.B, H = s.H, T = s.T, hd = s.hd, keys = s.keys;
  const bool bf16 = l.compute == DType::BF16;
  const bool ring = l.cp > 1 && l.cp_comm == CpComm::Ring, a2a = l.cp > 1 && !ring;
  if (bf16)
    m.attention_workspace = a2a    ? cuda_memory::attention_workspace_bytes(B, H / l.cp, keys, hd, l.deterministic_attention)
                            : ring ? cuda_memory::attention_workspace_bytes(B, H, T / 2, hd, l.deterministic_attention)
                                   : cuda_memory::attention_workspace_bytes(B, H, T, hd, l.deterministic_attention);
  if (bf16 && ring) m.attention_block = B * (T / 2) * (double)s.Q * 2;
  m.attention_rows = B * H * T * 4;
  if (m.attention_block) m.allocator_reserve += B * (T / 2) * (double)s.att * 2;
}

// How cuDNN's attention workspace grows (runtime/cuda_memory.h): with T the
// tokens of a sequence on a rank and H its heads.
std::string Attention::workspace_words(const RankLayout& l) {
  if (l.compute != DType::BF16) return "fp32 runs the own kernels";
  const bool cp = l.cp > 1, ring = cp && l.cp_comm == CpComm::Ring;
  const std::string t = ring ? "(T/2)" : cp ? "seq_len" : "T", h = cp && !ring ? "H/cp" : "H";
  const std::string each = ring ? " for each ring pair" : cp ? " on whole sequences" : "";
  return l.deterministic_attention ? "deterministic backward: B x " + h + " x " + t + "^2 fp32" + each
                                   : "non-deterministic backward: B x " + h + " x " + t + " x hd fp32" + each;
}

Attention::Attention(Backend& be, const ModelConfig& c, const LayerShape& s, const RankLayout& l, DataComm* group,
                     std::vector<int> positions)
    : bias_(c.has_bias()), rotate_(c.rope_positions()), freqs_(c.rope()), shape_(attention_shape(s)),
      positions_(std::move(positions)) {
  if ((group ? group->size() : 1) != l.cp) throw std::invalid_argument("the layout's cp differs from the cp group's size");
  if (l.cp > 1) cp_ = make_context_attention(l.cp_comm, be, *group, shape_, l.compute, l.cp_overlap);
}

Attention::~Attention() = default;

const CpTimes* Attention::cp_times() const { return cp_ ? &cp_->times() : nullptr; }
void Attention::reset_cp_times() {
  if (cp_) cp_->reset_times();
}

// RoPE at the tokens' places in the whole sequence: under context
// parallelism each of this rank's two chunks of a sequence starts at its own.
void Attention::rope(const LayerOps& o, Ref qkv, bool inverse) const {
  if (!cp_) return o.be->rope(qkv, shape_, freqs_, inverse);
  const int chunk = shape_.T / 2;
  for (int b = 0; b < shape_.B; b++)
    for (int half = 0; half < 2; half++) {
      AttentionShape run = shape_;
      run.B = 1, run.T = chunk, run.t0 = positions_[half * chunk];
      o.be->rope(qkv + ((size_t)b * shape_.T + half * chunk) * shape_.row, run, freqs_, inverse);
    }
}

void Attention::forward(const LayerOps& o, const LayerParams& lp, const std::vector<Ref>& s, CRef in, Ref out,
                        CRef resid) {
  const int M = (int)o.shape.M, d = (int)o.shape.d, Q = shape_.row;
  o.be->matmul(false, true, M, Q, d, 1.f, in, o.W(lp.wqkv), 0.f, s[kQkv]);
  if (bias_) o.be->add_bias(s[kQkv], o.W(lp.bqkv), M, Q);
  if (rotate_) rope(o, s[kQkv], false);
  if (cp_) cp_->forward(s[kOut], s[kStats].f32(), s[kQkv]);
  else o.be->attention_fwd(s[kOut], s[kStats].f32(), s[kQkv], shape_);
  o.row_parallel(out, resid, s[kOut], (int)o.shape.att, lp.wo, lp.bo, bias_);
}

void Attention::backward(const LayerOps& o, const LayerParams& lp, const std::vector<Ref>& s,
                         const std::vector<Ref>& g, CRef g_out, CRef in, Ref g_in) {
  const int M = (int)o.shape.M, d = (int)o.shape.d, Q = shape_.row, A = (int)o.shape.att;
  if (bias_) o.be->bias_bwd(o.G(lp.bo), g_out, (int)o.shape.R, d);
  const CRef gf = o.grad_rows_to_full(g_out);
  o.be->matmul(false, false, M, A, d, 1.f, gf, o.W(lp.wo), 0.f, g[kGOut]);
  o.be->matmul(true, false, d, A, M, 1.f, gf, s[kOut], 1.f, o.G(lp.wo));
  if (cp_) cp_->backward(g[kGQkv], g[kGOut], s[kQkv], s[kOut], s[kStats].f32());
  else o.be->attention_bwd(g[kGQkv], g[kGOut], s[kQkv], s[kOut], s[kStats].f32(), shape_);
  if (rotate_) rope(o, g[kGQkv], true);
  o.be->matmul(false, false, M, d, Q, 1.f, g[kGQkv], o.W(lp.wqkv), 0.f, g_in);
  o.be->matmul(true, false, Q, d, M, 1.f, g[kGQkv], in, 1.f, o.G(lp.wqkv));
  if (bias_) o.be->bias_bwd(o.G(lp.bqkv), g[kGQkv], M, Q);
}

}  // namespace trainer
