# cuda-host plans: cuDNN's descriptors for every zoo model's convolutions, poolings and batch
# norms, made by the CUDA plans' device-free step (cuda/cudnn_describe.hpp) and checked against
# squall's shapes. Runs without a GPU or driver: only descriptor calls, never a cuDNN handle.
# With them, the extended batch norm plan's way back to the plain calls when cuDNN refuses
# (cuda/batch_norm_fallback.hpp), driven through fake cuDNN calls; and test_plans_traffic.cpp
# counts what a training step would enqueue on the CUDA backend.
add_executable(squall_cuda_host_plans_tests
               ${CMAKE_CURRENT_SOURCE_DIR}/test_plans_zoo.cpp
               ${CMAKE_CURRENT_SOURCE_DIR}/test_plans_refused.cpp
               ${CMAKE_CURRENT_SOURCE_DIR}/test_batch_norm_fallback.cpp
               ${CMAKE_CURRENT_SOURCE_DIR}/test_plans_traffic.cpp)
target_link_libraries(squall_cuda_host_plans_tests PRIVATE squall_test_support squall_cuda squall_cpu squall_nn)
# The tests read cuDNN's legacy descriptors back, as the plans set them (deprecated in cuDNN 9).
target_compile_options(squall_cuda_host_plans_tests PRIVATE -Wno-deprecated-declarations)
squall_add_catch_tests(squall_cuda_host_plans_tests cuda-host)
