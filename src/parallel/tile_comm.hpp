#pragma once
// One sample across ranks over MPI (src/nn/spatial.hpp): the groups of ranks that share a
// sample, and the group's communication a split graph needs (nn::TileComm) over
// mpi::HaloExchanger, whose progress thread moves the halos while the graph computes.
//
// A job of W ranks with parallel.spatial = [rows, cols] has W / S groups of S = rows * cols
// consecutive ranks: world ranks [g * S, (g + 1) * S) hold the samples of group g, each rank
// the tile of its group rank (world rank % S; SpatialPlace::make places it). Data parallelism
// runs across groups: the ranks with the same group rank, one per group, hold the same tile
// of different samples, and sum their gradients with each other (the cross communicator); the
// group's own sums (batch norm's statistics, the loss's weights) run on the group's.
#include <cstdint>
#include <memory>
#include <string>

#include "mpi/comm.hpp"
#include "mpi/device_halo.hpp"
#include "mpi/halo.hpp"
#include "mpi/halo_kind.hpp"
#include "src/nn/spatial.hpp"

namespace squall::parallel {

struct SpatialGroups {
  nn::SpatialSplit split;
  mpi::Communicator group;  // this rank's group: its rank there is its group rank (world rank % S)
  mpi::Communicator cross;  // the ranks of this group rank in every group, ordered by group
  int64_t group_index = 0;  // g: world rank / S
  int64_t groups = 1;       // W / S
};

// Collective over `world`: its ranks cut into groups of split.ranks() consecutive ranks.
// Throws squall::Error naming parallel.spatial, the split and the world size when the world
// size is not a multiple of split.ranks() (or the split is not positive).
SpatialGroups make_spatial_groups(const mpi::Communicator& world, nn::SpatialSplit split);

// The group's communication over MPI. Not thread-safe, as nn::TileComm: one thread calls it
// (the graph's, in graph order); the exchanger's own thread moves the messages.
class MpiTileComm final : public nn::TileComm {
 public:
  // Collective over `group` (the exchanger duplicates it).
  explicit MpiTileComm(const mpi::Communicator& group, mpi::HaloOptions options = {});
  ~MpiTileComm() override;

  int64_t group_rank() const override;
  int64_t group_size() const override;
  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) override;
  void gather(const double* mine, size_t n, double* all) override;
  // exposed and hidden in seconds over every exchange waited for so far, bytes sent.
  nn::HaloTimes halo_times() const override;

  // From now on the halos are exchanged in GPU memory by `device` (NCCL over the same group,
  // parallel.halo_exchange): start_on takes the learner's buffers and stream. The gathers stay
  // on MPI. Call before any layer is set on its tile, on every rank of the group alike.
  void use_device_memory(std::unique_ptr<mpi::DeviceHaloExchanger> device);
  bool device_memory() const override { return m_device != nullptr; }
  std::unique_ptr<Exchange> start_on(nn::Stream& after, const std::vector<Message>& sends,
                                     const std::vector<Message>& receives) override;

  const mpi::HaloExchanger& exchanger() const { return m_exchanger; }

 private:
  mpi::HaloExchanger m_exchanger;
  std::unique_ptr<mpi::DeviceHaloExchanger> m_device;
};

// parallel.halo_exchange (mpi/halo_kind.hpp): the transport of the group's halos. Collective
// over the group (every rank decides alike). backend: the rank's backend's name ("cpu",
// "cuda"); device: its GPU. Returns the transport used and, where auto falls back to host on
// a GPU, why (empty otherwise). Throws squall::Error for nccl where NCCL cannot exchange this
// group's halos, saying why.
struct HaloChoice {
  mpi::HaloKind used = mpi::HaloKind::host;
  std::string why_host;
};
HaloChoice choose_halo_exchange(mpi::HaloKind wanted, const mpi::Communicator& group, const std::string& backend,
                                int device);

}  // namespace squall::parallel
