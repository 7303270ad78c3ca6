#pragma once
// A group of ranks as threads of one process, for the tests of split samples
// (src/nn/spatial.hpp): the halo messages go through a shared mailbox, the gathers through a
// barrier. Every call is logged per rank (its kind, tag and size), so that a test can check
// that every rank made the same collectives in the same order.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/device.hpp"
#include "src/nn/spatial.hpp"

namespace squall::testing {

class ThreadTileHub {
 public:
  explicit ThreadTileHub(int64_t size) : m_size(size), m_slots(static_cast<size_t>(size)) {}
  int64_t size() const { return m_size; }
  size_t posted_bytes = 0;  // every halo message's bytes so far (under the hub's lock)

  void post(int64_t from, int64_t to, int64_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_mutex);
    auto& box = m_mail[{from, to, tag}];
    if (!box.empty()) throw Error("thread tile hub: a second message from " + std::to_string(from) + " to " +
                                  std::to_string(to) + " with tag " + std::to_string(tag) + " before the first was read");
    const auto* p = static_cast<const char*>(data);
    box.assign(p, p + bytes);
    if (bytes == 0) box.push_back(0);  // present, if empty
    posted_bytes += bytes;
    m_cv.notify_all();
  }

  // Waits (at most a minute: a test must not hang) for the message, copies it out and drops it.
  void take(int64_t from, int64_t to, int64_t tag, void* data, size_t bytes) {
    std::unique_lock<std::mutex> lock(m_mutex);
    const auto key = std::make_tuple(from, to, tag);
    if (!m_cv.wait_for(lock, std::chrono::minutes(1), [&] { return m_mail.count(key) != 0; }))
      throw Error("thread tile hub: rank " + std::to_string(to) + " waited a minute for tag " + std::to_string(tag) +
                  " from rank " + std::to_string(from));
    auto& box = m_mail[key];
    if (box.size() != std::max<size_t>(bytes, 1) && !(bytes == 0 && box.size() == 1))
      throw Error("thread tile hub: tag " + std::to_string(tag) + " from rank " + std::to_string(from) + " carries " +
                  std::to_string(box.size()) + " bytes, rank " + std::to_string(to) + " expects " +
                  std::to_string(bytes));
    if (bytes > 0) std::memcpy(data, box.data(), bytes);
    m_mail.erase(key);
  }

  // Messages matched by their order between a pair of ranks, not by tags (NCCL's send and
  // receive): a queue per sender and receiver.
  void post_in_order(int64_t from, int64_t to, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_mutex);
    const auto* p = static_cast<const char*>(data);
    m_queues[{from, to}].emplace_back(p, p + bytes);
    posted_bytes += bytes;
    m_cv.notify_all();
  }
  // Waits (at most a minute) for the next message from `from` to `to`; its size must be the
  // receive's (NCCL's would hang or fail on a mismatch).
  void take_in_order(int64_t from, int64_t to, void* data, size_t bytes) {
    std::unique_lock<std::mutex> lock(m_mutex);
    auto& queue = m_queues[{from, to}];
    if (!m_cv.wait_for(lock, std::chrono::minutes(1), [&] { return !queue.empty(); }))
      throw Error("thread tile hub: rank " + std::to_string(to) + " waited a minute for the next message from rank " +
                  std::to_string(from));
    const std::vector<char>& m = queue.front();
    if (m.size() != bytes)
      throw Error("thread tile hub: the next message from rank " + std::to_string(from) + " to rank " +
                  std::to_string(to) + " carries " + std::to_string(m.size()) + " bytes, the receive expects " +
                  std::to_string(bytes) + " (the ranks posted their messages in different orders)");
    if (bytes > 0) std::memcpy(data, m.data(), bytes);
    queue.pop_front();
  }

  void gather(int64_t rank, const double* mine, size_t n, double* all) {
    std::unique_lock<std::mutex> lock(m_mutex);
    const uint64_t generation = m_generation;
    m_slots[static_cast<size_t>(rank)].assign(mine, mine + n);
    if (++m_arrived == m_size) {
      m_result.clear();
      for (const auto& s : m_slots) {
        if (s.size() != n) throw Error("thread tile hub: ranks gather different sizes");
        m_result.insert(m_result.end(), s.begin(), s.end());
      }
      m_arrived = 0;
      ++m_generation;
      m_cv.notify_all();
    } else if (!m_cv.wait_for(lock, std::chrono::minutes(1), [&] { return m_generation != generation; })) {
      throw Error("thread tile hub: rank " + std::to_string(rank) + " waited a minute in a gather");
    }
    std::memcpy(all, m_result.data(), m_result.size() * sizeof(double));
  }

 private:
  int64_t m_size;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<char>> m_mail;
  std::map<std::pair<int64_t, int64_t>, std::deque<std::vector<char>>> m_queues;
  std::vector<std::vector<double>> m_slots;
  std::vector<double> m_result;
  int64_t m_arrived = 0;
  uint64_t m_generation = 0;
};

