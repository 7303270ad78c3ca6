#pragma once
// A sum over the ranks of one node only (docs/training.md, "Averaging by level"): the
// node-level average of parallel.periods = [inside, across]. It runs on its own duplicate of
// the node communicator (mpi/topology.hpp), so it never mixes with the job's sums, and is a
// reduce to the node's first rank followed by a broadcast: every rank of the node ends with
// the very same bits (the node's central model must be identical on all of them), whatever
// algorithm the MPI library would pick for an allreduce. Sums are blocking (start() returns
// a completed ticket): inside a node the links are fast and the node sum is short.
#include <memory>
#include <string>

#include "mpi/comm.hpp"
#include "mpi/sum.hpp"

namespace squall::mpi {

class Topology;

class NodeAllreduce final : public Allreduce {
 public:
  // Collective over the world communicator (duplicates every node's communicator).
  explicit NodeAllreduce(const Topology& topo);

  using Allreduce::start;
  Ticket start(void* data, size_t count, DType type, std::string_view what = "node sum",
               void* after_stream = nullptr) override;
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}
  int ranks() const override { return m_node.size(); }  // the ranks of this node
  bool takes(DType type) const override { return type == DType::f32 || type == DType::f64; }
  std::string mode() const override { return "node (reduce + broadcast)"; }

 private:
  Communicator m_node;
  Ticket m_started = 0;
};

// The node's sum for a job: a NodeAllreduce, its sums compared across the node's ranks when
// options.check_sums or SQUALL_CHECK_SUMS asks (mpi/sum_check.hpp). Every rank of the job
// calls it (collective over each node).
std::unique_ptr<Allreduce> make_node_allreduce(const Topology& topo, const AllreduceOptions& options);

}  // namespace squall::mpi
