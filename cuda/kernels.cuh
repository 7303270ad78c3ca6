#pragma once
// squall's own CUDA kernels (cuda/*.cu). Plain functions on raw device pointers: every one
// enqueues on `s` and returns without waiting; none allocates (scratch comes from the
// caller). Semantics are those of the matching squall::nn::Backend call (src/nn/backend.hpp),
// which the CPU backend defines as the reference.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "src/nn/kernels.hpp"

namespace squall::cuda::kernels {

// Calls on activations take the element type as a dtype code `t`: 0 f32, 1 bf16, 2 f16
// (nn::DType's order), and compute in f32 (kernel_util.cuh). The others are f32 only.

// ---- element-wise (elementwise.cu) ----
void fill(cudaStream_t s, float* x, size_t n, float value);
void relu_forward(cudaStream_t s, int t, const void* x, void* y, size_t n);
void relu_backward(cudaStream_t s, int t, const void* y, const void* dy, void* dx, size_t n);
void add(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n);
void axpy(cudaStream_t s, float alpha, const float* x, float* y, size_t n);
void scale(cudaStream_t s, float alpha, float* x, size_t n);
void axpby(cudaStream_t s, float alpha, const float* x, float beta, float* y, size_t n);
void multiply(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n);
void dropout_forward(cudaStream_t s, int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                     uint64_t offset);
// Moves elements of `elem_bytes` bytes (2 or 4): a copy, no arithmetic.
void copy_strided(cudaStream_t s, size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset,
                  const void* src, int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count);
// A block of elements copied, or added in f32 (accumulate), between strided tensors of type t
// (0 f32, 1 bf16, 2 f16): nn::Kernels::copy_block.
void copy_block(cudaStream_t s, int t, void* dst, const void* src, const nn::BlockCopy& block, bool accumulate);
// dtype: 0 f32, 1 bf16, 2 f16 (nn::DType's order); round to nearest even.
void convert(cudaStream_t s, const void* src, int from, void* dst, int to, size_t n);
// A 4-D tensor [n, c, h, w] converted from type `from` in one memory order (NHWC when
// from_nhwc, else NCHW) to type `to` in the other or the same: the layout permutation of
// activations, and the NHWC filter copies of the convolution plans ([k, c, r, s] f32 to
// [k, r, s, c] of the activation type, and back for the gradient). src and dst must not
// overlap unless the call is a same-order conversion.
void permute_convert(cudaStream_t s, const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc,
                     int64_t n, int64_t c, int64_t h, int64_t w);
// Moves elements of 2 or 4 bytes from one memory order to the other, no conversion.
void permute_bits(cudaStream_t s, size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc,
                  int64_t n, int64_t c, int64_t h, int64_t w);

// ---- bias of reduced-precision plans (bias.cu) ----
// y [n, c, hw] (NCHW, or [n, hw, c] when nhwc) of type t: y = round(y + b[c]) with b f32
// (the conv and linear plans at bf16/f16, and in NHWC).
void bias_add(cudaStream_t s, int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw);
// db[c] = sum over n, hw of dy (as bias_add's y) of type t, accumulated in double in a fixed
// order (deterministic: two passes, per (channel, part of the pixels) then per channel), then
// rounded to type t when round_to_type (as a reduced-precision bias gradient is), stored as
// f32. scratch: at least bias_grad_scratch_floats(n, c, hw) floats of device memory.
size_t bias_grad_scratch_floats(int64_t n, int64_t c, int64_t hw);
void bias_grad(cudaStream_t s, int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw,
               bool round_to_type, float* scratch);

// ---- batch norm over a split sample's group (batch_norm_group.cu) ----
// x, y, dy, dx [n, c, hw] (NCHW, or [n, hw, c] when nhwc) of type t. moments: per channel
// count, mean and squared deviations of this tile (3 doubles as 6 floats); apply: y = x *
// p[ch] + p[c + ch] (and the ReLU); grad_sums: per channel sum dy and sum dy (x - mean) (2
// doubles as 4 floats), p = mean, inv_std, scale, shift; dx: p = those, k, mean_dy,
// mean_dy_xhat.
void bn_group_moments(cudaStream_t s, int t, bool nhwc, const void* x, float* moments, int64_t n, int64_t c,
                      int64_t hw);
void bn_group_apply(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, void* y, const float* p, int64_t n,
                    int64_t c, int64_t hw);
void bn_group_grad_sums(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, const void* dy, const float* p,
                        float* sums, int64_t n, int64_t c, int64_t hw);
void bn_group_dx(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, const void* dy, void* dx,
                 const float* p, int64_t n, int64_t c, int64_t hw);

// ---- resampling and pooling (resample.cu) ----
void global_avg_pool_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t hw);
void global_avg_pool_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t hw);
void bilinear_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                      int64_t ow);
// Gathers, no atomics: deterministic. Where an input element is read by few outputs, one
// thread per input element adds them in the CPU's order (bit for bit the CPU); where it is
// read by many (a 1x1 input upsampled to a feature map), a block per input element adds
// them in double and rounds once (resample_ops.cuh, bilinear_block_path).
void bilinear_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                       int64_t oh, int64_t ow);

