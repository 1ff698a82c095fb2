// The only translation unit that includes the cuDNN frontend (it costs over a
// minute and ~2 GB to compile). Graphs follow the frontend's SDPA samples:
// bf16 input/output, fp32 intermediates and compute, causal mask aligned top
// left (a ring pair's diagonal has as many keys as queries, so top left is
// also bottom right), softmax stats generated in forward and consumed in
// backward. A graph is described by where its tensors lie (Geometry).
#include "runtime/cuda/cudnn_sdpa.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "runtime/cuda/cuda_check.h"

namespace trainer::cuda {

namespace fe = cudnn_frontend;

namespace {
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

void check_fe(fe::error_t e, const char* what) {
  if (e.is_bad()) fail("cuDNN frontend", e.get_message(), what, __FILE__, __LINE__);
}
#define FE_CHECK(x) check_fe((x), #x)

void check_cudnn(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) fail("cuDNN", cudnnGetErrorString(st), what, __FILE__, __LINE__);
}

// Dims and strides of one head group: [B, heads, rows, hd].
struct Packed {
  std::vector<int64_t> dim, stride;
};
// heads of hd elements starting each row of `row` elements, `rows` rows
// (of `seq` per sequence) per sequence.
Packed heads(int B, int n, int rows, int hd, int64_t row, int64_t seq) { return {{B, n, rows, hd}, {seq * row, hd, row, 1}}; }
Packed stats_layout(int B, int H, int rows) { return {{B, H, rows, 1}, {(int64_t)H * rows, rows, 1, 1}}; }

// Where one call's tensors lie. The backward reads O and dO in o's layout.
struct Geometry {
  Packed q, k, v, o, stats, dq, dk, dv;
  bool causal;
};
// A whole causal sequence: q|k|v and dq|dk|dv packed rows, out dense.
Geometry whole(const AttentionShape& s) {
  const Packed q = heads(s.B, s.H, s.T, s.hd, s.row, s.T), kv = heads(s.B, s.KVH, s.T, s.hd, s.row, s.T);
  return {q, kv, kv, heads(s.B, s.H, s.T, s.hd, (int64_t)s.H * s.hd, s.T), stats_layout(s.B, s.H, s.T), q, kv, kv,
          true};
}
// A ring pair: queries among the packed rows, keys and values among the
// block's, out the pair's own [B*rows, H*hd] forward and the whole
// attention's rows backward, the gradients packed [B*rows, row].
Geometry pair_geometry(const AttentionShape& s, const AttentionPair& p, bool backward) {
  const int n = p.rows;
  const int64_t width = (int64_t)s.H * s.hd;
  const Packed kv = heads(s.B, s.KVH, n, s.hd, p.kv_row, p.kv_T);
  return {heads(s.B, s.H, n, s.hd, s.row, s.T),
          kv,
          kv,
          backward ? heads(s.B, s.H, n, s.hd, width, s.T) : heads(s.B, s.H, n, s.hd, width, n),
          stats_layout(s.B, s.H, n),
          heads(s.B, s.H, n, s.hd, s.row, n),
          heads(s.B, s.KVH, n, s.hd, s.row, n),
          heads(s.B, s.KVH, n, s.hd, s.row, n),
          p.causal};
}
SdpaKey key_of(const Geometry& g, bool backward) {
  SdpaKey k;
  for (const Packed* t : {&g.q, &g.k, &g.v, &g.o, &g.stats, &g.dq, &g.dk, &g.dv}) {
    k.fields.insert(k.fields.end(), t->dim.begin(), t->dim.end());
    k.fields.insert(k.fields.end(), t->stride.begin(), t->stride.end());
  }
  k.fields.push_back(g.causal), k.fields.push_back(backward);
  return k;
}

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                     const Packed& p) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(p.dim).set_stride(p.stride));
}
void set_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, const Packed& p) {
  t->set_output(true).set_uid(uid).set_dim(p.dim).set_stride(p.stride);
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

void build(fe::graph::Graph& g, cudnnHandle_t h) {
  FE_CHECK(g.validate());
  FE_CHECK(g.build_operation_graph(h));
  FE_CHECK(g.create_execution_plans({fe::HeurMode_t::A}));
  FE_CHECK(g.check_support(h));
  FE_CHECK(g.build_plans(h));
}

float attn_scale(const Geometry& geo) { return 1.f / std::sqrt((float)geo.q.dim[3]); }

std::shared_ptr<fe::graph::Graph> forward_graph(const Geometry& geo, cudnnHandle_t h) {
  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, geo.q);
  auto K = tensor(*g, "K", kK, geo.k);
  auto V = tensor(*g, "V", kV, geo.v);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("attention")
                  .set_generate_stats(true)
                  .set_causal_mask(geo.causal)
                  .set_attn_scale(attn_scale(geo));
  auto [O, Stats] = g->sdpa(Q, K, V, opts);
  set_output(O, kO, geo.o);
  set_output(Stats, kStats, geo.stats);
  Stats->set_data_type(fe::DataType_t::FLOAT);
  build(*g, h);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Geometry& geo, cudnnHandle_t h, bool deterministic) {
  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, geo.q);
  auto K = tensor(*g, "K", kK, geo.k);
  auto V = tensor(*g, "V", kV, geo.v);
  auto O = tensor(*g, "O", kO, geo.o);
  auto dO = tensor(*g, "dO", kDO, geo.o);
  auto Stats = tensor(*g, "Stats", kStats, geo.stats);
  Stats->set_data_type(fe::DataType_t::FLOAT);
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("attention_backward")
                  .set_causal_mask(geo.causal)
                  .set_attn_scale(attn_scale(geo))
                  .set_deterministic_algorithm(deterministic);
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
  set_output(dQ, kDQ, geo.dq);
  set_output(dK, kDK, geo.dk);
  set_output(dV, kDV, geo.dv);
  build(*g, h);
  return g;
}

