#pragma once
// fill: sets n floats to a value on a stream. The first kernel of the backend; also what
// the gpu smoke test checks against the CPU.
#include <cstddef>
#include <cuda_runtime.h>

namespace squall::cuda {
void fill(float* dst, size_t n, float value, cudaStream_t stream);
}
