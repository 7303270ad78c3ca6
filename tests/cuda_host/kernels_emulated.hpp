#pragma once
// squall's CUDA kernels run on the host by the grid emulator (cuda/host_grid.cuh): the
// calls of cuda/kernels.cuh without the stream, on host memory, with plain C++ types so
// that the Catch2 files need no CUDA header. kernels_emulated.cu implements them with the
// same launch sequences (the *_on functions of cuda/*_ops.cuh) that the library runs on a
// device. dtype codes: 0 f32, 1 bf16, 2 f16 (nn::DType's order).
#include <cstddef>
#include <cstdint>

#include "src/nn/kernels.hpp"
#include <memory>
#include <vector>

namespace squall::test::emulated {

// The emulator's block_sum over one double per thread (a multiple of 32 threads): what the
// reductions' thread 0 gets on the device.
double block_sum(const std::vector<double>& per_thread);

// Batch norm over a split sample's group as the CUDA plan computes it (its kernels and its
// host halves, cuda/batch_norm_group_host.hpp), for a group of one: params holds the plan's
// 7 c floats, count the values per channel that forward found.
void bn_group_forward(int t, bool nhwc, bool relu, const void* x, void* y, const float* gamma, const float* beta,
                      float eps, float momentum, float* running_mean, float* running_var, float* params, double* count,
                      int64_t n, int64_t c, int64_t hw);
void bn_group_backward(int t, bool nhwc, bool relu, const void* x, const void* dy, void* dx, const float* gamma,
                       float* params, double count, float* dgamma, float* dbeta, int64_t n, int64_t c, int64_t hw);

void fill(float* x, size_t n, float value);
void relu_forward(int t, const void* x, void* y, size_t n);
void relu_backward(int t, const void* y, const void* dy, void* dx, size_t n);
void add(int t, const void* a, const void* b, void* y, size_t n);
void multiply(int t, const void* a, const void* b, void* y, size_t n);
void axpy(float alpha, const float* x, float* y, size_t n);
void scale(float alpha, float* x, size_t n);
void axpby(float alpha, const float* x, float beta, float* y, size_t n);
void dropout_forward(int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed, uint64_t offset);
void copy_strided(size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                  int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count);
void copy_block(int t, void* dst, const void* src, const squall::nn::BlockCopy& block, bool accumulate);
void convert(const void* src, int from, void* dst, int to, size_t n);
void permute_convert(const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc, int64_t n,
                     int64_t c, int64_t h, int64_t w);
void permute_bits(size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc, int64_t n, int64_t c,
                  int64_t h, int64_t w);
// add and permute_convert (not an identity case) with 64-bit indices whatever the size: the
// path of tensors of 2^31 elements and more, checked on small ones.
void add_wide_index(int t, const void* a, const void* b, void* y, size_t n);
void permute_convert_wide_index(const void* src, int from, void* dst, int to, bool to_nhwc, int64_t n, int64_t c,
                                int64_t h, int64_t w);
// Whether permute_convert and permute_bits of this shape and these pointers take the 16-byte
// tile path (else the one-element one); the same decision the launch makes.
bool permute_tiles(size_t from_bytes, size_t to_bytes, const void* src, const void* dst, int64_t c, int64_t hw);

void bias_add(int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw);
size_t bias_grad_scratch_floats(int64_t n, int64_t c, int64_t hw);
// Whether bias_grad's first pass takes channels in groups of one 16-byte access.
bool bias_grad_by_groups(int t, bool nhwc, const void* dy, int64_t c);
int64_t bias_grad_parts(int64_t n, int64_t c, int64_t hw);
void bias_grad(int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw, bool round_to_type,
               float* scratch);

void global_avg_pool_forward(int t, const void* x, void* y, int64_t nc, int64_t hw);
void global_avg_pool_backward(int t, const void* dy, void* dx, int64_t nc, int64_t hw);
void bilinear_forward(int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow);
void bilinear_backward(int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow);
// Whether bilinear_backward takes the block form (a sum in double, not the CPU's float sum).
bool bilinear_block_path(int64_t h, int64_t w, int64_t oh, int64_t ow);

size_t loss_scratch_floats(int64_t pixels);
void softmax_cross_entropy(int t, const void* logits, const int32_t* labels, const float* class_weights, int64_t n,
                           int64_t classes, int64_t hw, void* dlogits, float* loss, const float* grad_scale,
                           float* scratch);
void argmax_channels(int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw);
void accumulate_confusion(const int32_t* labels, const int32_t* pred, size_t n, int64_t classes, int32_t* confusion);
size_t reduce_scratch_floats(size_t n);
void sum_squares(const float* x, size_t n, float* out, float* scratch);

void sgd_step(float* w, const float* g, float* velocity, size_t n, float lr, float momentum, float weight_decay,
              bool nesterov);
void adam_step(float* w, const float* g, float* m, float* v, float* update, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply);

// The fused updates over a chunk table built as the CUDA backend builds it (CudaTensorSet in
// cuda/cuda_backend.cpp: tensors in order, chunks of chunk_elems elements, state offsets
// back to back), here with a chunk size of the test's choosing so that small tensors span
// several chunks.
// mirror: a weight mirror the updates write (nn::WeightMirror's fields): values of dtype code
// mirror_type, stored as f32 when widened, [k, rs, c] of w's [k, c, rs] when mirror_c > 0.
struct Tensor {
  float* w;
  float* g;
  size_t n;
  bool decay;
  void* mirror = nullptr;
  int mirror_type = 0;
  bool mirror_widened = false;
  int64_t mirror_c = 0, mirror_rs = 0;
};
class FusedSet {
 public:
  FusedSet(std::vector<Tensor> tensors, int32_t chunk_elems);
  ~FusedSet();
  void sgd_update(float* velocity, float lr, float momentum, float weight_decay, bool nesterov);
  // kind: 0 adam, 1 adamw, 2 lamb.
  void adam_update(float* m, float* v, int kind, float lr, float beta1, float beta2, float eps, float weight_decay,
                   int64_t step);
  void larc_scale(float lr, float eta, float weight_decay, bool clip);
  int32_t chunks() const;

 private:
  struct Table;  // the DeviceTensor rows, chunk lists, LAMB's update and the norms scratch
  std::unique_ptr<Table> m_table;
};

}  // namespace squall::test::emulated
