# Decides before project() whether the CUDA backend is built.
#   TRAINER_CUDA=AUTO  build it when nvcc, cuBLASLt, cuDNN, NCCL and the cuDNN
#                      frontend headers (scripts/setup.sh fetches them) are all
#                      found; otherwise say what is missing and build CPU only.
#   TRAINER_CUDA=ON    the same, but anything missing stops the configure.
#   TRAINER_CUDA=OFF   CPU only.
# Sets TRAINER_WITH_CUDA. Runs before project() because CMake fixes
# CMAKE_CUDA_ARCHITECTURES when the CUDA language is enabled, and "native"
# fails on machines without a GPU (the development and CI machines).
set(TRAINER_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE TRAINER_CUDA PROPERTY STRINGS AUTO ON OFF)
set(CUDNN_FRONTEND_INCLUDE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/third_party/cudnn_frontend/include
    CACHE PATH "cuDNN C++ frontend headers (scripts/setup.sh fetches them)")
# NVML's header (trainer health's GPU figures): the pinned one
# scripts/setup.sh fetches (third_party/nvml), whatever the toolkit has: the
# code names functions and bits older headers lack (it loads them at run
# time, and goes without those the driver lacks).
# A100 (sm_80) and Hopper (sm_90: H100, H200).
set(TRAINER_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures the CUDA backend is compiled for")

set(TRAINER_WITH_CUDA OFF)
if(NOT TRAINER_CUDA STREQUAL "OFF")
  set(_missing "")
  find_program(TRAINER_NVCC nvcc PATHS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
  if(NOT TRAINER_NVCC)
    list(APPEND _missing "nvcc (the CUDA toolkit)")
  else()
    get_filename_component(_cuda_root "${TRAINER_NVCC}/../.." ABSOLUTE)
    # NAMES_PER_DIR: a CUDNN_ROOT / NCCL_ROOT the user points at wins over
    # the copy in the toolkit; pip wheels ship only versioned names.
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ENV CUDNN_ROOT PATHS ${_cuda_root}/include PATH_SUFFIXES include)
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ENV CUDNN_ROOT
                 PATHS ${_cuda_root}/lib64 ${_cuda_root}/lib PATH_SUFFIXES lib lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_ROOT PATHS ${_cuda_root}/include PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ENV NCCL_ROOT
                 PATHS ${_cuda_root}/lib64 ${_cuda_root}/lib PATH_SUFFIXES lib lib64)
    find_path(NVML_INCLUDE_DIR nvml.h PATHS ${CMAKE_CURRENT_SOURCE_DIR}/third_party/nvml/include NO_DEFAULT_PATH)
    find_library(NVRTC_LIBRARY NAMES nvrtc libnvrtc.so.13 NAMES_PER_DIR PATHS ${_cuda_root}/lib64 ${_cuda_root}/lib)
    foreach(_v CUDNN_INCLUDE_DIR CUDNN_LIBRARY NCCL_INCLUDE_DIR NCCL_LIBRARY NVRTC_LIBRARY)
      if(NOT ${_v})
        list(APPEND _missing ${_v})
      endif()
    endforeach()
    if(NOT NVML_INCLUDE_DIR)
      list(APPEND _missing "nvml.h (run scripts/setup.sh)")
    endif()
    if(NOT EXISTS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h)
      list(APPEND _missing "the cuDNN frontend headers (run scripts/setup.sh)")
    endif()
  endif()
  if(_missing)
    if(TRAINER_CUDA STREQUAL "ON")
      message(FATAL_ERROR "TRAINER_CUDA=ON but not found: ${_missing}")
    endif()
    message(STATUS "CUDA backend: not built (missing: ${_missing})")
  else()
    set(TRAINER_WITH_CUDA ON)
    set(CMAKE_CUDA_COMPILER ${TRAINER_NVCC})
    set(CMAKE_CUDA_ARCHITECTURES ${TRAINER_CUDA_ARCHITECTURES})
    message(STATUS "CUDA backend: built for sm ${TRAINER_CUDA_ARCHITECTURES} (${TRAINER_NVCC})")
  endif()
endif()
