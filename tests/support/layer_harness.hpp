#pragma once
// Test helpers for layers: run one Layer on a backend from host vectors, and check its
// backward against central finite differences of an independent double-precision forward.
// Header-only (inline) so any test executable can include it without a CMake change.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/init.hpp"
#include "src/nn/layer.hpp"
#include "tests/support/test_backend.hpp"

namespace squall::test {

using Doubles = std::vector<double>;
using Floats = std::vector<float>;

// Uniform in [lo, hi) from the top 53 bits: same numbers with any standard library.
inline double uniform(std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
}

inline Floats random_floats(std::mt19937_64& rng, int64_t n, double lo = -1.0, double hi = 1.0) {
  Floats v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(uniform(rng, lo, hi));
  return v;
}

// Values at least `gap` apart and at least gap/2 away from zero (a shuffled grid): max
// pooling and ReLU stay differentiable under the finite-difference step.
inline Floats distinct_floats(std::mt19937_64& rng, int64_t n, double gap = 0.01) {
  Floats v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((static_cast<double>(i - n / 2) + 0.5) * gap);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

inline Doubles to_doubles(const Floats& v) { return Doubles(v.begin(), v.end()); }

// One layer with its own backend memory for inputs, output, parameters, gradients and state.
class LayerRunner {
 public:
  LayerRunner(nn::Backend& backend, std::unique_ptr<nn::Layer> layer, std::vector<nn::Shape> inputs)
      : m_backend(backend), m_stream(backend.create_stream()), m_layer(std::move(layer)),
        m_input_shapes(std::move(inputs)) {
    m_output_shape = m_layer->setup(m_input_shapes);
    m_param_specs = m_layer->param_specs();
    m_state_specs = m_layer->state_specs();
    std::vector<nn::Tensor> params, grads, state;
    for (const auto& spec : m_param_specs) {
      m_params.push_back(alloc(spec.shape));
      m_grads.push_back(alloc(spec.shape));
      params.push_back(m_params.back().view(spec.shape));
      grads.push_back(m_grads.back().view(spec.shape));
    }
    std::mt19937_64 rng(1);
    for (const auto& spec : m_state_specs) {
      m_state.push_back(alloc(spec.shape));
      state.push_back(m_state.back().view(spec.shape));
      Floats init(static_cast<size_t>(spec.shape.numel()));
      nn::initialize(spec, init.data(), rng);
      upload(m_state.back().data(), init);
    }
    for (const auto& s : m_input_shapes) {
      m_inputs.push_back(alloc(s));
      m_dinputs.push_back(alloc(s));
    }
    m_output = alloc(m_output_shape);
    m_doutput = alloc(m_output_shape);
    m_layer->build(backend, params, grads, state);
  }

  nn::Layer& layer() { return *m_layer; }
  const nn::Shape& output_shape() const { return m_output_shape; }
  const std::vector<nn::Shape>& input_shapes() const { return m_input_shapes; }
  const std::vector<nn::ParamSpec>& param_specs() const { return m_param_specs; }

  void set_input(size_t i, const Floats& v) { upload(m_inputs.at(i).data(), v, m_input_shapes.at(i).numel()); }
  void set_param(size_t i, const Floats& v) { upload(m_params.at(i).data(), v, m_param_specs.at(i).shape.numel()); }
  Floats param(size_t i) { return download(m_params.at(i).data(), m_param_specs.at(i).shape.numel()); }
  Floats grad(size_t i) { return download(m_grads.at(i).data(), m_param_specs.at(i).shape.numel()); }
  Floats state(size_t i) { return download(m_state.at(i).data(), m_state_specs.at(i).shape.numel()); }
  Floats dinput(size_t i) { return download(m_dinputs.at(i).data(), m_input_shapes.at(i).numel()); }

  Floats forward(const nn::RunMode& mode) {
    m_layer->forward(*m_stream, input_tensors(), output_tensor(), mode);
    return download(m_output.data(), m_output_shape.numel());
  }

  // Fills input and parameter gradients with NaN first, so a backward that accumulates or
  // leaves an entry unwritten shows. need_input[i] == false passes a null din[i].
  void backward(const Floats& dout, const std::vector<bool>& need_input = {}) {
    upload(m_doutput.data(), dout, m_output_shape.numel());
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<nn::Tensor> din;
    for (size_t i = 0; i < m_inputs.size(); ++i) {
      const bool need = need_input.empty() || need_input[i];
      m_backend.fill(*m_stream, m_dinputs[i].data(), static_cast<size_t>(m_input_shapes[i].numel()), nan);
      din.push_back(need ? m_dinputs[i].view(m_input_shapes[i]) : nn::Tensor{nullptr, m_input_shapes[i]});
    }
    for (size_t i = 0; i < m_grads.size(); ++i)
      m_backend.fill(*m_stream, m_grads[i].data(), static_cast<size_t>(m_param_specs[i].shape.numel()), nan);
    m_layer->backward(*m_stream, input_tensors(), output_tensor(), m_doutput.view(m_output_shape), din);
    m_backend.synchronize(*m_stream);
  }

 private:
  nn::Buffer alloc(const nn::Shape& s) { return m_backend.allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1))); }
  void upload(float* dst, const Floats& v, int64_t expected = -1) {
    if (expected >= 0) REQUIRE(static_cast<int64_t>(v.size()) == expected);
    m_backend.copy_from_host(*m_stream, dst, v.data(), v.size());
    m_backend.synchronize(*m_stream);
  }
  Floats download(const float* src, int64_t n) {
    Floats v(static_cast<size_t>(n));
    m_backend.copy_to_host(*m_stream, v.data(), src, v.size());
    m_backend.synchronize(*m_stream);
    return v;
  }
  std::vector<nn::Tensor> input_tensors() const {
    std::vector<nn::Tensor> t;
    for (size_t i = 0; i < m_inputs.size(); ++i) t.push_back(m_inputs[i].view(m_input_shapes[i]));
    return t;
  }
  nn::Tensor output_tensor() const { return m_output.view(m_output_shape); }

  nn::Backend& m_backend;
  std::unique_ptr<nn::Stream> m_stream;
  std::unique_ptr<nn::Layer> m_layer;
  std::vector<nn::Shape> m_input_shapes;
  nn::Shape m_output_shape;
  std::vector<nn::ParamSpec> m_param_specs, m_state_specs;
  std::vector<nn::Buffer> m_params, m_grads, m_state, m_inputs, m_dinputs;
  nn::Buffer m_output, m_doutput;
};

