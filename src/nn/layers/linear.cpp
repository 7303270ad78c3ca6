// Fully connected layer over the backend's LinearPlan. A rank-4 input [n,c,h,w] is read as
// [n, c*h*w] in place (NCHW is contiguous per sample), so no flatten is needed before it.
#include <memory>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"

namespace squall::nn {
namespace {

class Linear final : public Layer {
 public:
  Linear(int64_t out_features, bool bias) : m_out(out_features), m_bias_on(bias) {
    if (out_features <= 0) throw Error("linear: out_features must be positive, got " + std::to_string(out_features));
  }
  std::string type() const override { return "linear"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.bias = m_bias_on;
    return a;
  }

  Shape setup(const std::vector<Shape>& inputs) override {
    if (inputs.size() != 1) throw Error("linear: expects 1 input, got " + std::to_string(inputs.size()));
    const Shape& x = inputs[0];
    if ((x.rank != 2 && x.rank != 4) || x.numel() <= 0)
      throw Error("linear: expects a non-empty input [n,f] or [n,c,h,w], got " + x.str());
    m_desc = LinearDesc{x.n(), x.per_sample(), m_out, m_bias_on};
    return Shape(m_desc.n, m_desc.out);
  }

  // On a split sample, features of no pixels are whole on every rank of the group (the
  // pooled image features of DeepLab's ASPP): computed alike on each, its weights' gradient on
  // each the share of that rank's tile, summed with the model's others. An image input would
  // need every pixel of the sample.
  std::string set_tile(const TileContext& t) override {
    return t.inputs.at(0).image ? "it reads every pixel of the sample" : "";
  }

  double forward_flops(const std::vector<Shape>&, const Shape&) const override {
    const double outputs = static_cast<double>(m_desc.n) * static_cast<double>(m_desc.out);
    return outputs * (2.0 * static_cast<double>(m_desc.in) + (m_desc.bias ? 1.0 : 0.0));
  }

  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> specs{{"weight", Shape(m_desc.out, m_desc.in), Init::uniform_fan_in, m_desc.in, m_desc.out, true}};
    if (m_desc.bias) specs.push_back({"bias", Shape(m_desc.out), Init::uniform_fan_in, m_desc.in, m_desc.out, false});
    return specs;
  }

  void build(Backend& backend, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             const std::vector<Tensor>&) override {
    bind_weights(params, grads, m_desc.bias, "linear", m_weight, m_dweight, m_bias, m_dbias);
    m_desc.dtype = m_dtype;
    m_plan = backend.make_linear(m_desc);
  }

  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    m_plan->forward(stream, in[0].data, m_weight.f32(), m_desc.bias ? m_bias.f32() : nullptr, out.data);
  }

  void backward(Stream& stream, const std::vector<Tensor>& in, const Tensor&, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    m_plan->backward_weights(stream, in[0].data, dout.data, m_dweight.f32(), m_desc.bias ? m_dbias.f32() : nullptr);
    if (din[0].data != nullptr) m_plan->backward_data(stream, dout.data, m_weight.f32(), din[0].data);
  }

 private:
  int64_t m_out;
  bool m_bias_on;
  LinearDesc m_desc;
  std::unique_ptr<LinearPlan> m_plan;
  Tensor m_weight, m_bias, m_dweight, m_dbias;
};

}  // namespace

std::unique_ptr<Layer> linear(int64_t out_features, bool bias) { return std::make_unique<Linear>(out_features, bias); }

}  // namespace squall::nn
