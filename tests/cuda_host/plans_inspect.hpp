#pragma once
// Reading cuDNN's descriptors back (host calls, no device), so that the plans tests compare
// what cuDNN holds and computes with squall's shapes, not with what the description step
// believes it set.
#include <cudnn.h>

#include <string>

#include "src/nn/tensor.hpp"

namespace squall::test {

struct CudnnDims {
  int n = 0, c = 0, h = 0, w = 0;
  bool equals(const nn::Shape& s) const { return n == s.n() && c == s.c() && h == s.h() && w == s.w(); }
  std::string str() const {
    std::string s = "[";  // appended piece by piece: GCC 12 warns falsely on "[" + to_string(...)
    for (const int v : {n, c, h, w}) s += std::to_string(v) + ",";
    s.back() = ']';
    return s;
  }
};

struct CudnnTensor {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  cudnnDataType_t type{};
  CudnnDims dims, strides;
  // Packed [n, c, h, w] in the memory order of `layout`.
  bool packed(nn::Layout layout) const {
    const CudnnDims& d = dims;
    const CudnnDims& s = strides;
    if (layout == nn::Layout::nhwc) return s.c == 1 && s.w == d.c && s.h == d.w * d.c && s.n == d.h * d.w * d.c;
    return s.w == 1 && s.h == d.w && s.c == d.h * d.w && s.n == d.c * d.h * d.w;
  }
};

inline CudnnTensor read_tensor(cudnnTensorDescriptor_t t) {
  CudnnTensor r;
  r.status = cudnnGetTensor4dDescriptor(t, &r.type, &r.dims.n, &r.dims.c, &r.dims.h, &r.dims.w, &r.strides.n,
                                        &r.strides.c, &r.strides.h, &r.strides.w);
  return r;
}

struct CudnnFilter {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  cudnnDataType_t type{};
  cudnnTensorFormat_t format{};
  CudnnDims dims;
};

inline CudnnFilter read_filter(cudnnFilterDescriptor_t f) {
  CudnnFilter r;
  r.status = cudnnGetFilter4dDescriptor(f, &r.type, &r.format, &r.dims.n, &r.dims.c, &r.dims.h, &r.dims.w);
  return r;
}

struct CudnnConv {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  int pad_h = 0, pad_w = 0, stride_h = 0, stride_w = 0, dil_h = 0, dil_w = 0;
  cudnnConvolutionMode_t mode{};
  cudnnDataType_t compute{};
  cudnnMathType_t math{};
};

inline CudnnConv read_conv(cudnnConvolutionDescriptor_t c) {
  CudnnConv r;
  r.status = cudnnGetConvolution2dDescriptor(c, &r.pad_h, &r.pad_w, &r.stride_h, &r.stride_w, &r.dil_h, &r.dil_w,
                                             &r.mode, &r.compute);
  if (r.status == CUDNN_STATUS_SUCCESS) r.status = cudnnGetConvolutionMathType(c, &r.math);
  return r;
}

struct CudnnPool {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  cudnnPoolingMode_t mode{};
  cudnnNanPropagation_t nan{};
  int r = 0, s = 0, pad_h = 0, pad_w = 0, stride_h = 0, stride_w = 0;
};

inline CudnnPool read_pool(cudnnPoolingDescriptor_t p) {
  CudnnPool r;
  r.status = cudnnGetPooling2dDescriptor(p, &r.mode, &r.nan, &r.r, &r.s, &r.pad_h, &r.pad_w, &r.stride_h, &r.stride_w);
  return r;
}

// The cuDNN data type squall's activations of type t are stored as.
inline cudnnDataType_t cudnn_type_of(nn::DType t) {
  switch (t) {
    case nn::DType::bf16: return CUDNN_DATA_BFLOAT16;
    case nn::DType::f16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

}  // namespace squall::test
