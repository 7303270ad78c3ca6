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
  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_backend = &backend;
    m_nchw = input_layout(0) == Layout::nchw ? Buffer{} : backend.allocate(static_cast<size_t>(m_x.numel()), m_dtype);
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
  }
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    if (!m_nchw) return m_backend->global_avg_pool_backward(stream, m_dtype, dout.data, din[0].data, m_nc, m_hw);
    m_backend->global_avg_pool_backward(stream, m_dtype, dout.data, m_nchw.raw(), m_nc, m_hw);
    m_backend->permute_layout(stream, m_dtype, m_nchw.raw(), Layout::nchw, din[0].data, input_layout(0), m_x.n(),
                              m_x.c(), m_x.h(), m_x.w());
  }

 private:
  Backend* m_backend = nullptr;
  Shape m_x;
  int64_t m_nc = 0, m_hw = 0;
  Buffer m_nchw;  // NHWC or blocked: the input (or its gradient) in NCHW
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
