#pragma once
// Small helpers shared by the cuDNN and cuBLAS plans (cuda/conv.cpp, pool.cpp,
// batch_norm.cpp, linear.cpp): owning wrappers of cuDNN descriptors and of the little device
// memory a plan keeps, and the narrowing of squall's int64 sizes to the ints the libraries
// take. Internal to cuda/.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/check.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::detail {

// A size as the int cuDNN and cuBLAS take; a value that does not fit is the user's model
// being too large for these calls, so it is reported, not asserted.
inline int to_int(int64_t v, const char* what) {
  if (v < INT_MIN || v > INT_MAX)
    throw Error(std::string(what) + ": " + std::to_string(v) + " does not fit the 32-bit sizes of cuDNN/cuBLAS");
  return static_cast<int>(v);
}

// alpha and beta of the f32 calls (cuDNN and cuBLAS read them from host memory).
inline const float kOne = 1.0f;
inline const float kZero = 0.0f;

// Owning cuDNN descriptors: created empty, set once by the plan, destroyed with it.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { SQUALL_CUDNN_CHECK(Create(&m_desc)); }
  ~Descriptor() {
    if (m_desc != nullptr) (void)Destroy(m_desc);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return m_desc; }
  operator T() const { return m_desc; }  // NOLINT: passed straight to cuDNN calls

 private:
  T m_desc = nullptr;
};

using TensorDescriptor =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                         cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor =
    Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

// A packed NCHW f32 tensor descriptor.
inline void set_nchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w, const char* what) {
  SQUALL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(n, what),
                                                to_int(c, what), to_int(h, what), to_int(w, what)));
}

// Device memory a plan owns for its lifetime (made at plan creation, never per step).
class DeviceFloats {
 public:
  DeviceFloats() = default;
  explicit DeviceFloats(size_t count) : m_count(count) {
    if (count > 0) SQUALL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m_data), count * sizeof(float)));
  }
  ~DeviceFloats() {
    // No check: at process exit the runtime may already be unloading; nothing to do then.
    if (m_data != nullptr) (void)cudaFree(m_data);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  DeviceFloats(DeviceFloats&& o) noexcept : m_data(o.m_data), m_count(o.m_count) {
    o.m_data = nullptr;
    o.m_count = 0;
  }
  DeviceFloats& operator=(DeviceFloats&& o) noexcept {
    if (this != &o) {
      if (m_data != nullptr) (void)cudaFree(m_data);
      m_data = o.m_data;
      m_count = o.m_count;
      o.m_data = nullptr;
      o.m_count = 0;
    }
    return *this;
  }
  float* data() const { return m_data; }
  size_t count() const { return m_count; }

 private:
  float* m_data = nullptr;
  size_t m_count = 0;
};

// The convolution algorithms chosen so far in this process, one line per (problem,
// direction, device): algorithm, how it was chosen, cuDNN's time, workspace, determinism.
// For logs and debugging (cuda/conv.cpp).
std::vector<std::string> conv_algorithm_choices();

}  // namespace squall::cuda::detail
