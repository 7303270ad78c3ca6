// One sample across MPI ranks (src/parallel/tile_comm.hpp): the climate U-Net split over the
// ranks of a group through MpiTileComm, one training step against the same model unsplit on
// every rank; the groups a world is cut into. The same model split over threads is
// tests/unit/test_spatial.cpp's, whose batch and crop helpers this file copies.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mpi/comm.hpp"
#include "mpi/device_halo.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"
#include "src/parallel/tile_comm.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/spatial_batch.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/thread_tile_comm.hpp"
#ifdef SQUALL_TEST_GPU
#include "cuda/cuda_factory.hpp"
#endif

namespace {

using namespace squall;
using nn::Shape;
using nn::Span;
using nn::SpatialPlace;
using nn::SpatialSplit;
using squall::test::make_test_backend;
using testing::Batch;
using testing::climate_unet;
using testing::crop;
using testing::k_class_weights;
using testing::random_batch;




// The group's communication with every gather logged (its size, in order), so that the ranks
// can check that they made the same collectives.
class LoggedTileComm final : public nn::TileComm {
 public:
  explicit LoggedTileComm(nn::TileComm& inner) : m_inner(inner) {}
  int64_t group_rank() const override { return m_inner.group_rank(); }
  int64_t group_size() const override { return m_inner.group_size(); }
  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) override {
    return m_inner.start(sends, receives);
  }
  bool device_memory() const override { return m_inner.device_memory(); }
  std::unique_ptr<Exchange> start_on(nn::Stream& after, const std::vector<Message>& sends,
                                     const std::vector<Message>& receives) override {
    return m_inner.start_on(after, sends, receives);
  }
  void gather(const double* mine, size_t n, double* all) override {
    log += "gather " + std::to_string(n) + "\n";
    m_inner.gather(mine, n, all);
  }
  nn::HaloTimes halo_times() const override { return m_inner.halo_times(); }
  std::string log;

 private:
  nn::TileComm& m_inner;
};

// What one step gave on this rank: the whole sample's loss, this rank's parameter gradients
// (its share, not yet summed over the group), the batch norms' running statistics; and the
// seconds a second, identical step took (the first pays for first touches of memory and
// kernels), with the halo times of that step alone.
struct StepResult {
  double loss = 0;
  std::vector<double> grads;
  std::vector<float> state;
  std::vector<nn::ParamInfo> param_info, state_info;
  double seconds = 0;
  nn::HaloTimes second_step_halos;
};