class ThreadTileComm final : public nn::TileComm {
 public:
  // in_order: the group takes "device memory" (start_on) and matches a pair's messages by the
  // order they are posted in, as NCCL does, not by tags (on the CPU, where a test can run it).
  ThreadTileComm(ThreadTileHub& hub, int64_t rank, bool in_order = false)
      : m_hub(hub), m_rank(rank), m_in_order(in_order) {}
  int64_t group_rank() const override { return m_rank; }
  int64_t group_size() const override { return m_hub.size(); }

  class ThreadExchange final : public Exchange {
   public:
    ThreadExchange(ThreadTileComm& comm, std::vector<Message> receives) : m_comm(comm), m_receives(std::move(receives)) {}
    void wait() override {
      for (const Message& m : m_receives) m_comm.m_hub.take(m.peer, m_comm.m_rank, m.tag, m.data, m.bytes);
      m_receives.clear();
    }

   private:
    ThreadTileComm& m_comm;
    std::vector<Message> m_receives;
  };

  std::unique_ptr<Exchange> start_tagged(const std::vector<Message>& sends, const std::vector<Message>& receives) {
    for (const Message& m : sends) {
      m_hub.post(m_rank, m.peer, m.tag, m.data, m.bytes);
      log.push_back("send " + std::to_string(m.tag) + " to " + std::to_string(m.peer) + ": " + std::to_string(m.bytes));
      m_times.bytes += static_cast<double>(m.bytes);
    }
    ++m_times.exchanges;
    return std::make_unique<ThreadExchange>(*this, receives);
  }
  bool device_memory() const override { return m_in_order; }

  class OrderedExchange final : public Exchange {
   public:
    OrderedExchange(ThreadTileComm& comm, std::vector<Message> receives) : m_comm(comm), m_receives(std::move(receives)) {}
    void wait() override {
      for (const size_t i : pair_order(m_receives))
        m_comm.m_hub.take_in_order(m_receives[i].peer, m_comm.m_rank, m_receives[i].data, m_receives[i].bytes);
      m_receives.clear();
    }

   private:
    ThreadTileComm& m_comm;
    std::vector<Message> m_receives;
  };

  // The device whose streams start_on's `after` belongs to. A device transport starts after
  // the stream's work so far (an event on a GPU): here the host waits for it, so that an
  // asynchronous CPU stream (run.cpu_streams = async) has packed the halos and read the last
  // pass's before they are sent or overwritten.
  void set_device(nn::Device* device) { m_device = device; }

  std::unique_ptr<Exchange> start_on(nn::Stream& after, const std::vector<Message>& sends,
                                     const std::vector<Message>& receives) override {
    if (!m_in_order) throw Error("thread tile comm: start_on on a group of host memory");
    if (m_device == nullptr) throw Error("thread tile comm: start_on before set_device");
    m_device->synchronize(after);
    for (const size_t i : pair_order(sends)) {
      const Message& m = sends[i];
      m_hub.post_in_order(m_rank, m.peer, m.data, m.bytes);
      log.push_back("send " + std::to_string(m.tag) + " to " + std::to_string(m.peer) + ": " + std::to_string(m.bytes));
      m_times.bytes += static_cast<double>(m.bytes);
    }
    ++m_times.exchanges;
    return std::make_unique<OrderedExchange>(*this, receives);
  }
  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) override {
    if (m_in_order) throw Error("thread tile comm: start (host memory) on a group that takes device memory");
    return start_tagged(sends, receives);
  }

  void gather(const double* mine, size_t n, double* all) override {
    collectives.push_back("gather " + std::to_string(n));
    m_hub.gather(m_rank, mine, n, all);
  }
  nn::HaloTimes halo_times() const override { return m_times; }

  std::vector<std::string> log;          // the halo messages sent, in order
  std::vector<std::string> collectives;  // the gathers, in order

 private:
  ThreadTileHub& m_hub;
  int64_t m_rank;
  bool m_in_order = false;
  nn::Device* m_device = nullptr;
  nn::HaloTimes m_times;
};

}  // namespace squall::testing
