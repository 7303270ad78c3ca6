// The rank-to-GPU check made before an NCCL communicator (mpi/device_map.hpp).
#include <catch2/catch.hpp>

#include "mpi/device_map.hpp"
#include "src/core/error.hpp"

using squall::mpi::RankDevice;
using squall::mpi::shared_gpus;

TEST_CASE("ranks that share a GPU are named with the GPU and the host", "[device-map]") {
  CHECK(shared_gpus({}).empty());
  CHECK(shared_gpus({{0, "n1", "0000:3b:00.0"}, {1, "n1", "0000:5e:00.0"}, {2, "n2", "0000:3b:00.0"}}).empty());
  CHECK(shared_gpus({{0, "n1", "0000:3b:00.0"}, {1, "n1", "0000:3b:00.0"}}) ==
        "ranks 0 and 1 share GPU 0000:3b:00.0 on host n1");
  // Several GPUs, several ranks each, in the order the GPUs first appear.
  CHECK(shared_gpus({{0, "n1", "0000:5e:00.0"},
                     {1, "n1", "0000:3b:00.0"},
                     {2, "n1", "0000:5e:00.0"},
                     {3, "n2", "0000:3b:00.0"},
                     {4, "n1", "0000:3b:00.0"},
                     {5, "n1", "0000:5e:00.0"}}) ==
        "ranks 0, 2, and 5 share GPU 0000:5e:00.0 on host n1; ranks 1 and 4 share GPU 0000:3b:00.0 on host n1");
}

TEST_CASE("a rank's device entry survives the gather's encoding", "[device-map]") {
  const RankDevice d{17, "nid001234", "0000:c1:00.0"};
  const RankDevice back = squall::mpi::decode_rank_device(squall::mpi::encode(d));
  CHECK(back.rank == 17);
  CHECK(back.host == "nid001234");
  CHECK(back.bus_id == "0000:c1:00.0");
  CHECK_THROWS_WITH(squall::mpi::decode_rank_device("garbage"), Catch::Contains("malformed entry 'garbage'"));
}
