#pragma once
// The group's sum over its learners and over the job (docs/design.md, "The learner group").
// One buffer in backend memory, [parameters or gradients | state | finite check], so that a
// synchronisation is one call of the allreduce:
//   level 1   add(): the learners' tensors summed into it on the group stream;
//   levels 2-4  start(range) hands a range to the job's allreduce, finish(range) takes the
//             result back. A backend whose memory the allreduce cannot read goes through a
//             pinned host mirror; parallel.comm_precision = bf16 puts gradients on the wire
//             in bf16 (the state and the check stay f32).
// The last float is the finite check of a gradient sum: every learner's sum of squares of
// its gradients, summed over the job with the gradients, so every rank reads the same
// verdict from the same bits.
#include <cstddef>
#include <functional>
#include <string>

#include "mpi/sum.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/replica_set.hpp"

namespace squall::parallel {

class FusedSum {
 public:
  using Ticket = mpi::Allreduce::Ticket;
  enum class Source { params, grads };
  // host_wait: how this object makes the host wait for the group stream (the group counts
  // and times them).
  FusedSum(nn::Backend& backend, nn::Stream& stream, mpi::Allreduce& reducer, size_t params, size_t state,
           bool bf16_gradients, bool several_ranks, std::function<void()> host_wait);

  float* data() { return m_fused.data(); }
  size_t params() const { return m_params; }
  size_t state() const { return m_state; }
  size_t check() const { return m_params + m_state; }  // the finite check's index
  mpi::Allreduce& reducer() { return m_reducer; }

  // Level 1, on the group stream (ordered after the learners' work by the caller):
  // [lo, hi) of the parameters or gradients, the state, the learners' sums of squares.
  void add(const ReplicaSet& replicas, Source source, size_t lo, size_t hi);
  void add_state(const ReplicaSet& replicas);
  void add_norms(const ReplicaSet& replicas);

  // Levels 2-4 of [lo, hi). stage() enqueues what must happen on the stream before the
  // allreduce may read the range (the bf16 conversion, the copy to the mirror); launch()
  // hands it over, once that work has completed or the allreduce orders itself after the
  // stream; start() is both, making the host wait between them when it must.
  void stage(size_t lo, size_t hi);
  bool needs_host_wait() const { return m_host != nullptr || !m_reducer.orders_after_stream(); }
  Ticket launch(size_t lo, size_t hi, const std::string& what);
  Ticket start(size_t lo, size_t hi, const std::string& what);
  // Instead of a host wait for sum `ticket`: the group stream's later work waits for it on
  // the device, where the allreduce can order the stream so (NCCL) and the sum went straight
  // from backend memory; false otherwise (the caller waits for it on the host).
  bool order_after(Ticket ticket);
  // After the sum of [lo, hi) has completed (or the stream has been ordered after it): its
  // result back into backend memory.
  void finish(size_t lo, size_t hi);
  // Every sum of the buffer's [0, end) over the job (end: check() + 1 for a gradient sum,
  // check() for a model sum); returns when it has completed.
  void reduce(size_t end, const std::string& what, bool gradients);
  // The finite check after a gradient sum has finished (or the stream has been ordered after
  // it); reads host memory where the sum ended there (the mirror, or a host-readable backend)
  // and otherwise copies it to pinned memory on the stream and waits for the stream: the
  // step's one host wait, which the losses' copies are behind too.
  float read_check();

 private:
  bool wire16(size_t lo, size_t hi) const { return m_fused16 && hi <= m_params; }
  // The group stream as the allreduce takes it (after_stream): the backend's native handle,
  // or the nn::Stream itself where there is none (a CPU test's device-like sum reads it).
  void* stream_handle() const;

  nn::Backend& m_backend;
  bool m_host_accessible;  // the backend's Capabilities::host_accessible, read once
  nn::Stream& m_stream;
  mpi::Allreduce& m_reducer;
  size_t m_params, m_state;
  std::function<void()> m_host_wait;
  nn::Buffer m_fused;                    // [params + state + 1]
  nn::Buffer m_fused_host;               // its pinned mirror (staged reductions) or empty
  float* m_host = nullptr;               // ... its data
  nn::Buffer m_fused16, m_fused16_host;  // bf16 gradients: fused[0:P) in bf16, and its mirror
  nn::Buffer m_check_host;               // the check, read back from device memory
};

}  // namespace squall::parallel