// Element offsets of the q, k and v heads in a packed row.
size_t k_offset(const AttentionShape& s) { return (size_t)s.H * s.hd; }
size_t v_offset(const AttentionShape& s) { return (size_t)(s.H + s.KVH) * s.hd; }
void* at(const void* p, size_t elems) { return (char*)p + 2 * elems; }  // bf16 elements

std::string describe(const AttentionShape& s, const AttentionPair* p, bool backward) {
  std::string d = std::string("cuDNN SDPA ") + (backward ? "backward" : "forward") + " [B " + std::to_string(s.B) +
                  " T " + std::to_string(s.T) + " H " + std::to_string(s.H) + " KVH " + std::to_string(s.KVH) +
                  " hd " + std::to_string(s.hd);
  if (p)
    d += std::string(", ring pair of ") + std::to_string(p->rows) + " rows" + (p->causal ? ", causal" : "") +
         " from query row " + std::to_string(p->q0) + " and key row " + std::to_string(p->k0);
  return d + "]";
}
}  // namespace

SdpaKey sdpa_key(const AttentionShape& s, bool backward) { return key_of(whole(s), backward); }
SdpaKey sdpa_key(const AttentionShape& s, const AttentionPair& p, bool backward) {
  return key_of(pair_geometry(s, p, backward), backward);
}

struct CudnnSdpa::Impl {
  bool deterministic = true;
  cudnnHandle_t handle = nullptr;
  std::map<SdpaKey, std::shared_ptr<fe::graph::Graph>> graphs;

  // Builds (once per geometry) and runs one graph on the stream.
  void run(cudaStream_t st, const Geometry& geo, bool backward, std::unordered_map<int64_t, void*>& ptrs,
           const SdpaWorkspace& ws, const std::string& what) {
    check_cudnn(cudnnSetStream(handle, st), ("cudnnSetStream: " + what).c_str());
    auto& g = graphs[key_of(geo, backward)];
    if (!g) g = backward ? backward_graph(geo, handle, deterministic) : forward_graph(geo, handle);
    int64_t bytes = 0;
    check_fe(g->get_workspace_size(bytes), (what + ": workspace size").c_str());
    check_fe(g->execute(handle, ptrs, bytes ? ws((size_t)bytes) : nullptr), what.c_str());
  }
};

CudnnSdpa::CudnnSdpa(bool deterministic) : impl_(new Impl) {
  impl_->deterministic = deterministic;
  check_cudnn(cudnnCreate(&impl_->handle), "cudnnCreate");
}

CudnnSdpa::~CudnnSdpa() {
  impl_->graphs.clear();
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

std::string CudnnSdpa::version() {
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         " (frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + ")";
}

void CudnnSdpa::forward(cudaStream_t s, void* out, float* lse, const void* qkv, const AttentionShape& sh,
                        const SdpaWorkspace& ws) {
  std::unordered_map<int64_t, void*> ptrs = {{kQ, const_cast<void*>(qkv)},
                                             {kK, at(qkv, k_offset(sh))},
                                             {kV, at(qkv, v_offset(sh))},
                                             {kO, out},
                                             {kStats, lse}};
  impl_->run(s, whole(sh), false, ptrs, ws, describe(sh, nullptr, false));
}

void CudnnSdpa::backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* lse, const AttentionShape& sh, const SdpaWorkspace& ws) {
  std::unordered_map<int64_t, void*> ptrs = {{kQ, const_cast<void*>(qkv)},
                                             {kK, at(qkv, k_offset(sh))},
                                             {kV, at(qkv, v_offset(sh))},
                                             {kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dqkv},
                                             {kDK, at(dqkv, k_offset(sh))},
                                             {kDV, at(dqkv, v_offset(sh))}};
  impl_->run(s, whole(sh), true, ptrs, ws, describe(sh, nullptr, true));
}

void CudnnSdpa::pair_forward(cudaStream_t s, void* out_blk, float* lse_blk, const void* qkv, const void* kv,
                             const AttentionShape& sh, const AttentionPair& p, const SdpaWorkspace& ws) {
  const size_t k_row = (size_t)p.k0 * p.kv_row;
  std::unordered_map<int64_t, void*> ptrs = {{kQ, at(qkv, (size_t)p.q0 * sh.row)},
                                             {kK, at(kv, k_row + p.k_off)},
                                             {kV, at(kv, k_row + p.v_off)},
                                             {kO, out_blk},
                                             {kStats, lse_blk}};
  impl_->run(s, pair_geometry(sh, p, false), false, ptrs, ws, describe(sh, &p, false));
}

void CudnnSdpa::pair_backward(cudaStream_t s, void* dqkv_blk, const void* dout, const void* qkv, const void* kv,
                              const void* out, const float* lse, const AttentionShape& sh, const AttentionPair& p,
                              const SdpaWorkspace& ws) {
  const size_t k_row = (size_t)p.k0 * p.kv_row, o_row = (size_t)p.q0 * sh.H * sh.hd;
  std::unordered_map<int64_t, void*> ptrs = {{kQ, at(qkv, (size_t)p.q0 * sh.row)},
                                             {kK, at(kv, k_row + p.k_off)},
                                             {kV, at(kv, k_row + p.v_off)},
                                             {kO, at(out, o_row)},
                                             {kDO, at(dout, o_row)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dqkv_blk},
                                             {kDK, at(dqkv_blk, k_offset(sh))},
                                             {kDV, at(dqkv_blk, v_offset(sh))}};
  impl_->run(s, pair_geometry(sh, p, true), true, ptrs, ws, describe(sh, &p, true));
}

}  // namespace trainer::cuda
