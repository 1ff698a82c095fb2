// The only translation unit that includes the cuDNN frontend (it costs over a
// minute and ~2 GB to compile). Graphs follow the frontend's SDPA samples:
// bf16 input/output, fp32 intermediates and compute, causal mask aligned top
// left, softmax stats generated in forward and consumed in backward.
#include "runtime/cuda/cudnn_sdpa.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

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

// Dims and strides of one packed head group inside [B*T, row] rows.
struct Packed {
  std::vector<int64_t> dim, stride;
};
Packed packed(const AttentionShape& s, int heads) {
  return {{s.B, heads, s.T, s.hd}, {(int64_t)s.T * s.row, s.hd, s.row, 1}};
}
Packed dense(const AttentionShape& s) {  // [B*T, H*hd] rows
  return {{s.B, s.H, s.T, s.hd}, {(int64_t)s.T * s.H * s.hd, s.hd, (int64_t)s.H * s.hd, 1}};
}
std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                     const Packed& p) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(p.dim).set_stride(p.stride));
}
void set_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, const Packed& p) {
  t->set_output(true).set_uid(uid).set_dim(p.dim).set_stride(p.stride);
}
Packed stats_layout(const AttentionShape& s) {
  return {{s.B, s.H, s.T, 1}, {(int64_t)s.H * s.T, s.T, 1, 1}};
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

std::shared_ptr<fe::graph::Graph> forward_graph(const AttentionShape& s, cudnnHandle_t h) {
  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, packed(s, s.H));
  auto K = tensor(*g, "K", kK, packed(s, s.KVH));
  auto V = tensor(*g, "V", kV, packed(s, s.KVH));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("attention")
                  .set_generate_stats(true)
                  .set_causal_mask(true)
                  .set_attn_scale(1.f / std::sqrt((float)s.hd));
  auto [O, Stats] = g->sdpa(Q, K, V, opts);
  set_output(O, kO, dense(s));
  set_output(Stats, kStats, stats_layout(s));
  Stats->set_data_type(fe::DataType_t::FLOAT);
  build(*g, h);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const AttentionShape& s, cudnnHandle_t h, bool deterministic) {
  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, packed(s, s.H));
  auto K = tensor(*g, "K", kK, packed(s, s.KVH));
  auto V = tensor(*g, "V", kV, packed(s, s.KVH));
  auto O = tensor(*g, "O", kO, dense(s));
  auto dO = tensor(*g, "dO", kDO, dense(s));
  auto Stats = tensor(*g, "Stats", kStats, stats_layout(s));
  Stats->set_data_type(fe::DataType_t::FLOAT);
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("attention_backward")
                  .set_causal_mask(true)
                  .set_attn_scale(1.f / std::sqrt((float)s.hd))
                  .set_deterministic_algorithm(deterministic);
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
  set_output(dQ, kDQ, packed(s, s.H));
  set_output(dK, kDK, packed(s, s.KVH));
  set_output(dV, kDV, packed(s, s.KVH));
  build(*g, h);
  return g;
}

// Element offsets of the q, k and v heads in a packed row.
size_t k_offset(const AttentionShape& s) { return (size_t)s.H * s.hd; }
size_t v_offset(const AttentionShape& s) { return (size_t)(s.H + s.KVH) * s.hd; }
void* at(const void* p, size_t elems) { return (char*)p + 2 * elems; }  // bf16 elements

std::string describe(const AttentionShape& s, bool backward) {
  return std::string("cuDNN SDPA ") + (backward ? "backward" : "forward") + " [B " + std::to_string(s.B) + " T " +
         std::to_string(s.T) + " H " + std::to_string(s.H) + " KVH " + std::to_string(s.KVH) + " hd " +
         std::to_string(s.hd) + "]";
}

void run(fe::graph::Graph& g, cudnnHandle_t h, std::unordered_map<int64_t, void*>& ptrs, const SdpaWorkspace& ws,
         const AttentionShape& s, bool backward) {
  int64_t bytes = 0;
  check_fe(g.get_workspace_size(bytes), (describe(s, backward) + ": workspace size").c_str());
  check_fe(g.execute(h, ptrs, bytes ? ws((size_t)bytes) : nullptr), describe(s, backward).c_str());
}
}  // namespace

bool SdpaKey::operator<(const SdpaKey& o) const {
  return std::tie(B, T, H, KVH, hd, row, backward) < std::tie(o.B, o.T, o.H, o.KVH, o.hd, o.row, o.backward);
}
SdpaKey sdpa_key(const AttentionShape& s, bool backward) { return {s.B, s.T, s.H, s.KVH, s.hd, s.row, backward}; }

struct CudnnSdpa::Impl {
  bool deterministic = true;
  cudnnHandle_t handle = nullptr;
  std::map<SdpaKey, std::shared_ptr<fe::graph::Graph>> graphs;
  fe::graph::Graph& graph(const AttentionShape& s, bool backward) {
    auto& g = graphs[sdpa_key(s, backward)];
    if (!g) g = backward ? backward_graph(s, handle, deterministic) : forward_graph(s, handle);
    return *g;
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
  check_cudnn(cudnnSetStream(impl_->handle, s), "cudnnSetStream (attention forward)");
  std::unordered_map<int64_t, void*> ptrs = {{kQ, const_cast<void*>(qkv)},
                                             {kK, at(qkv, k_offset(sh))},
                                             {kV, at(qkv, v_offset(sh))},
                                             {kO, out},
                                             {kStats, lse}};
  run(impl_->graph(sh, false), impl_->handle, ptrs, ws, sh, false);
}

void CudnnSdpa::backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* lse, const AttentionShape& sh, const SdpaWorkspace& ws) {
  check_cudnn(cudnnSetStream(impl_->handle, s), "cudnnSetStream (attention backward)");
  std::unordered_map<int64_t, void*> ptrs = {{kQ, const_cast<void*>(qkv)},
                                             {kK, at(qkv, k_offset(sh))},
                                             {kV, at(qkv, v_offset(sh))},
                                             {kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dqkv},
                                             {kDK, at(dqkv, k_offset(sh))},
                                             {kDV, at(dqkv, v_offset(sh))}};
  run(impl_->graph(sh, true), impl_->handle, ptrs, ws, sh, true);
}

}  // namespace trainer::cuda