// Two forward and backward passes of `spec` on `whole` as group rank `rank` of `split` (the
// whole sample, with a null comm, unsplit), with no update between them.
StepResult run_step(const nn::ModelSpec& spec, const Batch& whole, SpatialSplit split, int64_t rank,
                    nn::TileComm* comm, int device = 0) {
  auto backend = make_test_backend(1, device);
  backend->bind_calling_thread(1);
  auto graph = nn::make_model(spec, Shape(1, whole.c, whole.h, whole.w));
  const SpatialPlace place = SpatialPlace::make(split, rank, whole.h, whole.w, int64_t{1} << spec.depth);
  graph->set_tile(place, comm);
  graph->build(*backend, whole.n, 7);
  auto stream = backend->create_stream();
  const Shape out = graph->output_shape();
  const auto label_count = static_cast<size_t>(out.n() * out.h() * out.w());
  nn::Buffer labels_owner;
  int32_t* labels = backend->allocate_labels(label_count, labels_owner);
  nn::Buffer weights = backend->allocate(k_class_weights.size());
  nn::Buffer loss = backend->allocate(1);
  nn::Buffer scale = backend->allocate(1);
  backend->copy_from_host(*stream, weights.data(), k_class_weights.data(), k_class_weights.size());
  const Batch tile = split.split() ? crop(whole, place.rows(), place.cols()) : whole;
  std::vector<float> grads(graph->param_arena_floats());
  backend->synchronize(*stream);

  // One step; returns the whole sample's loss, the gradients in `grads`.
  const auto step = [&] {
    backend->copy_from_host(*stream, graph->input().f32(), tile.images.data(), tile.images.size());
    backend->copy_labels_from_host(*stream, labels, tile.labels.data(), tile.labels.size());
    nn::RunMode mode;
    graph->forward(*stream, mode);
    // The group's sums run in graph order on the thread that runs the stream's work: the
    // host's own sum waits for the forward's to be done (src/nn/spatial.hpp, TileComm).
    backend->synchronize(*stream);
    // The loss of the whole sample: each tile's mean weighted by its share of the weights.
    const double mine = nn::label_weight_sum(tile.labels.data(), tile.labels.size(), k_class_weights.data(), 3);
    double total = mine;
    if (comm) comm->sum(&total, 1);
    const float share = total > 0 ? static_cast<float>(mine / total) : 0.0f;
    backend->copy_from_host(*stream, scale.data(), &share, 1);
    backend->softmax_cross_entropy(*stream, graph->dtype(), graph->output().data, labels, weights.data(), out.n(),
                                   out.c(), out.h() * out.w(), graph->output_grad().data, loss.data(), scale.data());
    float local = 0;
    backend->copy_to_host(*stream, &local, loss.data(), 1);
    backend->synchronize(*stream);
    double whole_loss = static_cast<double>(local) * share;
    if (comm) comm->sum(&whole_loss, 1);
    graph->backward(*stream);
    backend->copy_to_host(*stream, grads.data(), graph->grads(), grads.size());
    backend->synchronize(*stream);
    return whole_loss;
  };

  StepResult r;
  r.loss = step();
  r.grads.assign(grads.begin(), grads.end());
  r.state.resize(graph->state_arena_floats());
  backend->copy_to_host(*stream, r.state.data(), graph->state(), r.state.size());
  backend->synchronize(*stream);
  r.param_info = graph->param_info();
  r.state_info = graph->state_info();

  const nn::HaloTimes before = comm ? comm->halo_times() : nn::HaloTimes{};
  const auto t0 = std::chrono::steady_clock::now();
  step();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (comm) {
    const nn::HaloTimes after = comm->halo_times();
    r.second_step_halos = {after.exposed - before.exposed, after.hidden - before.hidden,
                           after.exchanges - before.exchanges, after.bytes - before.bytes};
  }
  return r;
}

// Each tensor of `got` against `want` within `tol` relative to the tensor's largest magnitude.
template <typename T>
void check_close_per_tensor(const std::vector<T>& got, const std::vector<T>& want,
                            const std::vector<nn::ParamInfo>& tensors, double tol, const std::string& what) {
  CHECK(got.size() == want.size());  // no REQUIRE before a collective: the other ranks would wait
  if (got.size() != want.size()) return;
  for (const nn::ParamInfo& p : tensors) {
    double largest = 0, worst = 0;
    for (size_t i = p.offset; i < p.offset + p.count; ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    }
    INFO(what << " " << p.name << ": largest " << largest << ", worst difference " << worst);
    CHECK(worst <= tol * std::max(largest, 1e-30));
  }
}

// The splits a world of `size` ranks runs: every group of a split is size / split.ranks()
// ranks apart from the next.
std::vector<SpatialSplit> splits_for(int size) {
  if (size == 2) return {{2, 1}};
  if (size == 4) return {{2, 2}, {4, 1}, {2, 1}};  // [2, 1] on 4 ranks: two groups of the same sample
  return {};
}

}  // namespace

