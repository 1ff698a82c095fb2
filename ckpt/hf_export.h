#pragma once
// A checkpoint as whole tensors, and its export with Hugging Face names
// (docs/ARCHITECTURE.md, "Checkpoints"). No MPI: `trainer ckpt` runs it.
#include <map>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace trainer {

struct GlobalTensor {
  std::vector<int> shape;
  std::vector<float> data;
};

// Every model tensor of the checkpoint assembled to its global shape
// (load_pieces checks each is complete and consistent). Throws CheckpointError.
std::map<std::string, GlobalTensor> assemble_checkpoint(const std::string& step_dir);

// One HDF5 file with Hugging Face names and layouts (GPT-2's Conv1D weights
// transposed, q|k|v fused as c_attn), in fp32 or rounded to bf16 (nearest
// even). Written to OUT.tmp and renamed when whole: a failed export (a full
// disk) leaves no file that looks like a model. Throws CheckpointError.
void export_hf(const std::map<std::string, GlobalTensor>& t, const std::string& out_path,
               DType dtype = DType::F32);

}  // namespace trainer
