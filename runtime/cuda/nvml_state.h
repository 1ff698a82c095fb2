#pragma once
// Every GPU of this node as the driver's NVML reports it (runtime/gpu_state.h).
#include "runtime/gpu_state.h"

namespace trainer::cuda {

// `product_device`: the CUDA device the health check's product ran on
// (marked ran_product; matched by PCI address, as NVML counts every GPU of
// the node and CUDA only the visible ones). NVML comes with the driver, not
// the toolkit: libnvidia-ml.so.1 is loaded at run time, so the binary
// still loads where there is none (`missing` then says why). A figure a
// GPU does not offer stays at its "not offered" value.
NodeGpus read_node_gpus(int product_device);

}  // namespace trainer::cuda
