// The kernels of cuda/ through the host grid emulator: each call is the library's own launch
// sequence (cuda/*_ops.cuh) with HostLaunch in place of DeviceLaunch. Pure host code: no
// CUDA runtime call, so it runs on a machine without a GPU or a driver.
#include "cuda/batch_norm_group_host.hpp"
#include "cuda/batch_norm_group_ops.cuh"
#include "cuda/bias_ops.cuh"
#include "cuda/elementwise_ops.cuh"
#include "cuda/host_grid.cuh"
#include "cuda/loss_ops.cuh"
#include "cuda/optim_ops.cuh"
#include "cuda/resample_ops.cuh"
#include "tests/cuda_host/kernels_emulated.hpp"

namespace squall::test::emulated {

namespace k = squall::cuda::kernels;
namespace d = squall::cuda::kernels::detail;
using d::HostLaunch;

double block_sum(const std::vector<double>& per_thread) { return d::host_block_sum(per_thread); }

void bn_group_forward(int t, bool nhwc, bool relu, const void* x, void* y, const float* gamma, const float* beta,
                      float eps, float momentum, float* running_mean, float* running_var, float* params, double* count,
                      int64_t n, int64_t c, int64_t hw) {
  const auto cs = static_cast<size_t>(c);
  std::vector<float> raw(6 * cs);
  d::bn_group_moments_on(HostLaunch{}, t, nhwc, x, raw.data(), n, c, hw);
  std::vector<double> moments(3 * cs);
  d::bn_group_read_doubles(raw.data(), 3 * cs, 2, 0, moments.data());
  *count = d::bn_group_forward_params(moments.data(), cs, gamma, beta, eps, momentum, running_mean, running_var, params);
  d::bn_group_apply_on(HostLaunch{}, t, nhwc, relu, x, y, params + 2 * cs, n, c, hw);
}

void bn_group_backward(int t, bool nhwc, bool relu, const void* x, const void* dy, void* dx, const float* gamma,
                       float* params, double count, float* dgamma, float* dbeta, int64_t n, int64_t c, int64_t hw) {
  const auto cs = static_cast<size_t>(c);
  std::vector<float> raw(4 * cs);
  d::bn_group_grad_sums_on(HostLaunch{}, t, nhwc, relu, x, dy, params, raw.data(), n, c, hw);
  std::vector<double> local(2 * cs);
  d::bn_group_read_doubles(raw.data(), cs, 4, 0, local.data());
  d::bn_group_read_doubles(raw.data(), cs, 4, 2, local.data() + cs);
  d::bn_group_backward_params(local.data(), local.data(), count, cs, gamma, params, dgamma, dbeta);
  d::bn_group_dx_on(HostLaunch{}, t, nhwc, relu, x, dy, dx, params, n, c, hw);
}

void fill(float* x, size_t n, float value) { d::fill_on(HostLaunch{}, x, n, value); }
void relu_forward(int t, const void* x, void* y, size_t n) { d::relu_forward_on(HostLaunch{}, t, x, y, n); }
void relu_backward(int t, const void* y, const void* dy, void* dx, size_t n) {
  d::relu_backward_on(HostLaunch{}, t, y, dy, dx, n);
}
void add(int t, const void* a, const void* b, void* y, size_t n) { d::add_on(HostLaunch{}, t, a, b, y, n); }
void multiply(int t, const void* a, const void* b, void* y, size_t n) { d::multiply_on(HostLaunch{}, t, a, b, y, n); }
void axpy(float alpha, const float* x, float* y, size_t n) { d::axpy_on(HostLaunch{}, alpha, x, y, n); }
void scale(float alpha, float* x, size_t n) { d::scale_on(HostLaunch{}, alpha, x, n); }
void axpby(float alpha, const float* x, float beta, float* y, size_t n) {
  d::axpby_on(HostLaunch{}, alpha, x, beta, y, n);
}
void dropout_forward(int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed, uint64_t offset) {
  d::dropout_on(HostLaunch{}, t, x, y, mask, n, p, seed, offset);
}
void copy_strided(size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                  int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  d::copy_strided_on(HostLaunch{}, elem_bytes, dst, dst_stride, dst_offset, src, src_stride, src_offset, rows, count);
}
void copy_block(int t, void* dst, const void* src, const squall::nn::BlockCopy& block, bool accumulate) {
  d::copy_block_on(HostLaunch{}, t, dst, src, block, accumulate);
}
void convert(const void* src, int from, void* dst, int to, size_t n) {
  d::convert_on(HostLaunch{}, src, from, dst, to, n);
}
void permute_convert(const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc, int64_t n,
                     int64_t c, int64_t h, int64_t w) {
  d::permute_convert_on(HostLaunch{}, src, from, from_nhwc, dst, to, to_nhwc, n, c, h, w);
}
void permute_bits(size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc, int64_t n, int64_t c,
                  int64_t h, int64_t w) {
  d::permute_bits_on(HostLaunch{}, elem_bytes, src, from_nhwc, dst, to_nhwc, n, c, h, w);
}
void add_wide_index(int t, const void* a, const void* b, void* y, size_t n) {
  d::dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    d::map_with<d::per_access<T>(), uint64_t>(
        HostLaunch{}, d::AddOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)}, n,
        d::aligned16(a) && d::aligned16(b) && d::aligned16(y));
  });
}
void permute_convert_wide_index(const void* src, int from, void* dst, int to, bool to_nhwc, int64_t n, int64_t c,
                                int64_t h, int64_t w) {
  d::dispatch_float(from, "permute", [&](auto from_tag) {
    using From = decltype(from_tag);
    d::dispatch_float(to, "permute", [&](auto to_tag) {
      using To = decltype(to_tag);
      d::permute_with<uint64_t>(HostLaunch{}, static_cast<const From*>(src), to_nhwc, static_cast<To*>(dst), n, c, h * w);
    });
  });
}
bool permute_tiles(size_t from_bytes, size_t to_bytes, const void* src, const void* dst, int64_t c, int64_t hw) {
  // The decision depends on the element sizes only: integers of those sizes stand for the types.
  const auto tiles = [&](auto from, auto to) {
    return d::permute_by_tiles<decltype(from), decltype(to)>(src, dst, c, hw);
  };
  if (from_bytes == 4) return to_bytes == 4 ? tiles(uint32_t{}, uint32_t{}) : tiles(uint32_t{}, uint16_t{});
  return to_bytes == 4 ? tiles(uint16_t{}, uint32_t{}) : tiles(uint16_t{}, uint16_t{});
}

