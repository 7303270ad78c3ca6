#pragma once
// Synchronous model averaging's coefficients, and the settings that cannot be stable
// (docs/training.md, "SMA at any scale").
#include <cstdint>
#include <string>

namespace squall::parallel {

// SMA's coefficients for a job of `job_learners` learners: alpha, the pull of each learner
// towards the central model; beta, how far the central model moves towards the learners' mean
// at a synchronisation (centre_rate, or min(alpha L, 1) when centre_rate is 0); mu, the
// central model's momentum. The trainer and the stability tests use this one function.
struct SmaCoefficients {
  double alpha = 0, beta = 0, mu = 0;
};
SmaCoefficients sma_coefficients(double alpha, double centre_rate, double momentum, int64_t job_learners);

// Why an SMA setting cannot be stable, or "" when it can: alpha must be in (0, 1] (0 leaves the
// learners unpulled and the centre unmoved), mu in [0, 1), and the centre's update
// z' = z + beta (m - z) + mu (z - z_prev) converges only for 0 < beta < 2 (1 + mu). The text
// names them as the learner group's options do (alpha, centre_rate, momentum, algorithm), each
// after `prefix`: the config passes its section ("parallel.") to name its keys.
std::string sma_instability(double alpha, double centre_rate, double momentum, const std::string& prefix = "");

}  // namespace squall::parallel
