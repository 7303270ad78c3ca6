#pragma once
// Which GPU each rank drives, checked before NCCL is asked for a communicator. NCCL needs one
// GPU per rank of a communicator; two ranks on one GPU make ncclCommInitRank fail with
// NCCL's own words ("Duplicate GPU detected"), which name neither the ranks nor a way out.
// The ranks gather their (host, PCI bus id) first and all refuse together, naming them.
#include <string>
#include <vector>

namespace squall::mpi {

// One rank's GPU: the rank in the job, the host it runs on and the device's PCI bus id
// ("0000:3b:00.0"), which is the same whatever CUDA_VISIBLE_DEVICES renumbers.
struct RankDevice {
  int rank = 0;
  std::string host;
  std::string bus_id;
};

// "" when no two ranks share a GPU; else one clause per shared GPU, in the order the GPUs
// first appear: "ranks 0 and 1 share GPU 0000:3b:00.0 on host n1; ranks 2, 3 and 5 share ...".
std::string shared_gpus(const std::vector<RankDevice>& ranks);

// A rank's entry as one line for a gather, and back ("RANK<TAB>HOST<TAB>BUS"); parse throws
// squall::Error on a malformed line.
std::string encode(const RankDevice& d);
RankDevice decode_rank_device(const std::string& line);

}  // namespace squall::mpi
