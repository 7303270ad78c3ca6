// Confusion matrix, accuracy, IoU (absent classes excluded from the mean) and running mean.
#include <catch2/catch.hpp>

#include <cmath>

#include "src/core/error.hpp"
#include "src/nn/metrics.hpp"

using squall::nn::ConfusionMatrix;
using squall::nn::RunningMean;

TEST_CASE("confusion matrix counts pairs and skips ignored labels", "[metrics]") {
  ConfusionMatrix cm(3);
  const std::vector<int32_t> pred = {0, 1, 1, 2, 0, 2, 1};
  const std::vector<int32_t> label = {0, 1, 2, 2, -1, 2, 0};
  cm.add(pred, label);
  CHECK(cm.total() == 6);
  CHECK(cm.at(0, 0) == 1);
  CHECK(cm.at(1, 1) == 1);
  CHECK(cm.at(2, 1) == 1);
  CHECK(cm.at(2, 2) == 2);
  CHECK(cm.at(0, 1) == 1);
  CHECK(cm.accuracy() == Approx(4.0 / 6.0));
  // class 0: TP 1, FN 1 (0->1), FP 0        -> 1/2
  // class 1: TP 1, FN 0, FP 2 (2->1, 0->1)  -> 1/3
  // class 2: TP 2, FN 1 (2->1), FP 0        -> 2/3
  const auto iou = cm.iou_per_class();
  CHECK(iou[0] == Approx(0.5));
  CHECK(iou[1] == Approx(1.0 / 3.0));
  CHECK(iou[2] == Approx(2.0 / 3.0));
  CHECK(cm.mean_iou() == Approx((0.5 + 1.0 / 3.0 + 2.0 / 3.0) / 3.0));
}

TEST_CASE("a class absent from labels and predictions is left out of the mean IoU", "[metrics]") {
  ConfusionMatrix cm(4);
  cm.add(std::vector<int32_t>{0, 0, 1, 1}, std::vector<int32_t>{0, 1, 1, 1});
  const auto iou = cm.iou_per_class();
  CHECK(iou[0] == Approx(0.5));
  CHECK(iou[1] == Approx(2.0 / 3.0));
  CHECK(std::isnan(iou[2]));
  CHECK(std::isnan(iou[3]));
  CHECK(cm.mean_iou() == Approx((0.5 + 2.0 / 3.0) / 2.0));
  // A class predicted but never labelled has IoU 0 and does count.
  cm.add(std::vector<int32_t>{3}, std::vector<int32_t>{0});
  CHECK(cm.iou_per_class()[3] == 0.0);
  CHECK(cm.mean_iou() == Approx((1.0 / 3.0 + 2.0 / 3.0 + 0.0) / 3.0));
}

TEST_CASE("merge, reset and bad input", "[metrics]") {
  ConfusionMatrix a(2), b(2);
  a.add(std::vector<int32_t>{0, 1}, std::vector<int32_t>{0, 0});
  b.add(std::vector<int32_t>{1}, std::vector<int32_t>{1});
  a.merge(b);
  CHECK(a.total() == 3);
  CHECK(a.accuracy() == Approx(2.0 / 3.0));
  CHECK(a.counts().size() == 4);
  a.reset();
  CHECK(a.total() == 0);
  CHECK(a.accuracy() == 0.0);
  CHECK(a.mean_iou() == 0.0);
  CHECK_THROWS_AS(a.add(std::vector<int32_t>{0}, std::vector<int32_t>{2}), squall::Error);
  CHECK_THROWS_AS(a.add(std::vector<int32_t>{5}, std::vector<int32_t>{0}), squall::Error);
  CHECK_THROWS_AS(a.add(std::vector<int32_t>{0, 1}, std::vector<int32_t>{0}), squall::Error);
  CHECK_THROWS_AS(a.merge(ConfusionMatrix(3)), squall::Error);
  CHECK_THROWS_AS(ConfusionMatrix(0), squall::Error);
}

TEST_CASE("running mean is weighted", "[metrics]") {
  RunningMean m;
  CHECK(m.mean() == 0.0);
  m.add(1.0, 3);
  m.add(3.0, 1);
  CHECK(m.mean() == Approx(1.5));
  CHECK(m.weight() == 4.0);
  m.reset();
  m.add(2.0);
  CHECK(m.mean() == 2.0);
}
