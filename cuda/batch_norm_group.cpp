// Batch normalisation over a sample split across a group of ranks (parallel.spatial;
// docs/design.md, "One sample across ranks"). cuDNN's calls normalise over what one device
// holds, so the plan computes the statistics itself, as the CPU's split batch norm does
// (src/cpu/cpu_batch_norm.cpp), with the group's merge between its two halves:
//  - forward (training): each channel's count, mean and squared deviations over this tile
//    (one block per channel, in double), copied to the host, merged over the group
//    (TileComm::merge_moments, group-rank order: the same statistics on every rank); the
//    running statistics updated on the host as PyTorch does (the unbiased variance); then
//    y = x * scale + shift (and the fused ReLU) on the stream;
//  - backward: each channel's sums of dy and dy (x - mean) over this tile, summed over the
//    group; dgamma and dbeta are this rank's share (the gradients' sum over the group adds the
//    shares, as it adds the convolutions'), dx uses the group's sums;
//  - eval: the running statistics, no group.
// The host round trips synchronise the stream twice a pass per batch norm: the price of a
// sum across ranks in the middle of a layer. The kernels are cuda/batch_norm_group_ops.cuh.
#include <memory>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_util.hpp"
#include "cuda/batch_norm_group_host.hpp"
#include "cuda/kernels.cuh"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"
#include "src/nn/spatial.hpp"

namespace squall::cuda {
namespace {

using detail::DeviceFloats;

namespace k = kernels::detail;

class GroupBatchNormPlan final : public nn::BatchNormPlan {
 public:
  explicit GroupBatchNormPlan(const nn::BatchNormDesc& d)
      : m_desc(d),
        m_c(static_cast<size_t>(d.c)),
        m_type(detail::kernel_type(d.dtype)),
        m_nhwc(d.layout == nn::Layout::nhwc),
        m_device_sums(6 * m_c),
        m_params(7 * m_c),
        m_host(6 * m_c + 2 * m_c + 2 * m_c + 2 * m_c + 7 * m_c, 0.0f),
        m_moments(3 * m_c),
        m_local(2 * m_c),
        m_group(2 * m_c) {
    SQUALL_CHECK(d.group != nullptr, "group batch norm: no group");
    if (d.layout != nn::Layout::nchw && d.layout != nn::Layout::nhwc)
      throw Error("batch norm over a split sample: the CUDA plan takes NCHW or NHWC activations");
  }

  void forward(nn::Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    const cudaStream_t st = cuda_stream(s).stream();
    const int64_t hw = m_desc.h * m_desc.w;
    const size_t c = m_c;
    float *raw = host_raw(), *g = host_gamma(), *b = g + c, *rm = host_running(), *rv = rm + c, *p = host_params();
    download(st, g, gamma, c);
    download(st, b, beta, c);
    download(st, rm, running_mean, c);
    download(st, rv, running_var, c);
    if (train) {
      kernels::bn_group_moments(st, m_type, m_nhwc, x, m_device_sums.data(), m_desc.n, m_desc.c, hw);
      download(st, raw, m_device_sums.data(), 6 * c);
      SQUALL_CUDA_CHECK(cudaStreamSynchronize(st));
      k::bn_group_read_doubles(raw, 3 * c, 2, 0, m_moments.data());
      m_desc.group->merge_moments(m_moments.data(), c);
      m_count = k::bn_group_forward_params(m_moments.data(), c, g, b, m_desc.eps, m_desc.momentum, rm, rv, p);
      upload(st, running_mean, rm, c);
      upload(st, running_var, rv, c);
    } else {
      SQUALL_CUDA_CHECK(cudaStreamSynchronize(st));
      k::bn_group_eval_params(c, g, b, m_desc.eps, rm, rv, p);
    }
    upload(st, m_params.data(), p, 4 * c);
    kernels::bn_group_apply(st, m_type, m_nhwc, m_desc.relu, x, y, m_params.data() + 2 * c, m_desc.n, m_desc.c, hw);
    // The host's copies are read by the stream's uploads: they must outlive them.
    SQUALL_CUDA_CHECK(cudaStreamSynchronize(st));
    m_have_batch_stats = train;
  }

  void backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    if (!m_have_batch_stats) throw Error("batch norm: backward needs a forward with train=true first");
    const cudaStream_t st = cuda_stream(s).stream();
    const int64_t hw = m_desc.h * m_desc.w;
    const size_t c = m_c;
    float *raw = host_raw(), *g = host_gamma(), *dg = host_running(), *db = dg + c, *p = host_params();
    kernels::bn_group_grad_sums(st, m_type, m_nhwc, m_desc.relu, x, dy, m_params.data(), m_device_sums.data(),
                                m_desc.n, m_desc.c, hw);
    download(st, raw, m_device_sums.data(), 4 * c);
    download(st, g, gamma, c);
    SQUALL_CUDA_CHECK(cudaStreamSynchronize(st));
    k::bn_group_read_doubles(raw, c, 4, 0, m_local.data());
    k::bn_group_read_doubles(raw, c, 4, 2, m_local.data() + c);
    m_group = m_local;
    m_desc.group->sum(m_group.data(), m_group.size());
    k::bn_group_backward_params(m_local.data(), m_group.data(), m_count, c, g, p, dg, db);
    upload(st, m_params.data() + 4 * c, p + 4 * c, 3 * c);
    upload(st, dgamma, dg, c);
    upload(st, dbeta, db, c);
    kernels::bn_group_dx(st, m_type, m_nhwc, m_desc.relu, x, dy, dx, m_params.data(), m_desc.n, m_desc.c, hw);
    SQUALL_CUDA_CHECK(cudaStreamSynchronize(st));  // the host's copies outlive the uploads
  }

 private:
  static void download(cudaStream_t st, float* dst, const float* src, size_t n) {
    SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, st));
  }
  static void upload(cudaStream_t st, float* dst, const float* src, size_t n) {
    SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, st));
  }
  // The host's floats: the kernels' sums as stored (6c), gamma and beta (2c), the running
  // statistics or dgamma and dbeta (2c), and the parameters of the passes (7c).
  float* host_raw() { return m_host.data(); }
  float* host_gamma() { return m_host.data() + 6 * m_c; }
  float* host_running() { return m_host.data() + 8 * m_c; }
  float* host_params() { return m_host.data() + 10 * m_c; }

  nn::BatchNormDesc m_desc;
  size_t m_c;
  int m_type;
  bool m_nhwc;
  DeviceFloats m_device_sums;  // the tile's moments (6 floats per channel), then its gradient sums (4)
  DeviceFloats m_params;       // mean, inv_std, scale, shift, k, mean_dy, mean_dy_xhat (c each)
  std::vector<float> m_host;
  std::vector<double> m_moments, m_local, m_group;
  double m_count = 0;  // values per channel over the whole split sample
  bool m_have_batch_stats = false;
};

}  // namespace

std::unique_ptr<nn::BatchNormPlan> make_group_batch_norm(const nn::BatchNormDesc& d) {
  return std::make_unique<GroupBatchNormPlan>(d);
}

}  // namespace squall::cuda
