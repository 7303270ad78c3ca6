// The node-only sum (mpi/node_sum.hpp).
#include "mpi/node_sum.hpp"

#include <algorithm>
#include <cstddef>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "mpi/wire_native.hpp"

namespace squall::mpi {

NodeAllreduce::NodeAllreduce(const Topology& topo) : m_node(topo.node_comm().split(0, topo.local_rank())) {}

Allreduce::Ticket NodeAllreduce::start(void* data, size_t count, DType type, std::string_view, void*) {
  check_type(type);
  ++m_started;
  if (m_node.size() == 1 || count == 0) return m_started;
  const MPI_Comm comm = native_handle(m_node);
  const bool root = m_node.rank() == 0;
  auto* bytes = static_cast<std::byte*>(data);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, wire::k_max_call_elements);
    void* at = bytes + done * dtype_size(type);
    SQUALL_MPI_CHECK(MPI_Reduce(root ? MPI_IN_PLACE : at, root ? at : nullptr, static_cast<int>(n),
                                wire::mpi_type(type), wire::sum_op(type), 0, comm));
    SQUALL_MPI_CHECK(MPI_Bcast(at, static_cast<int>(n), wire::mpi_type(type), 0, comm));
    done += n;
  }
  return m_started;
}

std::unique_ptr<Allreduce> make_node_allreduce(const Topology& topo, const AllreduceOptions& options) {
  return with_sum_check(std::make_unique<NodeAllreduce>(topo), topo.node_comm(), options,
                        "node " + std::to_string(topo.node()));
}

}  // namespace squall::mpi
