#include "parallel/context_attention.h"

#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"

namespace trainer {

std::unique_ptr<ContextAttention> make_context_attention(CpComm kind, Backend& be, DataComm& comm,
                                                         const AttentionShape& s, DType compute, bool overlap) {
  if (kind == CpComm::A2a) return std::make_unique<UlyssesAttention>(be, comm, s, compute);
  return std::make_unique<RingAttention>(be, comm, s, compute, overlap);
}

}  // namespace trainer
