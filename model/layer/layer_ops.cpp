#include "model/layer/layer_ops.h"

namespace trainer {

void LayerOps::row_parallel(Ref out, CRef resid, CRef in, int K, size_t w, size_t b, bool has_bias) const {
  const int M = (int)shape.M, R = (int)shape.R, d = (int)shape.d;
  const size_t rows_d = (size_t)R * d;
  if (tp.size() == 1) {
    be->copy(out, resid, rows_d);
    be->matmul(false, true, M, d, K, 1.f, in, W(w), 1.f, out);
  } else {
    be->matmul(false, true, M, d, K, 1.f, in, W(w), 0.f, part);
    if (sequence_parallel()) {
      tp.comm->reduce_scatter_sum(part, rows_tmp, rows_d);
      be->add(out, resid, rows_tmp, rows_d);
    } else {
      tp.comm->allreduce_sum(part, rows_d);
      be->add(out, resid, part, rows_d);
    }
  }
  if (has_bias) be->add_bias(out, W(b), R, d);
}

CRef LayerOps::grad_rows_to_full(CRef g) const {
  if (!sequence_parallel()) return g;
  tp.comm->allgather(g, g_full, shape.R * shape.d);
  return g_full;
}

CRef LayerOps::reduce_input_grad(Ref g_partial) const {
  if (tp.size() == 1) return g_partial;
  if (sequence_parallel()) {
    tp.comm->reduce_scatter_sum(g_partial, g_rows, shape.R * shape.d);
    return g_rows;
  }
  tp.comm->allreduce_sum(g_partial, shape.M * shape.d);
  return g_partial;
}

}  // namespace trainer
