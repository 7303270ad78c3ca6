#pragma once
// The sums over the job's ranks that a learner group hands its fused buffer to.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mpi/allreduce.hpp"
#include "mpi/device_allreduce.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall::train {

// Sums float buffers (backend memory) over every rank of the job, in place. Nonblocking:
// start() hands a buffer over and returns a ticket, test() drives every sum in flight and says
// whether one has completed, wait() blocks until it has. Collective: every rank starts the same
// sums (count) in the same order; the buffer is not touched until its sum has completed.
class Reducer {
 public:
  using Ticket = int64_t;
  virtual ~Reducer() = default;
  // f32 sums, and bf16 ones (parallel.comm_precision = bf16: gradients on the wire in half
  // the bytes) where the Reducer supports them.
  virtual Ticket start(void* data, size_t count, mpi::DType type, std::string_view what) = 0;
  Ticket start(float* data, size_t count, std::string_view what) { return start(data, count, mpi::DType::f32, what); }
  virtual bool test(Ticket ticket) = 0;
  virtual void wait(Ticket ticket) = 0;
  virtual int ranks() const = 0;
  // Whether start() takes backend memory of a device backend directly (NCCL); otherwise the
  // group hands it host memory (a pinned mirror) when the backend's is not host-readable.
  virtual bool takes_device_memory() const { return false; }
  // The stream whose work writes the buffers handed to start() (the group's). A Reducer that
  // orders its sums after that work itself (orders_after_stream) spares the caller a host
  // wait before each start(); the others need the data complete when start() is called.
  virtual void bind_stream(nn::Stream&) {}
  virtual bool orders_after_stream() const { return false; }
  void sum(float* data, size_t count, std::string_view what) { wait(start(data, count, what)); }
};

// The job is this one rank: nothing to add, every sum is complete at once.
class SingleRankReducer final : public Reducer {
 public:
  using Reducer::start;
  Ticket start(void*, size_t, mpi::DType, std::string_view) override { return ++m_started; }
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}
  int ranks() const override { return 1; }

 private:
  Ticket m_started = 0;
};

// The Reducer of a job of several ranks: levels 2-4 of the hierarchical allreduce.
class AllreduceReducer final : public Reducer {
 public:
  AllreduceReducer(mpi::HierAllreduce& allreduce, int ranks) : m_allreduce(allreduce), m_ranks(ranks) {}
  using Reducer::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view what) override {
    return m_allreduce.start(data, count, type, what);
  }
  bool test(Ticket ticket) override { return m_allreduce.test(ticket); }
  void wait(Ticket ticket) override { m_allreduce.wait(ticket); }
  int ranks() const override { return m_ranks; }

 private:
  mpi::HierAllreduce& m_allreduce;
  int m_ranks;
};

// The Reducer of a CUDA job whose sums stay on the GPU (parallel.device_allreduce: NCCL, or
// NCCL inside the node and MPI across). A sum is ordered after the group stream's work on
// the buffer by an event (bind_stream), not by a host wait; nccl sums run while the host
// hands over the next buckets, device-hier's complete inside start().
class DeviceReducer final : public Reducer {
 public:
  DeviceReducer(mpi::DeviceAllreduce& allreduce, int ranks) : m_allreduce(allreduce), m_ranks(ranks) {}
  using Reducer::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view what) override {
    if (type != mpi::DType::f32)
      throw Error("the device allreduce sums f32 only (parallel.comm_precision = bf16 needs parallel.device_allreduce = host)");
    return m_allreduce.start(static_cast<float*>(data), count, what, m_after);
  }
  bool test(Ticket ticket) override { return m_allreduce.test(ticket); }
  void wait(Ticket ticket) override { m_allreduce.wait(ticket); }
  int ranks() const override { return m_ranks; }
  bool takes_device_memory() const override { return true; }
  void bind_stream(nn::Stream& stream) override { m_after = stream.native_handle(); }
  bool orders_after_stream() const override { return true; }

 private:
  mpi::DeviceAllreduce& m_allreduce;
  int m_ranks;
  void* m_after = nullptr;
};

}  // namespace squall::train
