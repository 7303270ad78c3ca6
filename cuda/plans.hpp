#pragma once
// cuDNN and cuBLAS plans of the CUDA backend: the heavy layers. Each plan is made once per
// shape (descriptors, algorithm choice) and run every step on the stream it is given; the
// cuDNN workspace comes from that stream (CudaStream::workspace), so each learner has its
// own. Convolution algorithms are chosen once per (shape, direction) for the process and
// cached (find_*: benchmarked by cuDNN on first use), so a second learner with the same
// model reuses the first one's choice.
#include <memory>

#include "src/nn/backend.hpp"

namespace squall::cuda {

std::unique_ptr<nn::ConvPlan> make_cudnn_conv(const nn::ConvDesc& d);
std::unique_ptr<nn::PoolPlan> make_cudnn_pool(const nn::PoolDesc& d);
std::unique_ptr<nn::BatchNormPlan> make_cudnn_batch_norm(const nn::BatchNormDesc& d);
// Batch norm over a split sample's group (d.group): statistics merged on the host between the
// pass's halves (cuda/batch_norm_group.cpp).
std::unique_ptr<nn::BatchNormPlan> make_group_batch_norm(const nn::BatchNormDesc& d);
std::unique_ptr<nn::LinearPlan> make_cublas_linear(const nn::LinearDesc& d);

}  // namespace squall::cuda
