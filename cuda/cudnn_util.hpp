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
#include "src/nn/tensor.hpp"

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

// The cuDNN data type of an activation type (f32, bf16, f16).
inline cudnnDataType_t cudnn_type(nn::DType t, const char* what) {
  switch (t) {
    case nn::DType::f32: return CUDNN_DATA_FLOAT;
    case nn::DType::bf16: return CUDNN_DATA_BFLOAT16;
    case nn::DType::f16: return CUDNN_DATA_HALF;
    default: break;
  }
  throw Error(std::string(what) + ": activations of type " + nn::dtype_name(t) + " are not supported");
}

// The dtype code of the kernels (cuda/kernels.cuh): 0 f32, 1 bf16, 2 f16.
inline int kernel_type(nn::DType t) { return static_cast<int>(t); }

// A packed 4-D tensor descriptor [n, c, h, w] of type t (f32 unless said) in memory order
// `layout` (NCHW unless said).
inline void set_nchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w, const char* what,
                     nn::DType t = nn::DType::f32, nn::Layout layout = nn::Layout::nchw) {
  const cudnnTensorFormat_t format = layout == nn::Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  SQUALL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, format, cudnn_type(t, what), to_int(n, what), to_int(c, what),
                                                to_int(h, what), to_int(w, what)));
}

// Device memory a plan owns for its lifetime (made at plan creation, never per step):
// `count` elements of T (float; uint16_t for bf16/f16 copies, which only cuDNN, cuBLAS and
// the kernels read).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : m_count(count) {
    if (count > 0) SQUALL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m_data), count * sizeof(T)));
  }
  ~DeviceArray() {
    // No check: at process exit the runtime may already be unloading; nothing to do then.
    if (m_data != nullptr) (void)cudaFree(m_data);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : m_data(o.m_data), m_count(o.m_count) {
    o.m_data = nullptr;
    o.m_count = 0;
  }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      if (m_data != nullptr) (void)cudaFree(m_data);
      m_data = o.m_data;
      m_count = o.m_count;
      o.m_data = nullptr;
      o.m_count = 0;
    }
    return *this;
  }
  T* data() const { return m_data; }
  size_t count() const { return m_count; }

 private:
  T* m_data = nullptr;
  size_t m_count = 0;
};
using DeviceFloats = DeviceArray<float>;
using DeviceHalves = DeviceArray<uint16_t>;  // bf16 or f16
using DeviceBytes = DeviceArray<unsigned char>;  // elements of a type chosen at run time

// The convolution algorithms chosen so far in this process, one line per (problem,
// direction, device): algorithm, how it was chosen, cuDNN's time, workspace, determinism.
// For logs and debugging (cuda/conv.cpp).
std::vector<std::string> conv_algorithm_choices();

}  // namespace squall::cuda::detail