// An independent reference forward: (inputs, params) -> output, all in double.
using NaiveForward = std::function<Doubles(const std::vector<Doubles>& inputs, const std::vector<Doubles>& params)>;

// |actual - expected| <= tol * (|expected| + floor), where the floor (1% of the largest
// expected magnitude, at least 1e-3) keeps near-zero entries from demanding exact zeros.
inline void require_close(const Floats& actual, const Doubles& expected, double tol, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  double largest = 0.0;
  for (double e : expected) largest = std::max(largest, std::abs(e));
  const double floor = std::max(1e-3, 0.01 * largest);
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (!(std::abs(a - e) <= tol * (std::abs(e) + floor))) {
      if (bad++ == 0) first_bad = i;
    }
  }
  INFO(what << ": " << bad << " of " << actual.size() << " entries off; first at " << first_bad << ": got "
            << (bad ? actual[first_bad] : 0.0f) << ", expected " << (bad ? expected[first_bad] : 0.0));
  REQUIRE(bad == 0);
}

struct GradientCheck {
  double forward_tol = 1e-4;
  double gradient_tol = 1e-3;
  double step = 1e-5;                     // finite-difference step (double precision)
  nn::RunMode mode{true, 7, 0};
  std::vector<bool> distinct_inputs;      // per input: use distinct_floats (max pool, relu)
  std::vector<Floats> params;             // per parameter: values to use (default U(-1, 1))
};

// Runs the layer forward and backward with L = sum(out * R), R random, and checks
//  - the float forward against the naive double forward;
//  - every input and parameter gradient against central differences of the naive forward.
inline void check_layer_gradients(nn::Backend& backend, std::unique_ptr<nn::Layer> layer,
                                  const std::vector<nn::Shape>& inputs, const NaiveForward& naive,
                                  const GradientCheck& opt = {}, uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  LayerRunner run(backend, std::move(layer), inputs);
  const std::string name = run.layer().type();

  std::vector<Doubles> x, p;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool distinct = i < opt.distinct_inputs.size() && opt.distinct_inputs[i];
    const Floats v = distinct ? distinct_floats(rng, inputs[i].numel()) : random_floats(rng, inputs[i].numel());
    run.set_input(i, v);
    x.push_back(to_doubles(v));
  }
  for (size_t i = 0; i < run.param_specs().size(); ++i) {
    const Floats v = i < opt.params.size() ? opt.params[i] : random_floats(rng, run.param_specs()[i].shape.numel());
    run.set_param(i, v);
    p.push_back(to_doubles(v));
  }

  const Floats y = run.forward(opt.mode);
  const Doubles y_ref = naive(x, p);
  REQUIRE(static_cast<int64_t>(y_ref.size()) == run.output_shape().numel());
  require_close(y, y_ref, opt.forward_tol * slack(), name + " forward");

  const Floats r = random_floats(rng, run.output_shape().numel());
  run.backward(r);

  auto loss = [&]() {
    const Doubles out = naive(x, p);
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * static_cast<double>(r[i]);
    return l;
  };
  auto numeric_gradient = [&](Doubles& v) {
    Doubles g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double saved = v[i];
      v[i] = saved + opt.step;
      const double up = loss();
      v[i] = saved - opt.step;
      const double down = loss();
      v[i] = saved;
      g[i] = (up - down) / (2.0 * opt.step);
    }
    return g;
  };
  for (size_t i = 0; i < x.size(); ++i)
    require_close(run.dinput(i), numeric_gradient(x[i]), opt.gradient_tol * slack(), name + " d(input " + std::to_string(i) + ")");
  for (size_t i = 0; i < p.size(); ++i)
    require_close(run.grad(i), numeric_gradient(p[i]), opt.gradient_tol * slack(), name + " d(" + run.param_specs()[i].name + ")");
}

}  // namespace squall::test
