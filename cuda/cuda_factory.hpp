#pragma once
// The CUDA backend's entry points, without a CUDA header: src/backends (the factory) includes
// this, so that nothing above cuda/ needs the toolkit's headers to pick it.
#include <memory>
#include <string>

#include "src/nn/backend.hpp"

namespace squall::cuda {

// The GPUs this process can use; 0 with the reason in *why_none (no driver, no device).
int device_count(std::string* why_none = nullptr);
// The backend on visible device `device`; throws squall::Error when there is none.
std::unique_ptr<nn::Backend> make_backend(int device);

}  // namespace squall::cuda
