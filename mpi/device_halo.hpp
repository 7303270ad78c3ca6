#pragma once
// Halo exchanges of GPU memory (docs/design.md, "One sample across ranks"): the messages of a
// sample split across ranks sent and received by NCCL on the ranks' device buffers, on a
// stream of the exchanger's own that the caller's stream hands over to and takes back from by
// events, so that neither the host nor the caller's stream waits while the halos travel. The
// interface is free of CUDA and NCCL headers: the implementation is mpi/nccl_halo.cpp, and a
// build without CUDA has none (device_halo_refusal says so).
//
// NCCL matches a pair's sends and receives by their order, not by tags: an exchange posts its
// messages in the order it is given them, inside one NCCL group, and the caller gives them in
// an order both ranks of a pair agree on (nn::pair_order: by peer, then tag), so that a
// sender's k-th message to a peer is the peer's k-th receive from it. One GPU per rank: NCCL
// refuses two ranks of a communicator on one GPU, where halos go through host memory instead.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpi/comm.hpp"
#include "mpi/halo.hpp"

namespace squall::mpi {

class DeviceHaloExchanger {
 public:
  virtual ~DeviceHaloExchanger() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Starts one exchange of device buffers after the work so far of `after` (the caller's
  // cudaStream_t, opaque here) and returns at once with its number. The messages are posted
  // in the order given (the tags are not sent: see above). The buffers belong to the
  // exchange until a stream ordered after it (order) or the host (wait) has seen it complete.
  // Throws squall::Error naming the message when a peer is outside the group or a buffer null
  // where it has bytes. Every rank of a pair starts its exchanges with the other in the same
  // order.
  virtual int64_t start(const std::vector<HaloMessage>& sends, const std::vector<HaloMessage>& receives,
                        void* after) = 0;
  // The later work of `stream` waits for exchange `id` (an event: the host does not wait).
  virtual void order(int64_t id, void* stream) = 0;
  // The host waits for exchange `id`, watching NCCL's errors: a failed peer ends the job.
  virtual void wait(int64_t id) = 0;
  // Seconds and bytes of the exchanges seen complete so far: hidden, their messages travelled
  // while the caller's stream computed; exposed, the caller's stream waited for them (from the
  // point where it was ordered after the exchange to the exchange's end, timed on the device).
  virtual HaloTotals totals() = 0;
};

// "" when NCCL can exchange halos over `group` with this rank on GPU `device`: the build has
// NCCL, and every rank of the group drives a GPU of its own; else why not, the same text on
// every rank (naming the ranks that share a GPU). Collective over `group`.
std::string device_halo_refusal(const Communicator& group, int device);

// Collective over `group` (its own NCCL communicator, made by broadcasting NCCL's unique id
// over MPI). Throws squall::Error where device_halo_refusal is not "". An exchange whose NCCL
// work has run for stall_abort_s without ending (a rank of the group stopped) ends the job,
// naming the exchange and this rank; 0: never.
std::unique_ptr<DeviceHaloExchanger> make_device_halo_exchanger(const Communicator& group, int device,
                                                                double stall_abort_s);

}  // namespace squall::mpi
