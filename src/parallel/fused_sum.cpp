// The group's fused sum (src/parallel/fused_sum.hpp).
#include "src/parallel/fused_sum.hpp"

namespace squall::parallel {

FusedSum::FusedSum(nn::Backend& backend, nn::Stream& stream, mpi::Allreduce& reducer, size_t params, size_t state,
                   bool bf16_gradients, bool several_ranks, std::function<void()> host_wait)
    : m_backend(backend),
      m_host_accessible(backend.capabilities().host_accessible),
      m_stream(stream),
      m_reducer(reducer),
      m_params(params),
      m_state(state),
      m_host_wait(std::move(host_wait)) {
  m_fused = backend.allocate(params + state + 1);
  // A device backend whose memory a plain MPI cannot read stages the sums through pinned host
  // memory (NCCL and the device hierarchy take device memory).
  if (!m_host_accessible && several_ranks && reducer.memory() != mpi::Memory::device) {
    m_fused_host = backend.allocate_host(params + state + 1, nn::DType::f32);
    m_host = m_fused_host.data();
  }
  if (bf16_gradients && several_ranks) {
    m_fused16 = backend.allocate(params, nn::DType::bf16);
    if (m_host) m_fused16_host = backend.allocate_host(params, nn::DType::bf16);
  }
  m_check_host = backend.allocate_host(1, nn::DType::f32);
}

void FusedSum::add(const ReplicaSet& replicas, Source source, size_t lo, size_t hi) {
  auto of = [&](const Learner& l) -> const float* {
    return (source == Source::grads ? l.graph->grads() : l.graph->read_params()) + lo;
  };
  float* out = m_fused.data() + lo;
  m_backend.copy(m_stream, out, of(replicas[0]), hi - lo);
  for (int j = 1; j < replicas.size(); ++j) nn::add(m_backend, m_stream, out, of(replicas[j]), out, hi - lo);
}

void FusedSum::add_state(const ReplicaSet& replicas) {
  float* out = m_fused.data() + m_params;
  m_backend.copy(m_stream, out, replicas[0].graph->state(), m_state);
  for (int j = 1; j < replicas.size(); ++j) nn::add(m_backend, m_stream, out, replicas[j].graph->state(), out, m_state);
}

void FusedSum::add_norms(const ReplicaSet& replicas) {
  float* out = m_fused.data() + check();
  m_backend.copy(m_stream, out, replicas[0].norm_dev.data(), 1);
  for (int j = 1; j < replicas.size(); ++j) nn::add(m_backend, m_stream, out, replicas[j].norm_dev.data(), out, 1);
}

void FusedSum::stage(size_t lo, size_t hi) {
  if (wire16(lo, hi)) {  // gradients in bf16 on the wire
    auto* g16 = m_fused16.as<uint16_t>() + lo;
    m_backend.convert(m_stream, m_fused.data() + lo, nn::DType::f32, g16, nn::DType::bf16, hi - lo);
    if (m_fused16_host)
      m_backend.copy_bytes_to_host(m_stream, m_fused16_host.as<uint16_t>() + lo, g16, (hi - lo) * sizeof(uint16_t));
    return;
  }
  if (m_host) m_backend.copy_to_host(m_stream, m_host + lo, m_fused.data() + lo, hi - lo);
}

void* FusedSum::stream_handle() const {
  void* native = m_stream.native_handle();
  return native != nullptr ? native : static_cast<void*>(&m_stream);
}

FusedSum::Ticket FusedSum::launch(size_t lo, size_t hi, const std::string& what) {
  if (wire16(lo, hi)) {
    void* g16 = m_fused16_host ? m_fused16_host.as<uint16_t>() + lo : m_fused16.as<uint16_t>() + lo;
    return m_reducer.start(g16, hi - lo, mpi::DType::bf16, what, stream_handle());
  }
  return m_reducer.start(m_host ? m_host + lo : m_fused.data() + lo, hi - lo, mpi::DType::f32, what, stream_handle());
}

bool FusedSum::order_after(Ticket ticket) {
  // A sum through the pinned mirror ends in host memory, which finish() copies back: the host
  // must see it complete first.
  return m_host == nullptr && m_reducer.order_stream_after(ticket, stream_handle());
}

FusedSum::Ticket FusedSum::start(size_t lo, size_t hi, const std::string& what) {
  stage(lo, hi);
  // An allreduce that orders its sum after the group stream (by an event) needs no wait; the
  // others read the memory at once, so the stream's work on it must be done (inline CPU
  // streams are done already; async ones and devices are not).
  if (needs_host_wait()) m_host_wait();
  return launch(lo, hi, what);
}

void FusedSum::finish(size_t lo, size_t hi) {
  if (wire16(lo, hi)) {
    auto* g16 = m_fused16.as<uint16_t>() + lo;
    if (m_fused16_host)
      m_backend.copy_bytes_from_host(m_stream, g16, m_fused16_host.as<uint16_t>() + lo, (hi - lo) * sizeof(uint16_t));
    m_backend.convert(m_stream, g16, nn::DType::bf16, m_fused.data() + lo, nn::DType::f32, hi - lo);
    return;
  }
  if (m_host) m_backend.copy_from_host(m_stream, m_fused.data() + lo, m_host + lo, hi - lo);
}

void FusedSum::reduce(size_t end, const std::string& what, bool gradients) {
  if (gradients && m_fused16) {  // two sums: the gradients in bf16, the state in f32
    const Ticket g = start(0, m_params, what);
    const Ticket s = start(m_params, end, what + " state");
    m_reducer.wait(g);
    m_reducer.wait(s);
    finish(0, m_params);
    finish(m_params, end);
  } else {
    m_reducer.wait(start(0, end, what));
    finish(0, end);
  }
}

float FusedSum::read_check() {
  if (m_host) return m_host[check()];
  if (m_host_accessible && m_reducer.ranks() > 1 && !m_reducer.orders_after_stream())
    return m_fused.data()[check()];  // the host allreduce wrote it in place
  m_backend.copy_to_host(m_stream, m_check_host.data(), m_fused.data() + check(), 1);
  m_host_wait();
  return m_check_host.data()[0];
}

}  // namespace squall::parallel
