// Softmax cross-entropy and channel argmax. Logits are [n, classes, hw]: for a pixel the
// classes lie hw apart, so each thread takes a run of neighbouring pixels and the strided
// class reads of one pixel share cache lines with the next pixel's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

// The per-pixel loop of softmax_cross_entropy_f32: with the gradient (wt * softmax, minus wt
// at the label, into g; the caller then scales it), or without (evaluation reads the loss
// only). The loss terms are the same arithmetic in both, so the same sums.
template <bool Gradient>
void cross_entropy_pixels(const float* logits, const int32_t* labels, const float* class_weights, int64_t pixels,
                          int64_t classes, int64_t hw, float* dlogits, double& loss_sum_out, double& weight_sum_out,
                          int64_t& bad_label_out) {
  double loss_sum = 0.0, weight_sum = 0.0;
  int64_t bad_label = -1;  // a pixel whose label is >= classes (reported after the loop)
#pragma omp parallel for if (pixels * classes >= k_parallel_min) schedule(static) \
    reduction(+ : loss_sum, weight_sum) reduction(max : bad_label)
  for (int64_t pix = 0; pix < pixels; ++pix) {
    const int64_t i = pix / hw, p = pix % hw;
    const float* x = logits + i * classes * hw + p;
    [[maybe_unused]] float* g = nullptr;
    if constexpr (Gradient) g = dlogits + i * classes * hw + p;
    const int32_t label = labels[pix];
    if (label < 0 || label >= classes) {
      if constexpr (Gradient)
        for (int64_t c = 0; c < classes; ++c) g[c * hw] = 0.0f;
      if (label >= classes) bad_label = std::max(bad_label, pix);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, x[c * hw]);
    float sum = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      const float e = std::exp(x[c * hw] - mx);
      if constexpr (Gradient) g[c * hw] = e;
      sum += e;
    }
    const float wt = class_weights ? class_weights[label] : 1.0f;
    if constexpr (Gradient) {
      const float inv = wt / sum;
      for (int64_t c = 0; c < classes; ++c) g[c * hw] *= inv;  // wt * softmax
      g[label * hw] -= wt;
    }
    loss_sum += static_cast<double>(wt) * (static_cast<double>(std::log(sum)) + mx - x[label * hw]);
    weight_sum += wt;
  }
  loss_sum_out = loss_sum;
  weight_sum_out = weight_sum;
  bad_label_out = bad_label;
}

}  // namespace

// Matches torch.nn.CrossEntropyLoss(weight=w, ignore_index=<negative>, reduction='mean'):
// loss = sum_i w[y_i] * -log softmax(x_i)[y_i] / sum_i w[y_i] over the pixels not ignored.
// When every label is ignored the weight sum is 0; PyTorch returns NaN there, we return a
// zero loss and zero gradient so that one empty batch does not poison the weights. A null
// dlogits: the loss alone (Capabilities::loss_without_gradient).
void CpuBackend::softmax_cross_entropy_f32(Stream&, const float* logits, const int32_t* labels,
                                       const float* class_weights, int64_t n, int64_t classes, int64_t hw,
                                       float* dlogits, float* loss, const float* grad_scale) {
  if (classes <= 0 || hw <= 0 || n < 0)
    throw Error("softmax_cross_entropy: bad shape n=" + std::to_string(n) + " classes=" +
                std::to_string(classes) + " hw=" + std::to_string(hw));
  const int64_t pixels = n * hw;
  double loss_sum = 0.0, weight_sum = 0.0;
  int64_t bad_label = -1;
  if (dlogits != nullptr)
    cross_entropy_pixels<true>(logits, labels, class_weights, pixels, classes, hw, dlogits, loss_sum, weight_sum,
                               bad_label);
  else
    cross_entropy_pixels<false>(logits, labels, class_weights, pixels, classes, hw, nullptr, loss_sum, weight_sum,
                                bad_label);
  if (bad_label >= 0)
    throw Error("softmax_cross_entropy: label " + std::to_string(labels[bad_label]) + " at position " +
                std::to_string(bad_label) + " is outside [0, " + std::to_string(classes) + ")");
  if (dlogits != nullptr) {
    const float inv_w =
        weight_sum != 0.0 ? static_cast<float>(1.0 / weight_sum) * (grad_scale ? *grad_scale : 1.0f) : 0.0f;
    const int64_t total = pixels * classes;
#pragma omp parallel for simd if (total >= k_parallel_min) schedule(static)
    for (int64_t j = 0; j < total; ++j) dlogits[j] *= inv_w;
  }
  *loss = weight_sum != 0.0 ? static_cast<float>(loss_sum / weight_sum) : 0.0f;
}

// Ties go to the lowest class index, as torch.argmax does.
void CpuBackend::argmax_channels_f32(Stream&, const float* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  const int64_t pixels = n * hw;
#pragma omp parallel for if (pixels * c >= k_parallel_min) schedule(static)
  for (int64_t pix = 0; pix < pixels; ++pix) {
    const int64_t i = pix / hw, p = pix % hw;
    const float* v = x + i * c * hw + p;
    int32_t best = 0;
    float best_v = v[0];
    for (int64_t k = 1; k < c; ++k)
      if (v[k * hw] > best_v) {
        best_v = v[k * hw];
        best = static_cast<int32_t>(k);
      }
    out[pix] = best;
  }
}

void CpuBackend::accumulate_confusion(Stream& s, const int32_t* labels, const int32_t* pred, size_t n,
                                      int64_t classes, int32_t* confusion) {
  run_on(s, [=, this, &s] {
    for (size_t i = 0; i < n; ++i) {
      const int64_t y = labels[i], p = pred[i];
      if (y < 0 || y >= classes || p < 0 || p >= classes) continue;
      ++confusion[y * classes + p];
    }
  });
}

}  // namespace squall::cpu
