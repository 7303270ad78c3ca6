#pragma once
// The data the allreduce tests sum: different values on every rank and element. Integers stay
// far from overflow; floats are smooth with a small integer part, and the integers in
// [-1000, 1000] that bf16 sums over a few ranks hold exactly. Also the element types' MPI and
// squall names, and a fingerprint of a buffer's bits.
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "mpi/sum.hpp"

namespace squall::test {

template <typename T>
std::vector<T> make_data(size_t count, int rank) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) {
    const auto x = static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) % 2001) - 1000;
    if constexpr (std::is_floating_point_v<T>)
      v[i] = static_cast<T>(std::sin(0.37 * static_cast<double>(i) + 1.3 * rank) * (1 + rank) +
                            1e-3 * static_cast<double>(x));
    else if constexpr (sizeof(T) == 8)
      v[i] = static_cast<T>(x * 1000003LL * 1000 + rank);
    else
      v[i] = static_cast<T>(x * 1000 + rank);
  }
  return v;
}

// Elements of a sum over n ranks that differ from MPI_Allreduce's: integers exactly, floats
// within a tolerance that grows with the ranks (the sums run in other orders).
template <typename T>
size_t count_wrong(const std::vector<T>& mine, const std::vector<T>& expected, int n) {
  size_t wrong = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      const double tol = (std::is_same_v<T, float> ? 1e-5 : 1e-13) * n * (n + 1);
      wrong += std::abs(static_cast<double>(mine[i]) - static_cast<double>(expected[i])) > tol;
    } else {
      wrong += mine[i] != expected[i];
    }
  }
  return wrong;
}

template <typename T>
MPI_Datatype mpi_type_of() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  if constexpr (std::is_same_v<T, int32_t>) return MPI_INT32_T;
  return MPI_INT64_T;
}

template <typename T>
mpi::DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return mpi::DType::f32;
  if constexpr (std::is_same_v<T, double>) return mpi::DType::f64;
  if constexpr (std::is_same_v<T, int32_t>) return mpi::DType::i32;
  return mpi::DType::i64;
}

// FNV-1a over the bytes: equal on every rank iff (almost surely) the bits are.
inline int64_t fingerprint(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

}  // namespace squall::test
