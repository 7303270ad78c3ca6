// Batch normalisation over the channels of [n,c,h,w] (or the features of [n,f]) through the
// backend's BatchNormPlan, which keeps the batch statistics between forward and backward.
#include <memory>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"

namespace squall::nn {
namespace {

class BatchNorm final : public Layer {
 public:
  BatchNorm(float eps, float momentum) : m_eps(eps), m_momentum(momentum) {
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
      throw Error("batch_norm: eps must be positive and momentum in [0, 1], got eps " + std::to_string(eps) +
                  ", momentum " + std::to_string(momentum));
  }
  std::string type() const override { return "batch_norm"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.eps = m_eps;
    return a;
  }

  // Training mode: the statistics (a sum and a sum of squares: 2 per element, taken as 1 here
  // with the subtraction of the mean) and the affine normalisation (x - mean) * scale + shift
  // folded to one multiply-add: about 4 per element.
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return 4.0 * static_cast<double>(output.numel());
  }

  Shape setup(const std::vector<Shape>& inputs) override {
    if (inputs.size() != 1) throw Error("batch_norm: expects 1 input, got " + std::to_string(inputs.size()));
    const Shape& x = inputs[0];
    if ((x.rank != 2 && x.rank != 4) || x.numel() <= 0)
      throw Error("batch_norm: expects a non-empty input [n,c,h,w] or [n,f], got " + x.str());
    m_desc = BatchNormDesc{x.n(), x.c(), x.h(), x.w(), m_eps, m_momentum};
    return x;
  }

  std::vector<ParamSpec> param_specs() const override {
    return {{"weight", Shape(m_desc.c), Init::ones, m_desc.c, m_desc.c, false},
            {"bias", Shape(m_desc.c), Init::zeros, m_desc.c, m_desc.c, false}};
  }
  std::vector<ParamSpec> state_specs() const override {
    return {{"running_mean", Shape(m_desc.c), Init::zeros, m_desc.c, m_desc.c, false},
            {"running_var", Shape(m_desc.c), Init::ones, m_desc.c, m_desc.c, false}};
  }

  void build(Backend& backend, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             const std::vector<Tensor>& state) override {
    SQUALL_CHECK(params.size() == 2 && grads.size() == 2 && state.size() == 2, "batch_norm: parameter count");
    m_gamma = params[0];
    m_beta = params[1];
    m_dgamma = grads[0];
    m_dbeta = grads[1];
    m_running_mean = state[0];
    m_running_var = state[1];
    m_backend = &backend;
    m_scratch_dx = Buffer{};
    m_desc.dtype = m_dtype;
    m_desc.layout = m_layout;
    m_desc.relu = m_fuse_relu;
    m_desc.group = m_group;
    m_plan = backend.make_batch_norm(m_desc);
  }

  // On a tile: the statistics are the whole sample's, summed over the group (BatchNormDesc::group).
  std::string set_tile(const TileContext& t) override {
    if (!t.output.image || (m_desc.h * m_desc.w <= 1 && t.output.height * t.output.width > 1))
      return "it normalises features of no pixels";
    m_group = t.comm;
    return "";
  }

  // The ReLU after it: computed in the normalisation's pass, and its backward in the norm's
  // (the mask recomputed from x), which saves a pass over the tensor each way and the read of
  // the ReLU's output in backward.
  bool fuse_next(const Layer& next, bool) override {
    if (next.type() != "relu" || m_fuse_relu) return false;
    return m_fuse_relu = true;
  }
  void reset_fusion() override { m_fuse_relu = false; }

  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode& mode) override {
    m_plan->forward(stream, in[0].data, m_gamma.f32(), m_beta.f32(), m_running_mean.f32(), m_running_var.f32(),
                    out.data, mode.train);
  }

  void backward(Stream& stream, const std::vector<Tensor>& in, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    void* dx = din[0].data;
    if (dx == nullptr) {
      // The plan computes dx together with dgamma/dbeta; when nobody wants dx (batch norm on
      // the model input) it goes to a scratch buffer, allocated once, on first need.
      if (!m_scratch_dx) m_scratch_dx = m_backend->allocate(static_cast<size_t>(in[0].numel()), m_dtype);
      dx = m_scratch_dx.raw();
    }
    m_plan->backward(stream, in[0].data, dout.data, m_gamma.f32(), dx, m_dgamma.f32(), m_dbeta.f32());
  }

 private:
  float m_eps, m_momentum;
  BatchNormDesc m_desc;
  std::unique_ptr<BatchNormPlan> m_plan;
  bool m_fuse_relu = false;
  TileComm* m_group = nullptr;  // a split sample's group (set_tile)
  Backend* m_backend = nullptr;
  Buffer m_scratch_dx;
  Tensor m_gamma, m_beta, m_dgamma, m_dbeta, m_running_mean, m_running_var;
};

}  // namespace

std::unique_ptr<Layer> batch_norm(float eps, float momentum) { return std::make_unique<BatchNorm>(eps, momentum); }

}  // namespace squall::nn
