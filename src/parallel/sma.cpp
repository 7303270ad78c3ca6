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

std::string sma_instability(double alpha, double centre_rate, double momentum, const std::string& prefix) {
  auto show = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%g", v);
    return std::string(b);
  };
  const std::string a = prefix + "alpha", mu = prefix + "momentum", beta = prefix + "centre_rate";
  if (!(alpha > 0 && alpha <= 1))
    return a + " = " + show(alpha) + " must be in (0, 1] with " + prefix + "algorithm = \"sma\"" +
           (alpha == 0 ? ": 0 leaves the learners unpulled and the central model where it started, so the run "
                         "would evaluate the initial model"
                       : "");
  if (!(momentum >= 0 && momentum < 1))
    return mu + " = " + show(momentum) + " must be in [0, 1): the central model's momentum";
  if (centre_rate < 0 || centre_rate >= 2 * (1 + momentum))
    return beta + " = " + show(centre_rate) + " with " + mu + " = " + show(momentum) +
           " is unstable by construction: the central model's update converges only for 0 < centre_rate < 2 (1 + "
           "momentum) = " + show(2 * (1 + momentum)) + " (0 picks min(" + a + " x learners, 1))";
  return "";
}

}  // namespace squall::parallel
