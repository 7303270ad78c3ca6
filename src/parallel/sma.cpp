#include "src/parallel/sma.hpp"

#include <algorithm>
#include <cstdio>

namespace squall::parallel {

SmaCoefficients sma_coefficients(double alpha, double centre_rate, double momentum, int64_t job_learners) {
  SmaCoefficients c;
  c.alpha = alpha;
  c.mu = momentum;
  c.beta = centre_rate > 0 ? centre_rate : std::min(alpha * static_cast<double>(std::max<int64_t>(job_learners, 1)), 1.0);
  return c;
}

std::string sma_instability(double alpha, double centre_rate, double momentum) {
  auto show = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%g", v);
    return std::string(b);
  };
  if (!(alpha > 0 && alpha <= 1))
    return "parallel.alpha = " + show(alpha) + " must be in (0, 1] with parallel.algorithm = \"sma\"" +
           (alpha == 0 ? ": 0 leaves the learners unpulled and the central model where it started, so the run "
                         "would evaluate the initial model"
                       : "");
  if (!(momentum >= 0 && momentum < 1))
    return "parallel.momentum = " + show(momentum) + " must be in [0, 1): the central model's momentum";
  if (centre_rate < 0 || centre_rate >= 2 * (1 + momentum))
    return "parallel.centre_rate = " + show(centre_rate) + " with parallel.momentum = " + show(momentum) +
           " is unstable by construction: the central model's update converges only for 0 < centre_rate < 2 (1 + "
           "momentum) = " + show(2 * (1 + momentum)) + " (0 picks min(parallel.alpha x learners, 1))";
  return "";
}

}  // namespace squall::parallel
