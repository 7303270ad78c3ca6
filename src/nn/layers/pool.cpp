// Pooling layers: max and average over windows (backend PoolPlan), and global average.
#include <memory>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"
#include "src/nn/layers/image_input.hpp"

namespace squall::nn {
namespace {

class Pool final : public Layer {
 public:
  Pool(PoolKind kind, int64_t kernel, int64_t stride, int64_t padding) : m_kind(kind) {
    // padding beyond half the window would make windows of padding alone (PyTorch refuses too).
    if (kernel <= 0 || stride <= 0 || padding < 0 || 2 * padding > kernel)
      throw Error(type() + ": needs kernel and stride positive and 0 <= padding <= kernel/2 (got kernel " +
                  std::to_string(kernel) + ", stride " + std::to_string(stride) + ", padding " +
                  std::to_string(padding) + ")");
    m_desc.r = m_desc.s = kernel;
    m_desc.stride_h = m_desc.stride_w = stride;
    m_desc.pad_h = m_desc.pad_w = padding;
    m_desc.kind = kind;
  }
  std::string type() const override { return m_kind == PoolKind::max ? "max_pool" : "avg_pool"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.kernel = m_desc.r;
    a.stride = m_desc.stride_h;
    a.padding = m_desc.pad_h;
    return a;
  }
  // One comparison or addition per window element and output.
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return static_cast<double>(output.numel()) * static_cast<double>(m_desc.r * m_desc.s);
  }

  Shape setup(const std::vector<Shape>& inputs) override {
    const Shape& x = image_input(type(), inputs);
    m_desc.n = x.n(); m_desc.c = x.c(); m_desc.h = x.h(); m_desc.w = x.w();
    if (x.h() + 2 * m_desc.pad_h < m_desc.r || x.w() + 2 * m_desc.pad_w < m_desc.s)
      throw Error(type() + ": input " + x.str() + " is smaller than the window " + std::to_string(m_desc.r) +
                  " (padding " + std::to_string(m_desc.pad_h) + ")");
    return m_desc.output();
  }

  // Windows that tile the input (kernel = stride, no padding) never cross a tile edge on a
  // multiple of the stride; overlapping ones would need a halo (not built yet).
  std::string set_tile(const TileContext&) override {
    if (m_desc.r == m_desc.stride_h && m_desc.s == m_desc.stride_w && m_desc.pad_h == 0 && m_desc.pad_w == 0) return "";
    return type() + " runs on tiles only with kernel = stride and no padding (got kernel " + std::to_string(m_desc.r) +
           ", stride " + std::to_string(m_desc.stride_h) + ", padding " + std::to_string(m_desc.pad_h) + ")";
  }

  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_desc.dtype = m_dtype;
    m_desc.layout = m_layout;
    m_plan = backend.make_pool(m_desc);
  }
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode& mode) override {
    m_plan->forward(stream, in[0].data, out.data, mode.train);
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data != nullptr) m_plan->backward(stream, dout.data, din[0].data);
  }

 private:
  PoolKind m_kind;
  PoolDesc m_desc;
  std::unique_ptr<PoolPlan> m_plan;
};

