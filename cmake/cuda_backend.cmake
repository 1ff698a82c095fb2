# The CUDA backend, compiled into trainer_core when cmake/cuda_detect.cmake
# found everything it needs. .cu files are C++17 (CMake 3.25 has no CUDA20
# dialect for nvcc); the .cpp files stay C++20.
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set_target_properties(trainer_core PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # else a target with .cu files links both cudart builds
find_package(CUDAToolkit REQUIRED)

target_sources(trainer_core PRIVATE
  runtime/cuda/cuda_check.cpp
  runtime/cuda/cuda_device.cpp
  runtime/cuda/caching_allocator.cpp
  runtime/cuda/cublaslt_gemm.cpp
  runtime/cuda/cudnn_sdpa.cpp
  runtime/cuda/cuda_backend.cpp
  runtime/cuda/nvml_state.cpp
  runtime/cuda/kernels_elementwise.cu
  runtime/cuda/kernels_reduce.cu
  runtime/cuda/kernels_embedding.cu
  runtime/cuda/kernels_attention.cu
  runtime/cuda/kernels_ring_attention.cu
  parallel/nccl_communicator.cpp
)
# The cuDNN frontend is header-only and heavy: only cudnn_sdpa.cpp sees it
# (it also bundles its own nlohmann json, which no file may mix with Debian's).
set_source_files_properties(runtime/cuda/cudnn_sdpa.cpp PROPERTIES INCLUDE_DIRECTORIES ${CUDNN_FRONTEND_INCLUDE_DIR}
  COMPILE_OPTIONS -Wno-unused-function)
# nvml.h only: the library is the driver's, loaded at run time (dlopen).
set_source_files_properties(runtime/cuda/nvml_state.cpp PROPERTIES INCLUDE_DIRECTORIES ${NVML_INCLUDE_DIR})
target_compile_definitions(trainer_core PUBLIC TRAINER_WITH_CUDA=1)
target_include_directories(trainer_core PUBLIC ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
# -Wall -Wextra are host-compiler flags: pass them through nvcc for .cu files.
target_compile_options(trainer_core PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)
# No driver library (CUDA::cuda_driver / -lcuda): it would bind the stub on
# machines without a GPU, and the binary would not load there. nvrtc by path:
# CMake 3.25's CUDA::nvrtc drags the driver stub in.
target_link_libraries(trainer_core PUBLIC CUDA::cudart CUDA::cublasLt ${CUDNN_LIBRARY} ${NVRTC_LIBRARY}
  ${NCCL_LIBRARY} ${CMAKE_DL_LIBS})
