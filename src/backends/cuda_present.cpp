// Built with the CUDA backend: the factory's CUDA entries are cuda/'s (cuda/cuda_factory.hpp).
#include "cuda/cuda_factory.hpp"
#include "src/backends/backends.hpp"

namespace squall::backends {

int cuda_device_count(std::string* why_none) { return cuda::device_count(why_none); }

std::unique_ptr<nn::Backend> make_cuda_backend(int device) { return cuda::make_backend(device); }

}  // namespace squall::backends