// In NHWC or blocked the input is permuted into an NCHW copy and pooled there (and the gradient back):
// the pooled input is small in the models that use it (a classifier's last features, the
// image-pooling branch of DeepLab's ASPP at 1/16 of the input).
class GlobalAvgPool final : public Layer {
 public:
  std::string type() const override { return "global_avg_pool"; }
  double forward_flops(const std::vector<Shape>& inputs, const Shape&) const override {
    return static_cast<double>(inputs.at(0).numel());
  }
  Shape setup(const std::vector<Shape>& inputs) override {
    m_x = image_input(type(), inputs);
    m_nc = m_x.n() * m_x.c();
    m_hw = m_x.h() * m_x.w();
    return Shape(m_x.n(), m_x.c());
  }
  // On a split sample: the mean over every tile of the group. Each rank's mean over its tile
  // is weighted by the tile's share of the sample's pixels and summed over the group in
  // group-rank order (the same bits on every rank: the pooled features are whole on each).
  // Their gradient on a rank is its tile's share, which backward sums over the group before
  // spreading the whole gradient over the tile.
  std::string set_tile(const TileContext& t) override {
    const TensorTile& x = t.inputs.at(0);
    m_group = nullptr;
    if (t.comm == nullptr || t.comm->group_size() < 2) return "";
    m_group = t.comm;
    m_share = static_cast<double>(x.rows().size() * x.cols().size()) / static_cast<double>(x.height * x.width);
    return "";
  }

  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_backend = &backend;
    m_nchw = input_layout(0) == Layout::nchw ? Buffer{} : backend.allocate(static_cast<size_t>(m_x.numel()), m_dtype);
    m_sum_f32 = m_sum_host = m_dfull = Buffer{};
    if (m_group != nullptr) {
      m_sum_f32 = backend.allocate(static_cast<size_t>(m_nc));
      m_sum_host = backend.allocate_host(static_cast<size_t>(m_nc), DType::f32);
      m_dfull = backend.allocate(static_cast<size_t>(m_nc), m_dtype);
    }
  }
  bool mixes_layouts() const override { return true; }  // the output is 2-D
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    const void* x = in[0].data;
    if (m_nchw) {
      m_backend->permute_layout(stream, m_dtype, x, input_layout(0), m_nchw.raw(), Layout::nchw, m_x.n(), m_x.c(),
                                m_x.h(), m_x.w());
      x = m_nchw.raw();
    }
    m_backend->global_avg_pool_forward(stream, m_dtype, x, out.data, m_nc, m_hw);
    if (m_group != nullptr) group_sum(stream, out.data, out.data, m_share);
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    const void* dy = dout.data;
    if (m_group != nullptr) {
      // The whole gradient, scaled so that the kernel's 1 / (tile pixels) gives 1 / (sample pixels).
      group_sum(stream, dy, m_dfull.raw(), m_share);
      dy = m_dfull.raw();
    }
    if (!m_nchw) return m_backend->global_avg_pool_backward(stream, m_dtype, dy, din[0].data, m_nc, m_hw);
    m_backend->global_avg_pool_backward(stream, m_dtype, dy, m_nchw.raw(), m_nc, m_hw);
    m_backend->permute_layout(stream, m_dtype, m_nchw.raw(), Layout::nchw, din[0].data, input_layout(0), m_x.n(),
                              m_x.c(), m_x.h(), m_x.w());
  }

 private:
  Backend* m_backend = nullptr;
  Shape m_x;
  int64_t m_nc = 0, m_hw = 0;
  Buffer m_nchw;  // NHWC or blocked: the input (or its gradient) in NCHW
  TileComm* m_group = nullptr;  // a split sample's group (set_tile)
  double m_share = 1.0;         // this tile's pixels over the sample's
  Buffer m_sum_f32, m_sum_host, m_dfull;

  // dst = the group's sum of src * scale, per feature (src and dst of m_nc values in the
  // activations' type; they may be the same).
  void group_sum(Stream& stream, const void* src, void* dst, double scale) {
    const auto n = static_cast<size_t>(m_nc);
    float* f = m_sum_f32.data();
    if (m_dtype == DType::f32)
      m_backend->copy_bytes(stream, f, src, n * sizeof(float));
    else
      m_backend->convert(stream, src, m_dtype, f, DType::f32, n);
    m_backend->copy_bytes_to_host(stream, m_sum_host.raw(), f, n * sizeof(float));
    m_backend->synchronize(stream);
    float* host = m_sum_host.data();
    m_values.assign(host, host + n);
    for (double& v : m_values) v *= scale;
    m_group->sum(m_values.data(), n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(m_values[i]);
    m_backend->copy_bytes_from_host(stream, f, host, n * sizeof(float));
    if (m_dtype == DType::f32)
      m_backend->copy_bytes(stream, dst, f, n * sizeof(float));
    else
      m_backend->convert(stream, f, DType::f32, dst, m_dtype, n);
    m_backend->synchronize(stream);  // the host buffer is read again at the next call
  }
  std::vector<double> m_values;
};

}  // namespace

std::unique_ptr<Layer> max_pool(int64_t kernel, int64_t stride, int64_t padding) {
  return std::make_unique<Pool>(PoolKind::max, kernel, stride, padding);
}
std::unique_ptr<Layer> avg_pool(int64_t kernel, int64_t stride, int64_t padding) {
  return std::make_unique<Pool>(PoolKind::average, kernel, stride, padding);
}
std::unique_ptr<Layer> global_avg_pool() { return std::make_unique<GlobalAvgPool>(); }

}  // namespace squall::nn
