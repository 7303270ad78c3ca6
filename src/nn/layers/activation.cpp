// Element-wise layers: ReLU and dropout.
#include <memory>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"

namespace squall::nn {
namespace {

const Shape& single_input(const char* layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 1)
    throw Error(std::string(layer) + ": expects 1 input, got " + std::to_string(inputs.size()));
  if (inputs[0].numel() <= 0) throw Error(std::string(layer) + ": empty input " + inputs[0].str());
  return inputs[0];
}

class Relu final : public Layer {
 public:
  std::string type() const override { return "relu"; }
  Shape setup(const std::vector<Shape>& inputs) override { return single_input("relu", inputs); }
  std::string set_tile(const TileContext&) override { return ""; }  // pixel by pixel
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return static_cast<double>(output.numel());
  }
  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_backend = &backend;
  }
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode&) override {
    m_backend->relu_forward(stream, m_dtype, in[0].data, out.data, static_cast<size_t>(out.numel()));
  }
  // Uses the output, not the input: y > 0 exactly where x > 0.
  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor& out, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    m_backend->relu_backward(stream, m_dtype, out.data, dout.data, din[0].data, static_cast<size_t>(out.numel()));
  }

 private:
  Backend* m_backend = nullptr;
};

class Dropout final : public Layer {
 public:
  explicit Dropout(float p) : m_p(p) {
    if (!(p >= 0.0f && p < 1.0f)) throw Error("dropout: p must be in [0, 1), got " + std::to_string(p));
  }
  std::string type() const override { return "dropout"; }
  // Pixel by pixel; each tile draws its own mask (the random stream is per element of the
  // tile, salted by the node), so a split run's masks differ from an unsplit run's.
  // Features of no pixels are whole on every rank of the group, and each rank's mask would
  // differ.
  std::string set_tile(const TileContext& t) override {
    return t.output.image ? "" : "each rank of the group would drop other features of the one sample";
  }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.p = m_p;
    return a;
  }
  double forward_flops(const std::vector<Shape>&, const Shape& output) const override {
    return static_cast<double>(output.numel());  // one multiply by mask / (1 - p)
  }
  Shape setup(const std::vector<Shape>& inputs) override {
    const Shape& x = single_input("dropout", inputs);
    m_count = static_cast<size_t>(x.numel());
    return x;
  }

  // The mask lives from forward to backward; allocated here, not per step.
  void build(Backend& backend, const std::vector<Tensor>&, const std::vector<Tensor>&,
             const std::vector<Tensor>&) override {
    m_backend = &backend;
    m_mask = m_p > 0.0f ? backend.allocate(m_count, m_dtype) : Buffer{};
  }

  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode& mode) override {
    const size_t n = static_cast<size_t>(out.numel());
    m_last_train = mode.train && m_p > 0.0f;
    if (!m_last_train) {
      m_backend->copy_bytes(stream, out.data, in[0].data, out.bytes());
      return;
    }
    SQUALL_CHECK(n == m_count, "dropout: output size differs from the one set up");
    // Each step draws its own counter range, so masks differ per step yet replay exactly
    // for a given (seed, step).
    // The node index salts the seed so that two dropout layers of one shape draw different
    // masks in the same step; the step picks a fresh stretch of the counter-based stream.
    m_backend->dropout_forward(stream, m_dtype, in[0].data, out.data, m_mask.raw(), n, m_p,
                               mode.seed ^ (0x9e3779b97f4a7c15ull * (mode.node + 1)),
                               mode.step * static_cast<uint64_t>(n));
  }

  void backward(Stream& stream, const std::vector<Tensor>&, const Tensor& out, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    if (din[0].data == nullptr) return;
    const size_t n = static_cast<size_t>(out.numel());
    if (m_last_train) m_backend->multiply(stream, m_dtype, dout.data, m_mask.raw(), din[0].data, n);
    else m_backend->copy_bytes(stream, din[0].data, dout.data, dout.bytes());
  }

 private:
  float m_p;
  Backend* m_backend = nullptr;
  size_t m_count = 0;  // elements per batch, from setup
  Buffer m_mask;
  bool m_last_train = false;
};

}  // namespace

std::unique_ptr<Layer> relu() { return std::make_unique<Relu>(); }
std::unique_ptr<Layer> dropout(float p) { return std::make_unique<Dropout>(p); }

}  // namespace squall::nn
