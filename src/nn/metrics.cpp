#include "src/nn/metrics.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "src/core/error.hpp"

namespace squall::nn {

ConfusionMatrix::ConfusionMatrix(int64_t classes) : m_classes(classes) {
  if (classes <= 0) throw Error("confusion matrix needs at least one class (got " + std::to_string(classes) + ")");
  m_counts.assign(static_cast<size_t>(classes * classes), 0);
}

void ConfusionMatrix::add(std::span<const int32_t> predictions, std::span<const int32_t> labels) {
  if (predictions.size() != labels.size())
    throw Error("confusion matrix: " + std::to_string(predictions.size()) + " predictions for " +
                std::to_string(labels.size()) + " labels");
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t l = labels[i], p = predictions[i];
    if (l < 0) continue;
    if (l >= m_classes || p < 0 || p >= m_classes)
      throw Error("confusion matrix: element " + std::to_string(i) + " has label " + std::to_string(l) +
                  " and prediction " + std::to_string(p) + ", outside [0, " + std::to_string(m_classes) + ")");
    ++m_counts[static_cast<size_t>(l * m_classes + p)];
  }
}

void ConfusionMatrix::merge(const ConfusionMatrix& other) {
  if (other.m_classes != m_classes)
    throw Error("confusion matrix: cannot merge " + std::to_string(other.m_classes) + " classes into " +
                std::to_string(m_classes));
  for (size_t i = 0; i < m_counts.size(); ++i) m_counts[i] += other.m_counts[i];
}

void ConfusionMatrix::reset() { std::fill(m_counts.begin(), m_counts.end(), 0); }

int64_t ConfusionMatrix::total() const {
  int64_t t = 0;
  for (const int64_t c : m_counts) t += c;
  return t;
}

double ConfusionMatrix::accuracy() const {
  const int64_t t = total();
  if (t == 0) return 0.0;
  int64_t diag = 0;
  for (int64_t c = 0; c < m_classes; ++c) diag += at(c, c);
  return static_cast<double>(diag) / static_cast<double>(t);
}

std::vector<double> ConfusionMatrix::iou_per_class() const {
  std::vector<double> iou(static_cast<size_t>(m_classes));
  for (int64_t c = 0; c < m_classes; ++c) {
    int64_t row = 0, col = 0;  // row: labelled c (TP + FN); col: predicted c (TP + FP)
    for (int64_t k = 0; k < m_classes; ++k) row += at(c, k), col += at(k, c);
    const int64_t tp = at(c, c);
    const int64_t uni = row + col - tp;
    iou[static_cast<size_t>(c)] =
        uni > 0 ? static_cast<double>(tp) / static_cast<double>(uni) : std::numeric_limits<double>::quiet_NaN();
  }
  return iou;
}

double ConfusionMatrix::mean_iou() const {
  double sum = 0;
  int64_t n = 0;
  for (const double v : iou_per_class())
    if (!std::isnan(v)) sum += v, ++n;
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace squall::nn
