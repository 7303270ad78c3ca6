# cuda-host:kernels — squall's own CUDA kernels (cuda/*_ops.cuh) run on the host through the
# grid emulator (cuda/host_grid.cuh) with the device's launch shapes, and compared with the
# CPU backend, the reference: bit for bit where the kernels are exact, within a stated
# tolerance where a sum's order differs. No GPU, driver or CUDA runtime call is needed.
# kernels_emulated.cu is compiled by nvcc (the kernel bodies are __host__ __device__); the
# Catch2 cases are plain C++ and see only tests/cuda_host/kernels_emulated.hpp.
add_executable(squall_cuda_host_kernel_tests
  ${CMAKE_CURRENT_SOURCE_DIR}/kernels_emulated.cu
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_elementwise.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_vector.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_reductions.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_resample.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_optim.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_batch_norm_group.cpp)
target_link_libraries(squall_cuda_host_kernel_tests PRIVATE squall_test_support squall_cpu squall_nn squall_base)
target_include_directories(squall_cuda_host_kernel_tests PRIVATE ${PROJECT_SOURCE_DIR})
# The library's kernel flags (cuda/CMakeLists.txt), and for the host side of the .cu no
# contraction of a * b + c into a fused multiply-add (what the CPU reference computes; the
# default x86-64 target has no FMA, this makes it explicit for any host).
target_compile_options(squall_cuda_host_kernel_tests PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false --expt-relaxed-constexpr -Xcompiler=-ffp-contract=off>)
squall_add_catch_tests(squall_cuda_host_kernel_tests cuda-host)
# bench/cuda_coverage.sh: the kernel bodies' host copies instrumented too (they are compiled
# into this test, not into squall_cuda).
if(SQUALL_CUDA_COVERAGE)
  target_compile_options(squall_cuda_host_kernel_tests PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=--coverage -Xcompiler=-O0>)
  target_link_options(squall_cuda_host_kernel_tests PRIVATE --coverage)
endif()