TEST_CASE("the climate U-Net split over MPI ranks computes one step as it does unsplit", "[mpi][.spatial-mpi]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const std::vector<SpatialSplit> splits = splits_for(world.size());
  if (splits.empty()) SQUALL_SKIP("the U-Net splits run on 2 and 4 ranks, not " << world.size());
  const nn::ModelSpec spec = climate_unet();
  const Batch batch = random_batch(2, 16, 96, 144, 3, 1);  // the same on every rank
  // The reference on every rank, from the same seed.
  // The unsplit model as a group of one: its batch norms sum in double as a split's do.
  squall::testing::ThreadTileHub solo(1);
  squall::testing::ThreadTileComm solo_comm(solo, 0);
  const StepResult whole = run_step(spec, batch, {1, 1}, 0, &solo_comm);
  for (const SpatialSplit split : splits) {
    INFO("split " << split.str() << " on " << world.size() << " ranks");
    const parallel::SpatialGroups groups = parallel::make_spatial_groups(world, split);
    CHECK(groups.group.size() == split.ranks());
    CHECK(groups.group.rank() == world.rank() % split.ranks());
    CHECK(groups.groups == world.size() / split.ranks());
    CHECK(groups.cross.size() == groups.groups);
    CHECK(groups.cross.rank() == groups.group_index);
    parallel::MpiTileComm mpi_comm(groups.group);
    LoggedTileComm comm(mpi_comm);
    StepResult got = run_step(spec, batch, split, groups.group.rank(), &comm);

    // Every rank of every group has the whole sample's loss.
    INFO("loss unsplit " << whole.loss << ", split " << got.loss);
    CHECK(std::fabs(got.loss - whole.loss) <= 1e-5 * std::fabs(whole.loss));
    // The parameter gradients summed over the group; the running statistics (merged over the
    // group by batch norm itself).
    groups.group.allreduce_sum(std::span<double>(got.grads));
    check_close_per_tensor(got.grads, whole.grads, whole.param_info, 1e-5, "gradient");
    check_close_per_tensor(got.state, whole.state, whole.state_info, 1e-5, "running statistic");
    // Groups that hold the same sample get the same bits.
    std::vector<double> loss_spread{got.loss, -got.loss};
    groups.cross.allreduce_max(std::span<double>(loss_spread));
    CHECK(loss_spread[0] == -loss_spread[1]);

    // The same gathers, of the same sizes, in the same order on every rank of the world.
    CHECK(!comm.log.empty());
    const std::vector<std::string> logs = world.gather_strings(comm.log);
    for (size_t r = 1; r < logs.size(); ++r) {
      INFO("rank " << r << "'s gathers differ from rank 0's");
      CHECK(logs[r] == logs[0]);
    }
    // The halos' times and bytes.
    const nn::HaloTimes t = comm.halo_times();
    INFO("exposed " << t.exposed << " s, hidden " << t.hidden << " s, " << t.exchanges << " exchanges, " << t.bytes
                    << " bytes sent");
    CHECK(t.exposed >= 0);
    CHECK(t.hidden >= 0);
    CHECK(t.exchanges > 0);
    CHECK(t.bytes > 0);
    CHECK(t.exchanges == 2 * got.second_step_halos.exchanges);  // the same exchanges each step
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    CHECK(mpi_comm.exchanger().threaded() == (level == MPI_THREAD_MULTIPLE));

    // The second step's time, split against unsplit (the slowest rank's), for the log.
    const nn::HaloTimes& h = got.second_step_halos;
    std::vector<double> times{got.seconds, whole.seconds, h.exposed, h.hidden};
    world.allreduce_max(std::span<double>(times));
    if (world.rank() == 0)
      std::printf("spatial %s on %d ranks: a step takes %.3f s split, %.3f s unsplit (the slowest rank's); its halos "
                  "%.4f s exposed, %.4f s hidden (the most of any rank), %lld exchanges, %.0f bytes sent by rank 0\n",
                  split.str().c_str(), world.size(), times[0], times[1], times[2], times[3],
                  static_cast<long long>(h.exchanges), h.bytes);
  }
}

TEST_CASE("a world whose size is not a multiple of the split's ranks is refused naming both", "[mpi][.spatial-mpi]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const SpatialSplit split{world.size() + 1, 1};
  CHECK_THROWS_WITH(parallel::make_spatial_groups(world, split),
                    Catch::Contains("parallel.spatial") && Catch::Contains(split.str()) &&
                        Catch::Contains(std::to_string(world.size()) + " ranks"));
  CHECK_THROWS_WITH(parallel::make_spatial_groups(world, {0, 2}), Catch::Contains("parallel.spatial"));
}

