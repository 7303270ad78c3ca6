#pragma once
// Tensors are non-owning views: a pointer into memory the backend owns (host memory on the
// CPU backend, device memory on CUDA) and a shape. Storage is allocated once per model
// and batch size (parameters in one flat arena, activations in a plan), never per step.
// Shapes are written [n, c, h, w]; a model's 4-D activations are stored NCHW, or NHWC when
// it asks for channels last (Layout below; docs/design.md, "Layout"); a 2-D tensor is (N, F).
// Parameters and their gradients are always f32; activations are f32, or bf16/f16 under
// mixed precision (docs/design.md, "Precision").
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/core/dtype.hpp"

namespace squall::nn {

// Element types of backend memory (src/core/dtype.hpp): f32 for parameters, gradients,
// optimizer state and fp32 activations; bf16/f16 for the activations of a mixed-precision
// model; i32 for labels and predictions.
using DType = squall::DType;
using squall::dtype_name;
using squall::dtype_size;

// Memory order of 4-D activations (docs/design.md, "Layout"): NCHW; NHWC, in which
// tensor-core convolutions read their operands directly; or channel-blocked, nChw8c and
// nChw16c ([n][c / B][h][w][B], B channels of a pixel side by side), in which oneDNN's AVX2
// and AVX-512 convolutions compute. The shape is [n, c, h, w] in all; parameters keep their
// own layouts (convolution weights [k, c, r, s]) whatever this is. `blocked` is a request
// to a graph, not a memory order: the graph resolves it per tensor into the block its backend
// computes in, where the channel count is a multiple of the block, and NCHW elsewhere, so
// that a blocked tensor has exactly as many elements as its shape (no padded channels).
enum class Layout : uint8_t { nchw, nhwc, blocked, nchw8c, nchw16c };
const char* layout_name(Layout l);  // "nchw" | "nhwc" | "blocked" | "nchw8c" | "nchw16c"
// Channels per block of a channel-blocked layout (8 or 16); 0 for the others.
int64_t channel_block(Layout l);
// The blocked layout of `block` channels (8 or 16); throws for another count.
Layout blocked_layout(int64_t block);

struct Shape {
  std::array<int64_t, 4> dims{0, 0, 0, 0};
  int rank = 0;

  Shape() = default;
  Shape(int64_t n) : dims{n, 0, 0, 0}, rank(1) {}
  Shape(int64_t n, int64_t c) : dims{n, c, 0, 0}, rank(2) {}
  Shape(int64_t n, int64_t c, int64_t h, int64_t w) : dims{n, c, h, w}, rank(4) {}

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t n() const { return dims[0]; }
  int64_t c() const { return rank > 1 ? dims[1] : 1; }
  int64_t h() const { return rank > 2 ? dims[2] : 1; }
  int64_t w() const { return rank > 3 ? dims[3] : 1; }
  int64_t numel() const {
    int64_t p = rank > 0 ? 1 : 0;
    for (int i = 0; i < rank; ++i) p *= dims[static_cast<size_t>(i)];
    return p;
  }
  int64_t per_sample() const { return rank > 0 && dims[0] > 0 ? numel() / dims[0] : 0; }
  Shape with_batch(int64_t n) const { Shape s = *this; s.dims[0] = n; return s; }
  bool operator==(const Shape& o) const { return rank == o.rank && dims == o.dims; }
  std::string str() const;  // "[64,1,28,28]"
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // The f32 view, for tensors that are f32 by contract (parameters, gradients, state).
  float* f32() const { return static_cast<float*>(data); }
};

}  // namespace squall::nn