// ---- loss and metrics (loss.cu) ----
// scratch: at least loss_scratch_floats(n * hw) floats of device memory. grad_scale: device
// pointer to the loss scale the gradient is multiplied by, or nullptr for 1.
size_t loss_scratch_floats(int64_t pixels);
void softmax_cross_entropy(cudaStream_t s, int t, const void* logits, const int32_t* labels,
                           const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                           float* loss, const float* grad_scale, float* scratch);
void argmax_channels(cudaStream_t s, int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw);
void accumulate_confusion(cudaStream_t s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                          int32_t* confusion);
// out[0] = sum x^2; scratch: at least reduce_scratch_floats(n) floats.
size_t reduce_scratch_floats(size_t n);
void sum_squares(cudaStream_t s, const float* x, size_t n, float* out, float* scratch);

// ---- optimizers (optim.cu) ----
// One tensor of a fused update, as uploaded to the device.
struct DeviceTensor {
  float* w;
  float* g;
  uint64_t n;
  uint64_t state_offset;  // into the flat state buffers (momentum, moments, update scratch)
  float decay;            // 1 when weight decay applies, else 0
  float pad;
  // The plan's copy of w (nn::WeightMirror) that the updates write with w; null: none.
  void* mirror;
  int32_t mirror_type;            // its values' dtype code (0 f32, 1 bf16, 2 f16)
  int32_t mirror_widened;         // 1: stored as f32 holding values of that type
  uint32_t mirror_c, mirror_rs;   // > 0: w [k, c, rs] is stored [k, rs, c]; 0: in w's order
};
// Work split: `chunks` chunks of at most chunk_elems elements; chunk_tensor[c] is the tensor
// chunk c belongs to and chunk_begin[c] its first element within it. Built on the host once,
// in tensor order: chunk_tensor never decreases with c (the per-tensor norms find a tensor's
// chunks by binary search). A tensor with n == 0 has no chunk.
struct ChunkTable {
  const DeviceTensor* tensors;  // device
  const int32_t* chunk_tensor;  // device
  const uint64_t* chunk_begin;  // device
  int32_t chunks;
  int32_t tensor_count;
  int32_t chunk_elems;
};
void sgd_step(cudaStream_t s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
              float weight_decay, bool nesterov);
void adam_step(cudaStream_t s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply);
// The fused updates (sgd_update, adam_update) write each tensor's mirror from its new
// weights in the same pass; larc_scale touches gradients only.
void sgd_update(cudaStream_t s, const ChunkTable& t, float* velocity, float lr, float momentum, float weight_decay,
                bool nesterov);
// Scratch for the per-tensor norms of lamb and larc: per-chunk partial sums of squares, then
// per-tensor sums, each a double kept in two floats (so no float atomics: deterministic).
size_t norms_scratch_floats(int32_t chunks, int32_t tensor_count);  // 4 * chunks + 4 * tensor_count
// kind: 0 adam, 1 adamw, 2 lamb. lamb needs update (total floats, indexed by state_offset) and
// norms (norms_scratch_floats(t.chunks, t.tensor_count) floats), both device scratch; adam
// and adamw may pass nullptr for both. Three launches for lamb (direction and partial norms,
// per-tensor norms, apply), one for the others.
void adam_update(cudaStream_t s, const ChunkTable& t, float* m, float* v, int kind, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t step, float* update, float* norms);
// norms: norms_scratch_floats(t.chunks, t.tensor_count) floats of device scratch.
void larc_scale(cudaStream_t s, const ChunkTable& t, float lr, float eta, float weight_decay, bool clip,
                float* norms);

}  // namespace squall::cuda::kernels
