#pragma once
// Evaluation metrics: a confusion matrix accumulated batch by batch (and summed across ranks
// through counts()), accuracy, per-class and mean IoU, and a running mean for the loss.
//
// IoU of class c = TP / (TP + FP + FN). A class absent from both the predictions and the
// labels (TP + FP + FN = 0) has no defined IoU: iou_per_class() reports NaN for it and
// mean_iou() averages over the other classes only; docs/metrics.md explains why.
// Labels < 0 are "ignore" pixels and are not counted at all.
#include <cstdint>
#include <span>
#include <vector>

namespace squall::nn {

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t classes);

  // Counts one (label, prediction) pair per element. A label < 0 is skipped; a label or a
  // prediction >= classes (or a prediction < 0 for a counted label) throws squall::Error.
  void add(std::span<const int32_t> predictions, std::span<const int32_t> labels);
  void merge(const ConfusionMatrix& other);  // same class count
  void reset();

  int64_t classes() const { return m_classes; }
  int64_t at(int64_t label, int64_t prediction) const { return m_counts[static_cast<size_t>(label * m_classes + prediction)]; }
  // Row-major [label][prediction]: allreduce these (as int64 sums) to combine ranks.
  std::span<int64_t> counts() { return m_counts; }
  std::span<const int64_t> counts() const { return m_counts; }
  int64_t total() const;  // counted elements

  double accuracy() const;                 // trace / total; 0 when nothing was counted
  std::vector<double> iou_per_class() const;  // NaN for classes absent from labels and predictions
  double mean_iou() const;                 // mean over the classes with a defined IoU; 0 when none

 private:
  int64_t m_classes;
  std::vector<int64_t> m_counts;
};

// Weighted running mean (weight = samples in the batch, so the epoch loss is per sample).
class RunningMean {
 public:
  void add(double value, double weight = 1.0) { m_sum += value * weight; m_weight += weight; }
  double mean() const { return m_weight > 0 ? m_sum / m_weight : 0.0; }
  double weight() const { return m_weight; }
  void reset() { m_sum = 0; m_weight = 0; }
  // The exact state, for checkpoints.
  double sum() const { return m_sum; }
  void restore(double sum, double weight) { m_sum = sum; m_weight = weight; }

 private:
  double m_sum = 0, m_weight = 0;
};

}  // namespace squall::nn
