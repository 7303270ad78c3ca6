#pragma once
// The CUDA backend: squall::nn::Backend (a Device and its Kernels) on one GPU (docs/design.md,
// "Backends").
//
// - A CudaStream is a cudaStream_t with its own cuDNN and cuBLAS handles and its own cuDNN
//   workspace, so that each learner (one stream each) runs its layers independently of the
//   others on the same device (Crossbow's learners on streams).
// - Memory comes from size-keyed caching pools (src/nn/size_pool.hpp, shared with the CPU
//   backend): freed blocks are kept by size and reused, so after the first step of training
//   no cudaMalloc or cudaFree runs.
// - Plans (cuda/plans.hpp) choose cuDNN algorithms once per shape, cached for the process.
// - Kernels of our own are in cuda/kernels.cuh; every one takes the stream it runs on.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/nn/backend.hpp"

namespace squall::cuda {

using namespace squall::nn;

// A learner's stream: the CUDA stream, the library handles bound to it, and a workspace
// that grows (stream-ordered, first step only) to the largest size a plan asks for.
class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t stream() const { return m_stream; }
  void* native_handle() const override { return m_stream; }
  // The library handles are made on first use (a stream that only copies, such as a
  // one-off stream for initial values, never pays for them) and bound to this stream.
  cudnnHandle_t cudnn();
  cublasHandle_t cublas();
  int device() const { return m_device; }
  // At least `bytes` of device scratch, valid for work enqueued on this stream until the
  // next call; growing it waits for the stream's earlier work first. A workspace never
  // grows while the stream is being captured (nn::CaptureError), and a block a captured
  // graph points into stays allocated as long as the graph (held_blocks()).
  void* workspace(size_t bytes);
  // A second such block, for a plan that needs scratch of its own around a library call
  // that uses the workspace (the f32 copies of bf16 batch norm, cuda/batch_norm.cpp).
  void* scratch(size_t bytes);
  // The workspace, scratch and cuBLAS workspace blocks as they are now, for a graph captured
  // on this stream to own alongside it: a later growth replaces the stream's block, never frees it under
  // the graph.
  std::vector<std::shared_ptr<void>> held_blocks() const;
  bool capturing() const;

 private:
  struct Growing {
    std::shared_ptr<void> block;  // cudaFree'd when neither the stream nor a graph holds it
    size_t bytes = 0;
  };
  void* grow(Growing& g, size_t bytes, const char* what);

  int m_device;
  cudaStream_t m_stream = nullptr;
  cudnnHandle_t m_cudnn = nullptr;
  cublasHandle_t m_cublas = nullptr;
  Growing m_workspace, m_scratch;
  std::shared_ptr<void> m_cublas_workspace;  // set on the cuBLAS handle (cublasSetWorkspace)
};

inline CudaStream& cuda_stream(Stream& s) { return static_cast<CudaStream&>(s); }
inline cudaStream_t raw(Stream& s) { return static_cast<CudaStream&>(s).stream(); }

class CudaEvent final : public Event {
 public:
  CudaEvent();
  ~CudaEvent() override;
  cudaEvent_t event() const { return m_event; }

 private:
  cudaEvent_t m_event = nullptr;
};

// The factory is squall::cuda::make_backend (cuda/cuda_factory.hpp, no CUDA header in it), which
// src/backends calls.

}  // namespace squall::cuda
