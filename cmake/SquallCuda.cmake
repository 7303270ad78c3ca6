# Decides whether the CUDA backend is built and finds what it links against.
# SQUALL_CUDA=AUTO builds it when a toolkit is found, ON requires one, OFF skips it.
# cuDNN and NCCL ship no CMake packages: they are looked up beside the toolkit.
set(SQUALL_HAVE_CUDA OFF)
if(SQUALL_CUDA STREQUAL "OFF")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(SQUALL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SQUALL_CUDA=ON but no CUDA compiler was found (set CUDACXX or CMAKE_CUDA_COMPILER)")
  endif()
  message(STATUS "squall: no CUDA toolkit found, building the CPU backend only")
  return()
endif()

# Default architectures: what the installed toolkit can target. CUDA 13 dropped
# sm_70 (V100); V100 sites build with CUDA 12, which keeps 70 in the list.
# Never "native": CI machines have no GPU.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE _nvcc_out ERROR_QUIET)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _ "${_nvcc_out}")
  set(_cuda_major "${CMAKE_MATCH_1}")
  if(_cuda_major AND _cuda_major LESS 13)
    set(CMAKE_CUDA_ARCHITECTURES 70 75 80 90)
  else()
    set(CMAKE_CUDA_ARCHITECTURES 75 80 90)
  endif()
endif()
enable_language(CUDA)
# CMake 3.25 knows no C++20 dialect for nvcc 13: device code is C++17.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

set(_cuda_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn HINTS ${_cuda_hints} ENV CUDNN_ROOT PATH_SUFFIXES lib lib64)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_cuda_hints} ENV NCCL_ROOT PATH_SUFFIXES lib lib64)

foreach(_v CUDNN_INCLUDE_DIR CUDNN_LIBRARY NCCL_INCLUDE_DIR NCCL_LIBRARY)
  if(NOT ${_v})
    if(SQUALL_CUDA STREQUAL "ON")
      message(FATAL_ERROR "SQUALL_CUDA=ON but ${_v} was not found (set CUDNN_ROOT / NCCL_ROOT)")
    endif()
    message(WARNING "squall: CUDA toolkit found but ${_v} is missing; building the CPU backend only")
    return()
  endif()
endforeach()

add_library(squall::cudnn UNKNOWN IMPORTED)
set_target_properties(squall::cudnn PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
add_library(squall::nccl UNKNOWN IMPORTED)
set_target_properties(squall::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
set(SQUALL_HAVE_CUDA ON)
message(STATUS "squall: CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
               "cuDNN ${CUDNN_LIBRARY}, NCCL ${NCCL_LIBRARY}")