// parallel.halo_exchange = nccl: the halos in GPU memory, NCCL's send and receive on the
// learner's buffers, ordered on its stream by events, against the same split through host
// memory and against the model unsplit. Needs one GPU per rank (2 ranks, 2 GPUs); skipped,
// saying why, elsewhere. The CTest entry gpu:spatial-nccl:np2 runs it on the CUDA backend.
TEST_CASE("the U-Net split over 2 GPUs exchanges its halos in GPU memory over NCCL as through host memory",
          "[mpi][.spatial-nccl]") {
  const mpi::Communicator world = mpi::Communicator::world();
  if (world.size() != 2) SQUALL_SKIP("the NCCL halo case runs on 2 ranks, not " << world.size());
#ifndef SQUALL_TEST_GPU
  SQUALL_SKIP("halos in GPU memory need the CUDA backend (this is the CPU tests' build of the case)");
#else
  std::string why_none;
  const int devices = cuda::device_count(&why_none);
  if (world.allreduce_min(devices) == 0) SQUALL_SKIP("no GPU on some rank: " << why_none);
  const int device = world.rank() % devices;
  if (const std::string why = mpi::device_halo_refusal(world, device); !why.empty()) SQUALL_SKIP(why);
  const nn::ModelSpec spec = climate_unet();
  const Batch batch = random_batch(2, 16, 96, 144, 3, 1);
  squall::testing::ThreadTileHub solo(1);
  squall::testing::ThreadTileComm solo_comm(solo, 0);
  const StepResult whole = run_step(spec, batch, {1, 1}, 0, &solo_comm, device);
  const SpatialSplit split{2, 1};
  const parallel::SpatialGroups groups = parallel::make_spatial_groups(world, split);
  parallel::MpiTileComm host(groups.group);
  StepResult staged = run_step(spec, batch, split, groups.group.rank(), &host, device);
  parallel::MpiTileComm nccl(groups.group);
  nccl.use_device_memory(mpi::make_device_halo_exchanger(groups.group, device, 120));
  CHECK(nccl.device_memory());
  LoggedTileComm logged(nccl);
  StepResult got = run_step(spec, batch, split, groups.group.rank(), &logged, device);

  INFO("loss unsplit " << whole.loss << ", through host memory " << staged.loss << ", over NCCL " << got.loss);
  CHECK(std::fabs(got.loss - whole.loss) <= 1e-5 * std::fabs(whole.loss));
  // cuDNN may choose other algorithms for another graph of the same shapes: a tolerance, not
  // bits, against the staged run too.
  CHECK(std::fabs(got.loss - staged.loss) <= 1e-6 * std::fabs(staged.loss));
  groups.group.allreduce_sum(std::span<double>(got.grads));
  check_close_per_tensor(got.grads, whole.grads, whole.param_info, 1e-5, "gradient");
  check_close_per_tensor(got.state, whole.state, whole.state_info, 1e-5, "running statistic");
  // The same messages as through host memory, timed on the device.
  const nn::HaloTimes t = nccl.halo_times(), h = host.halo_times();
  INFO("NCCL: exposed " << t.exposed << " s, hidden " << t.hidden << " s, " << t.exchanges << " exchanges, " << t.bytes
                        << " bytes; host: " << h.exchanges << " exchanges, " << h.bytes << " bytes");
  CHECK(t.exchanges == h.exchanges);
  CHECK(t.bytes == h.bytes);
  CHECK(t.exposed >= 0);
  CHECK(t.hidden >= 0);
  CHECK(t.exposed + t.hidden > 0);
  if (world.rank() == 0)
    std::printf("spatial [2, 1] over NCCL: a step takes %.4f s (through host memory %.4f s); its halos %.5f s exposed, "
                "%.5f s hidden\n",
                got.seconds, staged.seconds, got.second_step_halos.exposed, got.second_step_halos.hidden);
#endif
}
