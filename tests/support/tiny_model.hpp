#pragma once
// A tiny model whose gradient the tests can write down: flatten -> linear(4 -> 3) with a
// softmax cross-entropy loss, deterministic batches for every (rank, learner, step), and the
// helpers the learner tests (tests/unit, tests/mpi) share.
// The reference works in double on the flat parameter arena: the weight (3x4, row-major) at 0,
// the bias (3) at the next 256-byte boundary (src/nn/param_arena.hpp), zeros between and after.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/nn/graph.hpp"
#include "src/nn/layer.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/test_backend.hpp"

namespace squall::test {

inline constexpr int k_tiny_in = 4, k_tiny_out = 3;
inline constexpr size_t k_tiny_params = k_tiny_in * k_tiny_out + k_tiny_out;  // the model's parameters
inline constexpr size_t k_tiny_bias = nn::arena_aligned(k_tiny_in * k_tiny_out);  // the bias's arena offset
inline constexpr size_t k_tiny_arena = nn::arena_aligned(k_tiny_bias + k_tiny_out);  // the arena's floats

inline std::unique_ptr<nn::Graph> make_tiny_graph() {
  auto g = std::make_unique<nn::Graph>(nn::Shape(1, k_tiny_in, 1, 1));
  const int f = g->add("flatten", nn::flatten(), nn::Graph::k_input);
  const int fc = g->add("fc", nn::linear(k_tiny_out), f);
  g->set_output(fc);
  return g;
}

struct TinyBatch {
  std::vector<float> images;   // [b, 4]
  std::vector<int32_t> labels; // [b]
};

inline TinyBatch tiny_batch(int rank, int learner, int64_t step, int64_t batch) {
  TinyBatch t;
  for (int64_t i = 0; i < batch; ++i) {
    for (int k = 0; k < k_tiny_in; ++k)
      t.images.push_back(static_cast<float>(std::sin(0.7 * k + 1.3 * i + 2.9 * rank + 0.6 * learner + 0.37 * step)));
    t.labels.push_back(static_cast<int32_t>((rank * 7 + learner * 3 + step + i) % k_tiny_out));
  }
  return t;
}

// One rank's learner batches at a step, and the LearnerGroup inputs that point into them.
struct TinyStep {
  std::vector<TinyBatch> data;
  std::vector<parallel::LearnerBatch> inputs;
};

inline TinyStep tiny_step(int rank, int learners, int64_t step, int64_t batch) {
  TinyStep t;
  for (int j = 0; j < learners; ++j) t.data.push_back(tiny_batch(rank, j, step, batch));
  for (const auto& d : t.data) t.inputs.push_back({d.images.data(), d.labels.data()});
  return t;
}

// SGD without momentum or weight decay: the update the references write out.
inline optim::OptimizerConfig plain_sgd() {
  optim::OptimizerConfig o;
  o.name = optim::OptimizerKind::sgd;
  o.momentum = 0;
  o.weight_decay = 0;
  return o;
}

// n floats of memory of the backend under test, on the host (a copy when that is a GPU).
inline std::vector<float> on_host(const float* p, size_t n) {
  if constexpr (k_testing_gpu) return download(test_backend(), p, n);
  return std::vector<float>(p, p + n);
}

inline double max_diff(const float* got_mem, const std::vector<double>& want) {
  const std::vector<float> got = on_host(got_mem, want.size());
  double d = 0;
  for (size_t i = 0; i < want.size(); ++i) d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
  return d;
}

inline double max_diff(const float* a_mem, const float* b_mem, size_t n) {
  const std::vector<float> a = on_host(a_mem, n), b = on_host(b_mem, n);
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// d(mean softmax cross-entropy)/d(params) at `w` (arena layout) for one batch.
inline std::vector<double> tiny_gradient(const std::vector<double>& w, const TinyBatch& b) {
  const size_t n = b.labels.size();
  std::vector<double> g(k_tiny_arena, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double logits[k_tiny_out], p[k_tiny_out], mx = -1e300, sum = 0;
    for (int o = 0; o < k_tiny_out; ++o) {
      logits[o] = w[k_tiny_bias + o];
      for (int k = 0; k < k_tiny_in; ++k) logits[o] += w[o * k_tiny_in + k] * b.images[i * k_tiny_in + k];
      mx = std::max(mx, logits[o]);
    }
    for (int o = 0; o < k_tiny_out; ++o) sum += (p[o] = std::exp(logits[o] - mx));
    for (int o = 0; o < k_tiny_out; ++o) {
      const double d = (p[o] / sum - (o == b.labels[i] ? 1.0 : 0.0)) / static_cast<double>(n);
      for (int k = 0; k < k_tiny_in; ++k) g[o * k_tiny_in + k] += d * b.images[i * k_tiny_in + k];
      g[k_tiny_bias + o] += d;
    }
  }
  return g;
}

}  // namespace squall::test
