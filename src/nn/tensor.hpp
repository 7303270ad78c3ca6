#pragma once
// Tensors are non-owning views: a pointer into memory the backend owns (host memory on the
// CPU backend, device memory on CUDA) and a shape. Storage is allocated once per model
// and batch size (parameters in one flat arena, activations in a plan), never per step.
// Layout is NCHW, float32; a 2-D tensor is (N, F).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace squall::nn {

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
  float* data = nullptr;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * sizeof(float); }
};

}  // namespace squall::nn