void bias_add(int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw) {
  d::bias_add_on(HostLaunch{}, t, nhwc, y, b, n, c, hw);
}
size_t bias_grad_scratch_floats(int64_t n, int64_t c, int64_t hw) { return d::bias_grad_scratch(n, c, hw); }
bool bias_grad_by_groups(int t, bool nhwc, const void* dy, int64_t c) {
  bool groups = false;
  d::dispatch_float(t, "bias", [&](auto tag) { groups = d::bias_grad_by_groups<decltype(tag)>(nhwc, dy, c); });
  return groups;
}
int64_t bias_grad_parts(int64_t n, int64_t c, int64_t hw) { return d::bias_grad_parts(n, c, hw); }
void bias_grad(int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw, bool round_to_type,
               float* scratch) {
  d::bias_grad_on(HostLaunch{}, t, nhwc, dy, db, n, c, hw, round_to_type, scratch);
}

void global_avg_pool_forward(int t, const void* x, void* y, int64_t nc, int64_t hw) {
  d::gap_forward_on(HostLaunch{}, t, x, y, nc, hw);
}
void global_avg_pool_backward(int t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  d::gap_backward_on(HostLaunch{}, t, dy, dx, nc, hw);
}
void bilinear_forward(int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  d::bilinear_forward_on(HostLaunch{}, t, x, y, nc, h, w, oh, ow);
}
void bilinear_backward(int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  d::bilinear_backward_on(HostLaunch{}, t, dy, dx, nc, h, w, oh, ow);
}
bool bilinear_block_path(int64_t h, int64_t w, int64_t oh, int64_t ow) { return d::bilinear_block_path(h, w, oh, ow); }

