// One sample across ranks over MPI (src/parallel/tile_comm.hpp).
#include "src/parallel/tile_comm.hpp"

#include <string>
#include <utility>

#include "src/core/error.hpp"

namespace squall::parallel {
namespace {

class MpiExchange final : public nn::TileComm::Exchange {
 public:
  explicit MpiExchange(mpi::HaloExchanger::Exchange exchange) : m_exchange(std::move(exchange)) {}
  void wait() override { m_exchange.wait(); }

 private:
  mpi::HaloExchanger::Exchange m_exchange;  // its destructor waits for it when wait() was not called
};

std::vector<mpi::HaloMessage> to_halo(const std::vector<nn::TileComm::Message>& messages, int64_t size) {
  std::vector<mpi::HaloMessage> out;
  out.reserve(messages.size());
  for (const nn::TileComm::Message& m : messages) {
    if (m.peer < 0 || m.peer >= size)
      throw Error("spatial split: a halo message (tag " + std::to_string(m.tag) + ") for group rank " +
                  std::to_string(m.peer) + " of a group of " + std::to_string(size));
    out.push_back({static_cast<int>(m.peer), m.tag, m.data, m.bytes});
  }
  return out;
}

class DeviceExchange final : public nn::TileComm::Exchange {
 public:
  DeviceExchange(mpi::DeviceHaloExchanger& device, int64_t id) : m_device(device), m_id(id) {}
  void wait() override { m_device.wait(m_id); }
  void order(nn::Stream& s) override { m_device.order(m_id, s.native_handle()); }

 private:
  mpi::DeviceHaloExchanger& m_device;
  int64_t m_id;
};

}  // namespace

SpatialGroups make_spatial_groups(const mpi::Communicator& world, nn::SpatialSplit split) {
  const int64_t size = world.size();
  if (split.rows < 1 || split.cols < 1)
    throw Error("parallel.spatial = " + split.str() + ": rows and columns must be positive");
  const int64_t s = split.ranks();
  if (size % s != 0)
    throw Error("parallel.spatial = " + split.str() + " puts each sample on " + std::to_string(s) +
                " ranks, but the job has " + std::to_string(size) + " ranks, not a multiple of " + std::to_string(s));
  SpatialGroups g;
  g.split = split;
  g.group_index = world.rank() / s;
  g.groups = size / s;
  const int group_rank = static_cast<int>(world.rank() % s);
  g.group = world.split(static_cast<int>(g.group_index), group_rank);
  g.cross = world.split(group_rank, static_cast<int>(g.group_index));
  return g;
}

MpiTileComm::MpiTileComm(const mpi::Communicator& group, mpi::HaloOptions options) : m_exchanger(group, options) {}
MpiTileComm::~MpiTileComm() = default;

int64_t MpiTileComm::group_rank() const { return m_exchanger.rank(); }
int64_t MpiTileComm::group_size() const { return m_exchanger.size(); }

std::unique_ptr<nn::TileComm::Exchange> MpiTileComm::start(const std::vector<Message>& sends,
                                                           const std::vector<Message>& receives) {
  return std::make_unique<MpiExchange>(
      m_exchanger.start(to_halo(sends, group_size()), to_halo(receives, group_size())));
}

void MpiTileComm::use_device_memory(std::unique_ptr<mpi::DeviceHaloExchanger> device) { m_device = std::move(device); }

std::unique_ptr<nn::TileComm::Exchange> MpiTileComm::start_on(nn::Stream& after, const std::vector<Message>& sends,
                                                              const std::vector<Message>& receives) {
  if (!m_device) return nn::TileComm::start_on(after, sends, receives);
  // NCCL matches a pair's messages by order: both ranks post them in pair order.
  const auto ordered = [&](const std::vector<Message>& messages) {
    std::vector<mpi::HaloMessage> out;
    out.reserve(messages.size());
    for (const size_t i : pair_order(messages)) {
      const Message& m = messages[i];
      out.push_back({static_cast<int>(m.peer), m.tag, m.data, m.bytes});
    }
    return out;
  };
  const int64_t id = m_device->start(ordered(sends), ordered(receives), after.native_handle());
  return std::make_unique<DeviceExchange>(*m_device, id);
}

void MpiTileComm::gather(const double* mine, size_t n, double* all) { m_exchanger.gather(mine, n, all); }

nn::HaloTimes MpiTileComm::halo_times() const {
  const mpi::HaloTotals t = m_device ? m_device->totals() : m_exchanger.totals();
  nn::HaloTimes out;
  out.exposed = t.exposed_s;
  out.hidden = t.hidden_s;
  out.exchanges = t.exchanges;
  out.bytes = t.bytes_sent;
  return out;
}

HaloChoice choose_halo_exchange(mpi::HaloKind wanted, const mpi::Communicator& group, const std::string& backend,
                                int device) {
  HaloChoice c;
  if (wanted == mpi::HaloKind::host) return c;
  if (backend != "cuda") {
    if (wanted == mpi::HaloKind::nccl)
      throw Error("parallel.halo_exchange = nccl exchanges GPU memory, but this job trains on the " + backend +
                  " backend (set run.backend = cuda, or parallel.halo_exchange = auto or host)");
    return c;
  }
  const std::string why = mpi::device_halo_refusal(group, device);
  if (why.empty()) {
    c.used = mpi::HaloKind::nccl;
    return c;
  }
  if (wanted == mpi::HaloKind::nccl)
    throw Error("parallel.halo_exchange = nccl: " + why +
                " (run as many ranks per node as it has GPUs, or set parallel.halo_exchange = auto or host)");
  c.why_host = why;
  return c;
}

}  // namespace squall::parallel
