#pragma once
// Batch norm over a split sample's group: the host's half of each pass, between the kernels'
// sums (cuda/batch_norm_group_ops.cuh) and the group's merge. Plain C++, shared by the plan
// (cuda/batch_norm_group.cpp) and the host emulator's tests, so that both run the same
// arithmetic; it follows the CPU's split batch norm (src/cpu/cpu_batch_norm.cpp).
#include <cmath>
#include <cstddef>
#include <string>

#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

// From the group's moments (count, mean, squared deviations per channel): p = mean, inv_std,
// scale, shift (c each), and the running statistics updated as PyTorch does (the unbiased
// variance). Returns the count per channel.
inline double bn_group_forward_params(const double* moments, size_t c, const float* gamma, const float* beta,
                                      float eps, float momentum, float* running_mean, float* running_var, float* p) {
  for (size_t ch = 0; ch < c; ++ch) {
    const double total = moments[3 * ch], mean = moments[3 * ch + 1], m2 = moments[3 * ch + 2];
    if (total < 2)
      throw Error("batch norm: training needs more than one value per channel over the split sample, got " +
                  std::to_string(static_cast<long long>(total)));
    const auto inv_std = static_cast<float>(1.0 / std::sqrt(m2 / total + eps));
    running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * (m2 / (total - 1.0)));
    p[ch] = static_cast<float>(mean);
    p[c + ch] = inv_std;
    p[2 * c + ch] = gamma[ch] * inv_std;
    p[3 * c + ch] = beta[ch] - p[ch] * p[2 * c + ch];
  }
  return c > 0 ? moments[0] : 0.0;
}

// Eval: p = mean, inv_std, scale, shift from the running statistics.
inline void bn_group_eval_params(size_t c, const float* gamma, const float* beta, float eps, const float* running_mean,
                                 const float* running_var, float* p) {
  for (size_t ch = 0; ch < c; ++ch) {
    const float inv_std = 1.0f / std::sqrt(running_var[ch] + eps);
    p[ch] = running_mean[ch];
    p[c + ch] = inv_std;
    p[2 * c + ch] = gamma[ch] * inv_std;
    p[3 * c + ch] = beta[ch] - running_mean[ch] * p[2 * c + ch];
  }
}

// Backward: `local` the tile's sums (sum dy [c], sum dy (x - mean) [c]), `group` the group's.
// dgamma and dbeta are the tile's share; p's k, mean_dy, mean_dy_xhat (p[4c...7c)) from the
// group's sums over `count` values per channel.
inline void bn_group_backward_params(const double* local, const double* group, double count, size_t c,
                                     const float* gamma, float* p, float* dgamma, float* dbeta) {
  for (size_t ch = 0; ch < c; ++ch) {
    const float inv_std = p[c + ch];
    dgamma[ch] = static_cast<float>(local[c + ch] * inv_std);
    dbeta[ch] = static_cast<float>(local[ch]);
    p[4 * c + ch] = gamma[ch] * inv_std;
    p[5 * c + ch] = static_cast<float>(group[ch] / count);
    p[6 * c + ch] = static_cast<float>(group[c + ch] * inv_std / count);
  }
}

// The doubles a kernel stored as float pairs (kernel_util.cuh's store_double: the value
// rounded to float, and the rest), `n` of them every `stride` floats from `first`.
inline void bn_group_read_doubles(const float* raw, size_t n, size_t stride, size_t first, double* out) {
  for (size_t i = 0; i < n; ++i) {
    const float* p = raw + i * stride + first;
    out[i] = static_cast<double>(p[0]) + static_cast<double>(p[1]);
  }
}

}  // namespace squall::cuda::kernels::detail