size_t loss_scratch_floats(int64_t pixels) { return d::loss_scratch(pixels); }
void softmax_cross_entropy(int t, const void* logits, const int32_t* labels, const float* class_weights, int64_t n,
                           int64_t classes, int64_t hw, void* dlogits, float* loss, const float* grad_scale,
                           float* scratch) {
  d::softmax_cross_entropy_on(HostLaunch{}, t, logits, labels, class_weights, n, classes, hw, dlogits, loss,
                              grad_scale, scratch);
}
void argmax_channels(int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  d::argmax_channels_on(HostLaunch{}, t, x, out, n, c, hw);
}
void accumulate_confusion(const int32_t* labels, const int32_t* pred, size_t n, int64_t classes, int32_t* confusion) {
  d::accumulate_confusion_on(HostLaunch{}, labels, pred, n, classes, confusion);
}
size_t reduce_scratch_floats(size_t n) { return 2 * static_cast<size_t>(d::reduce_blocks(n)); }
void sum_squares(const float* x, size_t n, float* out, float* scratch) {
  d::sum_squares_on(HostLaunch{}, x, n, out, scratch);
}

void sgd_step(float* w, const float* g, float* velocity, size_t n, float lr, float momentum, float weight_decay,
              bool nesterov) {
  d::sgd_step_on(HostLaunch{}, w, g, velocity, n, lr, momentum, weight_decay, nesterov);
}
void adam_step(float* w, const float* g, float* m, float* v, float* update, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply) {
  d::adam_step_on(HostLaunch{}, w, g, m, v, update, n, lr, beta1, beta2, eps, weight_decay, decoupled, step, apply);
}

struct FusedSet::Table {
  std::vector<k::DeviceTensor> rows;
  std::vector<int32_t> chunk_tensor;
  std::vector<uint64_t> chunk_begin;
  k::ChunkTable table{};
  std::vector<float> update, norms;
};

FusedSet::FusedSet(std::vector<Tensor> tensors, int32_t chunk_elems) : m_table(std::make_unique<Table>()) {
  Table& t = *m_table;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& x = tensors[i];
    t.rows.push_back({x.w, x.g, x.n, offset, x.decay ? 1.0f : 0.0f, 0.0f, x.mirror, x.mirror_type,
                      x.mirror_widened ? 1 : 0, static_cast<uint32_t>(x.mirror_c), static_cast<uint32_t>(x.mirror_rs)});
    for (uint64_t b = 0; b < x.n; b += static_cast<uint64_t>(chunk_elems)) {
      t.chunk_tensor.push_back(static_cast<int32_t>(i));
      t.chunk_begin.push_back(b);
    }
    offset += x.n;
  }
  t.table.tensors = t.rows.data();
  t.table.chunk_tensor = t.chunk_tensor.data();
  t.table.chunk_begin = t.chunk_begin.data();
  t.table.chunks = static_cast<int32_t>(t.chunk_tensor.size());
  t.table.tensor_count = static_cast<int32_t>(t.rows.size());
  t.table.chunk_elems = chunk_elems;
  t.update.assign(std::max<uint64_t>(offset, 1), 0.0f);
  t.norms.assign(std::max<size_t>(4 * t.chunk_tensor.size() + 4 * t.rows.size(), 1), 0.0f);
}

FusedSet::~FusedSet() = default;

int32_t FusedSet::chunks() const { return m_table->table.chunks; }

void FusedSet::sgd_update(float* velocity, float lr, float momentum, float weight_decay, bool nesterov) {
  d::sgd_update_on(HostLaunch{}, m_table->table, velocity, lr, momentum, weight_decay, nesterov);
}

void FusedSet::adam_update(float* m, float* v, int kind, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int64_t step) {
  d::adam_update_on(HostLaunch{}, m_table->table, m, v, kind, lr, beta1, beta2, eps, weight_decay, step,
                    m_table->update.data(), m_table->norms.data());
}

void FusedSet::larc_scale(float lr, float eta, float weight_decay, bool clip) {
  d::larc_scale_on(HostLaunch{}, m_table->table, lr, eta, weight_decay, clip, m_table->norms.data());
}

}  // namespace squall::test::emulated
