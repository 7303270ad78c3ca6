// Element types on the wire: MPI datatypes, the bf16 sum operation, the plain MPI_Allreduce
// (the reference and the benchmark's baseline), and the polite wait of every host sum.
#include "mpi/wire_native.hpp"

#include "src/core/numeric.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "mpi/wire.hpp"
#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "src/core/error.hpp"

namespace squall::mpi::wire {
namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

MPI_Datatype bf16_type() {
  static const MPI_Datatype t = [] {
    MPI_Datatype d;
    SQUALL_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &d));
    SQUALL_MPI_CHECK(MPI_Type_commit(&d));
    return d;
  }();
  return t;
}

}  // namespace

MPI_Op sum_op(DType type) {
  if (type != DType::bf16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op o;
    SQUALL_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &o));
    return o;
  }();
  return op;
}

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::bf16: return bf16_type();
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::f16: break;
  }
  throw Error(std::string("the host allreduce does not sum ") + dtype_name(type) + " elements");
}

void Waiter::idle() {
  const auto now = Clock::now();
  if (!m_waiting) {
    m_waiting = true;
    m_since = now;
    return;
  }
  const double waited = std::chrono::duration<double>(now - m_since).count();
  if (waited < 20e-6) return;
  if (waited < 1.0)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace squall::mpi::wire

namespace squall::mpi {

void plain_allreduce_sum(const Communicator& comm, void* data, size_t count, DType type) {
  auto* bytes = static_cast<std::byte*>(data);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, wire::k_max_call_elements);
    SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * dtype_size(type), static_cast<int>(n),
                                   wire::mpi_type(type), wire::sum_op(type), native_handle(comm)));
    done += n;
  }
}

}  // namespace squall::mpi
