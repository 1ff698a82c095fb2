#include "engine/device_comms.h"

#include <cstdio>

#include "parallel/solo_communicator.h"
#include "parallel/staged_communicator.h"
#include "runtime/watchdog.h"

#ifdef TRAINER_WITH_CUDA
#include "parallel/nccl_communicator.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace trainer {

ProcessGrid::DataCommMaker data_comms_for(Backend& be, int ranks_on_node, bool say) {
#ifdef TRAINER_WITH_CUDA
  auto* gpu = dynamic_cast<CudaBackend*>(&be);
  if (!gpu) return {};
  const bool shared = cuda::choose_device(0, ranks_on_node, cuda::device_count()).shared;
  if (shared && say)
    std::printf("note: %d ranks share %d GPU(s) on this node: NCCL cannot be used, so data collectives go through "
                "MPI via pinned host memory (correct, not fast)\n", ranks_on_node, cuda::device_count());
  if (!shared) Watchdog::set_abort_hook(&NcclDataComm::abort_all);
  return [gpu, shared](ProcessGrid::Group g, MPI_Comm comm, ControlComm& control) -> std::unique_ptr<DataComm> {
    switch (gpu_data_comm(control.size(), g == ProcessGrid::of("pp"), shared)) {
      case GpuDataComm::Solo: return std::make_unique<SoloDataComm>(*gpu);
      case GpuDataComm::StagedMpi: return std::make_unique<StagedDataComm>(std::make_unique<MpiDataComm>(comm), *gpu);
      case GpuDataComm::Nccl: break;
    }
    return std::make_unique<NcclDataComm>(control, *gpu);
  };
#else
  (void)be, (void)ranks_on_node, (void)say;
  return {};
#endif
}

}  // namespace trainer
