#pragma once
// The CUDA CPU tier stands in for the toolkit header of this name.
#include "tests/cuda_cpu/cuda_emu.h"
