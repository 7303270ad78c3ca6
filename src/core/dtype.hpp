#pragma once
// The element types of the project: backend memory (nn::DType) and the buffers the
// allreduce sums (mpi::DType) are both this enum. The numeric codes of f32, bf16 and f16 are
// the dtype codes the CUDA kernels take (cuda/kernels.cuh): never renumber them.
#include <cstddef>
#include <cstdint>

namespace squall {

// f32, f64: IEEE binary32/64; bf16: bfloat16 (the top half of an f32); f16: IEEE binary16;
// i32, i64: two's-complement integers.
enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i32 = 3, f64 = 4, i64 = 5 };

size_t dtype_size(DType t);       // bytes per element
const char* dtype_name(DType t);  // "f32" | "bf16" | "f16" | "i32" | "f64" | "i64"

}  // namespace squall
