// One sample across ranks (src/nn/spatial.hpp, src/nn/layers/halo.hpp): tiles, the group's
// sums, and the climate U-Net split over rows and columns against the same model unsplit,
// with the ranks of a group as threads of this process (tests/support/thread_tile_comm.hpp).
// The unsplit model is a group of one ([1, 1]): its batch norms sum their statistics in
// double as a split's do (src/cpu/cpu_batch_norm.cpp), so that the two differ by the order
// of their additions and not by float rounding that can flip a ReLU's mask.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/layers/halo.hpp"
#include "src/nn/models/builder.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/nn/spatial.hpp"
#include "src/perf/perf_model.hpp"
#include "tests/support/spatial_batch.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/thread_tile_comm.hpp"

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
using testing::ThreadTileComm;
using testing::ThreadTileHub;

std::vector<int64_t> sizes(const std::vector<Span>& spans) {
  std::vector<int64_t> out;
  for (const Span& s : spans) out.push_back(s.size());
  return out;
}


// What one rank (or the unsplit model) saw: the loss of every step (the whole sample's), and
// after the first step its gradients (this rank's share, summed over the group by the caller)
// and the batch norms' running statistics.
struct RankRun {
  std::vector<float> losses;
  std::vector<float> grads, state, params;
  std::vector<std::string> collectives;
  std::vector<nn::ParamInfo> param_info;
  size_t halo_bytes = 0;  // sent by every rank of the group together
};


// Runs body(r) for every rank r of a group of `ranks`, each on a thread of its own, and
// returns what the ranks threw, a line each ("" when none did).
std::string on_every_rank(int64_t ranks, const std::function<void(int64_t)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  std::string all;
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) all += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  return all;
}

// Trains `spec` on `batches` (cycled) for `steps` steps of plain SGD as rank `rank` of a split
// (or unsplit, with a null comm), the group's gradients summed on the host in double.
RankRun run_rank(const nn::ModelSpec& spec, const std::vector<Batch>& batches, SpatialSplit split, int64_t rank,
                 nn::TileComm* comm, int steps, float lr) {
  const Batch& first = batches.front();
  auto backend = make_test_backend(1);
  backend->bind_calling_thread(1);
  auto graph = nn::make_model(spec, Shape(1, first.c, first.h, first.w));
  const SpatialPlace place = SpatialPlace::make(split, rank, first.h, first.w, nn::input_multiple(spec));
  graph->set_tile(place, comm);
  graph->build(*backend, first.n, 7);
  auto stream = backend->create_stream();
  const Shape out = graph->output_shape();
  const auto label_count = static_cast<size_t>(out.n() * out.h() * out.w());
  nn::Buffer labels_owner;
  int32_t* labels = backend->allocate_labels(label_count, labels_owner);
  nn::Buffer weights = backend->allocate(k_class_weights.size());
  nn::Buffer loss = backend->allocate(1);
  nn::Buffer scale = backend->allocate(1);
  backend->copy_from_host(*stream, weights.data(), k_class_weights.data(), k_class_weights.size());
  RankRun run;
  run.param_info = graph->param_info();
  const size_t arena = graph->param_arena_floats();
  std::vector<float> host_grads(arena), host_params(arena);
  for (int step = 0; step < steps; ++step) {
    const Batch& whole = batches[static_cast<size_t>(step) % batches.size()];
    const Batch tile = split.split() ? crop(whole, place.rows(), place.cols()) : whole;
    backend->copy_from_host(*stream, graph->input().f32(), tile.images.data(), tile.images.size());
    backend->copy_labels_from_host(*stream, labels, tile.labels.data(), tile.labels.size());
    nn::RunMode mode;
    mode.step = static_cast<uint64_t>(step);
    graph->forward(*stream, mode);
    // The group's sums run in graph order on the thread that runs the stream's work (a worker
    // under run.cpu_streams = async): the host's own sum waits for the forward's to be done.
    backend->synchronize(*stream);
    // The loss of the whole sample: each tile's mean weighted by its share of the weights.
    double mine = nn::label_weight_sum(tile.labels.data(), tile.labels.size(), k_class_weights.data(), 3);
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
    run.losses.push_back(static_cast<float>(whole_loss));
    graph->backward(*stream);
    backend->copy_to_host(*stream, host_grads.data(), graph->grads(), arena);
    backend->synchronize(*stream);
    std::vector<double> g(host_grads.begin(), host_grads.end());
    if (comm) comm->sum(g.data(), g.size());
    if (step == 0) {
      run.grads.assign(g.begin(), g.end());
      run.state.resize(graph->state_arena_floats());
      backend->copy_to_host(*stream, run.state.data(), graph->state(), run.state.size());
      backend->synchronize(*stream);
    }
    backend->copy_to_host(*stream, host_params.data(), graph->read_params(), arena);
    backend->synchronize(*stream);
    for (size_t i = 0; i < arena; ++i) host_params[i] -= lr * static_cast<float>(g[i]);
    backend->copy_from_host(*stream, graph->params(), host_params.data(), arena);
    backend->synchronize(*stream);
  }
  run.params = host_params;
  if (auto* t = dynamic_cast<ThreadTileComm*>(comm)) run.collectives = t->collectives;
  return run;
}

// Every rank of a split, each on a thread of its own; returns rank 0's run (all ranks hold the
// same sums) and checks that every rank made the same gathers in the same order.
RankRun run_split(const nn::ModelSpec& spec, const std::vector<Batch>& batches, SpatialSplit split, int steps,
                  float lr) {
  ThreadTileHub hub(split.ranks());
  std::vector<std::unique_ptr<ThreadTileComm>> comms;
  for (int64_t r = 0; r < split.ranks(); ++r) comms.push_back(std::make_unique<ThreadTileComm>(hub, r));
  std::vector<RankRun> runs(static_cast<size_t>(split.ranks()));
  const std::string all_errors = on_every_rank(split.ranks(), [&](int64_t r) {
    runs[static_cast<size_t>(r)] = run_rank(spec, batches, split, r, comms[static_cast<size_t>(r)].get(), steps, lr);
  });
  INFO(all_errors);
  REQUIRE(all_errors.empty());
  for (const auto& r : runs) {
    REQUIRE(r.collectives == runs[0].collectives);
    REQUIRE(r.losses == runs[0].losses);  // the same sums on every rank
  }
  runs[0].halo_bytes = hub.posted_bytes;
  return runs[0];
}

// Each tensor of a against b within `tol` relative to the tensor's largest magnitude.
void require_close_per_tensor(const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<nn::ParamInfo>& tensors, double tol, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (const nn::ParamInfo& p : tensors) {
    double largest = 0, worst = 0;
    for (size_t i = p.offset; i < p.offset + p.count; ++i) {
      largest = std::max(largest, static_cast<double>(std::fabs(b[i])));
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    INFO(what << " " << p.name << ": largest " << largest << ", worst difference " << worst);
    CHECK(worst <= tol * std::max(largest, 1e-30));
  }
}


}  // namespace

TEST_CASE("tiles are cut on multiples of the model's stride, unevenly where they must be", "[spatial]") {
  CHECK(sizes(nn::tile_spans(768, 5, 8)) == std::vector<int64_t>{160, 152, 152, 152, 152});
  CHECK(sizes(nn::tile_spans(728, 3, 8)) == std::vector<int64_t>{248, 240, 240});
  CHECK(sizes(nn::tile_spans(96, 4, 16)) == std::vector<int64_t>{32, 32, 16, 16});
  const auto spans = nn::tile_spans(96, 4, 16);
  CHECK(spans.front().begin == 0);
  CHECK(spans.back().end == 96);
  for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].begin == spans[i - 1].end);
  REQUIRE_THROWS_WITH(nn::tile_spans(100, 2, 16), Catch::Contains("100") && Catch::Contains("16"));
  REQUIRE_THROWS_WITH(nn::tile_spans(32, 3, 16), Catch::Contains("at most 2"));
  const SpatialPlace p = SpatialPlace::make({2, 3}, 4, 64, 96, 16);
  CHECK(p.row == 1);
  CHECK(p.col == 1);
  CHECK(p.rows() == Span{32, 64});
  CHECK(p.cols() == Span{32, 64});
  CHECK(sizes(p.row_spans_at(8)) == std::vector<int64_t>{4, 4});
  REQUIRE_THROWS_WITH(p.row_spans_at(3), Catch::Contains("stride"));
}

TEST_CASE("the group's moments merge exactly where the ranks' means differ widely", "[spatial]") {
  // Two ranks' values: one around +1000, one around -1000, spread 1.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> parts(3);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 200 + 50 * r; ++i) parts[static_cast<size_t>(r)].push_back(normal(rng) + (r == 1 ? -1000 : 1000));
  std::vector<double> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  double mean = 0;
  for (double v : all) mean += v;
  mean /= static_cast<double>(all.size());
  double m2 = 0;
  for (double v : all) m2 += (v - mean) * (v - mean);

  ThreadTileHub hub(3);
  std::vector<std::vector<double>> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      ThreadTileComm comm(hub, r);
      const auto& p = parts[static_cast<size_t>(r)];
      double m = 0;
      for (double v : p) m += v;
      m /= static_cast<double>(p.size());
      double q = 0;
      for (double v : p) q += (v - m) * (v - m);
      std::vector<double> t{static_cast<double>(p.size()), m, q};
      comm.merge_moments(t.data(), 1);
      got[static_cast<size_t>(r)] = t;
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) {
    CHECK(g == got[0]);  // the same bits on every rank
    CHECK(g[0] == static_cast<double>(all.size()));
    CHECK(std::fabs(g[1] - mean) <= 1e-9 * 1000);
    CHECK(std::fabs(g[2] - m2) <= 1e-9 * m2);
  }
}

TEST_CASE("batch norm over a split sample uses the whole sample's statistics, not the tiles'", "[spatial]") {
  // A batch norm alone on 2 x 8 x 32 x 24 whose top half is around +50 and bottom half around
  // -50: each tile of a [2, 1] split sees one mean. Averaging the tiles' variances (as a
  // per-shard norm would) gives about 1 instead of about 2500; squall's merge gives the
  // unsplit statistics.
  const int64_t n = 2, c = 8, h = 32, w = 24;
  Batch b = random_batch(n, c, h, w, 3, 11);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) b.images[static_cast<size_t>(((i * c + ch) * h + y) * w + x)] += y < h / 2 ? 50.0f : -50.0f;
  double per_tile_var = 0, whole_var = 0;
  {
    const auto var_of = [&](int64_t y0, int64_t y1) {
      double s = 0, q = 0, cnt = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const double v = b.images[static_cast<size_t>(((i * c + 0) * h + y) * w + x)];
            s += v;
            q += v * v;
            ++cnt;
          }
      return q / cnt - (s / cnt) * (s / cnt);
    };
    per_tile_var = (var_of(0, h / 2) + var_of(h / 2, h)) / 2;
    whole_var = var_of(0, h);
  }
  REQUIRE(whole_var > 1000 * per_tile_var);  // a per-shard norm would be far off here

  const auto run = [&](SpatialSplit split, int64_t rank, nn::TileComm* comm, std::vector<float>& y,
                       std::vector<float>& dx, std::vector<float>& state, std::vector<float>& dparams) {
    auto backend = make_test_backend(1);
    backend->bind_calling_thread(1);
    nn::Graph g(Shape(1, c, h, w));
    const int x0 = g.add("bn", nn::batch_norm(), nn::Graph::k_input);
    g.add("conv", nn::conv2d({c, 3, 1, 1, 1, true, nn::Init::uniform_fan_in}), x0);
    const SpatialPlace place = SpatialPlace::make(split, rank, h, w, 1);
    g.set_tile(place, comm);
    g.build(*backend, n, 5);
    auto s = backend->create_stream();
    const Batch tile = split.split() ? crop(b, place.rows(), place.cols()) : b;
    backend->copy_from_host(*s, g.input().f32(), tile.images.data(), tile.images.size());
    nn::RunMode mode;
    g.forward(*s, mode);
    const Shape os = g.output_shape();
    std::vector<float> dy(static_cast<size_t>(os.numel()));
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>((i * 37) % 11) * 0.1f - 0.5f;
    backend->copy_from_host(*s, g.output_grad().f32(), dy.data(), dy.size());
    g.backward(*s);
    y.resize(static_cast<size_t>(os.numel()));
    backend->copy_to_host(*s, y.data(), g.output().f32(), y.size());
    const Shape bs = g.node_shape(1);
    dx.resize(static_cast<size_t>(bs.numel()));
    backend->copy_to_host(*s, dx.data(), g.node_value(1).f32(), dx.size());
    state.resize(g.state_arena_floats());
    backend->copy_to_host(*s, state.data(), g.state(), state.size());
    dparams.resize(g.param_arena_floats());
    backend->copy_to_host(*s, dparams.data(), g.grads(), dparams.size());
    backend->synchronize(*s);
  };
  std::vector<float> y1, dx1, st1, dp1;
  {
    ThreadTileHub solo(1);
    ThreadTileComm comm(solo, 0);
    run({1, 1}, 0, &comm, y1, dx1, st1, dp1);
  }
  ThreadTileHub hub(2);
  std::vector<std::vector<float>> y(2), dx(2), st(2), dp(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ThreadTileComm comm(hub, r);
      run({2, 1}, r, &comm, y[static_cast<size_t>(r)], dx[static_cast<size_t>(r)], st[static_cast<size_t>(r)],
          dp[static_cast<size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  // The running statistics (same on both ranks) and the normalised values of each tile.
  CHECK(st[0] == st[1]);
  double largest = 0, worst = 0;
  for (size_t i = 0; i < st1.size(); ++i) {
    largest = std::max(largest, static_cast<double>(std::fabs(st1[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(st1[i] - st[0][i])));
  }
  CHECK(worst <= 1e-5 * largest);
  const SpatialPlace top = SpatialPlace::make({2, 1}, 0, h, w, 1);
  Batch norm_whole{n, c, h, w, dx1, {}};
  for (int r = 0; r < 2; ++r) {
    const SpatialPlace p = SpatialPlace::make({2, 1}, r, h, w, 1);
    const Batch want = crop(norm_whole, p.rows(), p.cols());
    double big = 0, diff = 0;
    for (size_t i = 0; i < want.images.size(); ++i) {
      big = std::max(big, static_cast<double>(std::fabs(want.images[i])));
      diff = std::max(diff, static_cast<double>(std::fabs(want.images[i] - dx[static_cast<size_t>(r)][i])));
    }
    INFO("rank " << r << ": the normalised tile differs by " << diff << " (largest " << big << ")");
    CHECK(diff <= 1e-5 * big);
  }
  (void)top;
}

// A graph built by `make` on a c x h x w input, run forward and backward once unsplit and as
// every rank of `split`: the output tiles, the summed parameter gradients and the running
// statistics against the unsplit ones.
void compare_graphs(const std::function<std::unique_ptr<nn::Graph>()>& make, int64_t n, int64_t c, int64_t h,
                    int64_t w, SpatialSplit split, int64_t multiple) {
  const Batch b = random_batch(n, c, h, w, 3, 5);
  struct Out {
    std::vector<float> y, grads, state;
    Shape y_shape;
    std::vector<nn::ParamInfo> info;
  };
  const auto run = [&](SpatialSplit sp, int64_t rank, nn::TileComm* comm) {
    auto backend = make_test_backend(1);
    backend->bind_calling_thread(1);
    auto owner = make();
    nn::Graph& g = *owner;
    const SpatialPlace place = SpatialPlace::make(sp, rank, h, w, multiple);
    if (auto* t = dynamic_cast<ThreadTileComm*>(comm)) t->set_device(backend.get());
    g.set_tile(place, comm);
    g.build(*backend, n, 5);
    auto s = backend->create_stream();
    const Batch tile = sp.split() ? crop(b, place.rows(), place.cols()) : b;
    backend->copy_from_host(*s, g.input().f32(), tile.images.data(), tile.images.size());
    nn::RunMode mode;
    g.forward(*s, mode);
    Out o;
    o.y_shape = g.output_shape();
    // dy: a smooth function of the whole sample's position, so each tile gets its part of it,
    // positive, so that the sums over pixels do not cancel down to their rounding.
    const Shape full = g.node_full_shape(g.output_node());
    const int64_t r0 = sp.split() ? place.row_spans_at(full.h())[static_cast<size_t>(place.row)].begin : 0;
    const int64_t c0 = sp.split() ? place.col_spans_at(full.w())[static_cast<size_t>(place.col)].begin : 0;
    std::vector<float> dy(static_cast<size_t>(o.y_shape.numel()));
    size_t k = 0;
    for (int64_t i = 0; i < o.y_shape.n(); ++i)
      for (int64_t ch = 0; ch < o.y_shape.c(); ++ch)
        for (int64_t y = 0; y < o.y_shape.h(); ++y)
          for (int64_t x = 0; x < o.y_shape.w(); ++x)
            dy[k++] = 0.5f + 0.5f * std::sin(0.3f * static_cast<float>(y + r0) + 0.7f * static_cast<float>(ch + i)) *
                                 std::cos(0.2f * static_cast<float>(x + c0));
    backend->copy_from_host(*s, g.output_grad().f32(), dy.data(), dy.size());
    g.backward(*s);
    o.y.resize(dy.size());
    backend->copy_to_host(*s, o.y.data(), g.output().f32(), o.y.size());
    o.grads.resize(g.param_arena_floats());
    backend->copy_to_host(*s, o.grads.data(), g.grads(), o.grads.size());
    o.state.resize(g.state_arena_floats());
    backend->copy_to_host(*s, o.state.data(), g.state(), o.state.size());
    backend->synchronize(*s);
    o.info = g.param_info();
    return o;
  };
  ThreadTileHub solo(1);
  ThreadTileComm solo_comm(solo, 0);
  const Out whole = run({1, 1}, 0, &solo_comm);
  // Every rank on a thread of its own; in_order: the halos matched by the order a pair posts
  // them in, as NCCL matches device buffers (TileComm::start_on), not by tags.
  const auto run_parts = [&](bool in_order, size_t& bytes) {
    ThreadTileHub hub(split.ranks());
    std::vector<Out> parts(static_cast<size_t>(split.ranks()));
    const std::string all_errors = on_every_rank(split.ranks(), [&](int64_t r) {
      ThreadTileComm comm(hub, r, in_order);
      parts[static_cast<size_t>(r)] = run(split, r, &comm);
    });
    INFO((in_order ? "halos matched by order: " : "halos matched by tag: ") << all_errors);
    REQUIRE(all_errors.empty());
    bytes = hub.posted_bytes;
    return parts;
  };
  size_t tagged_bytes = 0, ordered_bytes = 0;
  const std::vector<Out> parts = run_parts(false, tagged_bytes);
  {
    // The same kernels on the same cells: the transport cannot change a bit.
    const std::vector<Out> ordered = run_parts(true, ordered_bytes);
    CHECK(ordered_bytes == tagged_bytes);
    for (size_t r = 0; r < parts.size(); ++r) {
      INFO("rank " << r << " with its halos matched by order");
      CHECK(ordered[r].y == parts[r].y);
      CHECK(ordered[r].grads == parts[r].grads);
      CHECK(ordered[r].state == parts[r].state);
    }
  }
  std::vector<float> grads(whole.grads.size(), 0.0f);
  for (const Out& p : parts)
    for (size_t i = 0; i < grads.size(); ++i) grads[i] += p.grads[i];
  require_close_per_tensor(grads, whole.grads, whole.info, 1e-5, "gradient");
  for (const Out& p : parts) CHECK(p.state == parts[0].state);
  Batch out_whole{whole.y_shape.n(), whole.y_shape.c(), whole.y_shape.h(), whole.y_shape.w(), whole.y, {}};
  for (int64_t r = 0; r < split.ranks(); ++r) {
    const SpatialPlace p = SpatialPlace::make(split, r, h, w, multiple);
    const Batch want = crop(out_whole, p.row_spans_at(whole.y_shape.h())[static_cast<size_t>(p.row)],
                            p.col_spans_at(whole.y_shape.w())[static_cast<size_t>(p.col)]);
    double big = 0, diff = 0;
    for (size_t i = 0; i < want.images.size(); ++i) {
      big = std::max(big, static_cast<double>(std::fabs(want.images[i])));
      diff = std::max(diff, static_cast<double>(std::fabs(want.images[i] - parts[static_cast<size_t>(r)].y[i])));
    }
    INFO("rank " << r << ": its output tile differs by " << diff << " (largest " << big << ")");
    CHECK(diff <= 1e-5 * big);
  }
}

void compare_layers(const std::function<void(nn::Graph&)>& make, int64_t n, int64_t c, int64_t h, int64_t w,
                    SpatialSplit split, int64_t multiple) {
  compare_graphs(
      [&] {
        auto g = std::make_unique<nn::Graph>(Shape(1, c, h, w));
        make(*g);
        return g;
      },
      n, c, h, w, split, multiple);
}

TEST_CASE("each layer the U-Net uses runs on tiles as it runs unsplit", "[spatial]") {

  // A convolution before a batch norm has no bias (as the zoo's): its gradient would be zero
  // but for rounding, which no relative tolerance can hold.
  const auto conv = [](int64_t k, int64_t kernel, int64_t stride, int64_t pad, int64_t dil, bool bias = true) {
    return nn::conv2d({k, kernel, stride, pad, dil, bias, nn::Init::uniform_fan_in});
  };
  for (const SpatialSplit split : {SpatialSplit{2, 1}, SpatialSplit{1, 2}, SpatialSplit{2, 2}, SpatialSplit{3, 1}}) {
    DYNAMIC_SECTION("a U-Net level of 3-row tiles, split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            nn::models::Builder b(g);
            int x = b.conv_bn("a", 0, 16, 3);
            const int skip = x;
            x = g.add("pool", nn::max_pool(2, 2), x);
            x = b.conv_bn("bottom.a", x, 32, 3);
            x = b.conv_bn("bottom.b", x, 32, 3);
            x = g.add("up", nn::conv_transpose2d({16, 2, 2, 0, 0, true}), x);
            x = g.add("cat", nn::concat(), {x, skip});
            x = b.conv_bn("c", x, 16, 3);
            g.add("out", conv(3, 1, 1, 0, 1), x);
          },
          1, 16, 6 * split.rows, 8, split, 2);
    }
    DYNAMIC_SECTION("tiles of 3 rows, split " << split.str()) {
      compare_layers([&](nn::Graph& g) { g.add("b", conv(16, 3, 1, 1, 1), g.add("a", conv(16, 3, 1, 1, 1), 0)); }, 1, 16,
                     6 * split.rows, 9, split, 1);
    }
    DYNAMIC_SECTION("two 3x3 convolutions, split " << split.str()) {
      compare_layers([&](nn::Graph& g) { g.add("b", conv(4, 3, 1, 1, 1), g.add("a", conv(4, 3, 1, 1, 1), 0)); }, 2, 3,
                     24, 16, split, 4);
    }
    DYNAMIC_SECTION("16 channels (the CPU's blocked layout), split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            int x = g.add("a", conv(16, 3, 1, 1, 1, false), 0);
            x = g.add("bn", nn::batch_norm(), x);
            x = g.add("relu", nn::relu(), x);
            g.add("b", conv(16, 3, 1, 1, 1), x);
          },
          2, 16, 24, 16, split, 4);
    }
    DYNAMIC_SECTION("conv, batch norm, ReLU, conv, split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            int x = g.add("a", conv(4, 3, 1, 1, 1, false), 0);
            x = g.add("bn", nn::batch_norm(), x);
            x = g.add("relu", nn::relu(), x);
            g.add("b", conv(4, 3, 1, 1, 1), x);
          },
          2, 3, 24, 16, split, 4);
    }
    DYNAMIC_SECTION("a strided and a dilated convolution, split " << split.str()) {
      compare_layers([&](nn::Graph& g) { g.add("b", conv(4, 3, 1, 2, 2), g.add("a", conv(4, 3, 2, 1, 1), 0)); }, 2, 3,
                     24, 16, split, 4);
    }
    DYNAMIC_SECTION("pool, transposed convolution, concat, split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            const int a = g.add("a", conv(4, 3, 1, 1, 1), 0);
            int x = g.add("pool", nn::max_pool(2, 2), a);
            x = g.add("mid", conv(8, 3, 1, 1, 1), x);
            x = g.add("up", nn::conv_transpose2d({4, 2, 2, 0, 0, true}), x);
            x = g.add("cat", nn::concat(), {x, a});
            g.add("out", conv(3, 1, 1, 0, 1), x);
          },
          2, 3, 24, 16, split, 4);
    }
  }
}

TEST_CASE("the climate U-Net split over rows and columns computes what it computes unsplit", "[spatial]") {
  const nn::ModelSpec spec = climate_unet();
  const std::vector<Batch> batches{random_batch(2, 16, 96, 144, 3, 1)};
  const RankRun whole = run_split(spec, batches, {1, 1}, 1, 0.0f);
  for (const SpatialSplit split : {SpatialSplit{2, 1}, SpatialSplit{3, 1}, SpatialSplit{4, 1}, SpatialSplit{1, 2},
                                   SpatialSplit{2, 2}}) {
    DYNAMIC_SECTION("split " << split.str()) {
      const RankRun got = run_split(spec, batches, split, 1, 0.0f);
      INFO("loss unsplit " << whole.losses[0] << ", split " << got.losses[0]);
      CHECK(std::fabs(got.losses[0] - whole.losses[0]) <= 1e-5 * std::fabs(whole.losses[0]));
      require_close_per_tensor(got.grads, whole.grads, whole.param_info, 1e-5, "gradient");
      std::vector<nn::ParamInfo> state_tensors;
      // The running statistics: one tensor per batch norm's mean and variance.
      {
        auto g = nn::make_model(spec, Shape(1, 16, 96, 144));
        g->setup(2);
        state_tensors = g->state_info();
      }
      require_close_per_tensor(got.state, whole.state, state_tensors, 1e-5, "running statistic");
      // `squall model --spatial`'s halo bytes are what the split sent, forward and backward.
      const double predicted =
          perf::halo_bytes_per_sample(perf::model_cost(spec, 16, 96, 144), split, 4) * static_cast<double>(2);
      INFO("halo bytes sent " << got.halo_bytes << ", predicted " << predicted);
      CHECK(static_cast<double>(got.halo_bytes) == predicted);
    }
  }
}

TEST_CASE("the U-Net on DeepCAM's 768 x 1152 x 16 split evenly and unevenly computes what it computes unsplit",
          "[spatial]") {
  // One sample of DeepCAM's size: 48 blocks of 16 rows, 72 of 16 columns (depth 4). [5, 1]
  // cuts 160, 160, 160, 144, 144 rows.
  // Tolerance 5e-4 of each tensor's largest value, not the 1e-5 of 96 x 144: the unsplit
  // reference sums each weight and bias gradient over 884,736 pixels in float (oneDNN's
  // reductions), an error of order sqrt(N) x eps = 6e-5 of the terms, and the transposed
  // convolutions' bias gradients cancel to a tenth of their terms' size, which magnifies it
  // relative to the result (measured worst: 1.8e-4, up0.upconv.bias under [2, 2]; the loss
  // agrees to 1e-7). The split sums each tile's share in double, so the difference is the
  // reference's rounding, not the split's.
  const nn::ModelSpec spec = climate_unet();
  const std::vector<Batch> batches{random_batch(1, 16, 768, 1152, 3, 5)};
  const RankRun whole = run_split(spec, batches, {1, 1}, 1, 0.0f);
  for (const SpatialSplit split : {SpatialSplit{2, 1}, SpatialSplit{5, 1}, SpatialSplit{2, 2}}) {
    DYNAMIC_SECTION("split " << split.str()) {
      const RankRun got = run_split(spec, batches, split, 1, 0.0f);
      INFO("loss unsplit " << whole.losses[0] << ", split " << got.losses[0]);
      CHECK(std::fabs(got.losses[0] - whole.losses[0]) <= 1e-5 * std::fabs(whole.losses[0]));
      require_close_per_tensor(got.grads, whole.grads, whole.param_info, 5e-4, "gradient");
      auto g = nn::make_model(spec, Shape(1, 16, 768, 1152));
      g->setup(1);
      require_close_per_tensor(got.state, whole.state, g->state_info(), 1e-5, "running statistic");
    }
  }
}

TEST_CASE("a split run repeats bit for bit, and trains as the unsplit model over 50 steps", "[spatial]") {
  const nn::ModelSpec spec = climate_unet();
  std::vector<Batch> batches;
  for (uint64_t s = 0; s < 3; ++s) batches.push_back(random_batch(1, 16, 96, 144, 3, 20 + s));
  const RankRun whole = run_split(spec, batches, {1, 1}, 50, 0.02f);
  const RankRun a = run_split(spec, batches, {2, 2}, 50, 0.02f);
  const RankRun b = run_split(spec, batches, {2, 2}, 50, 0.02f);
  CHECK(a.losses == b.losses);
  CHECK(a.params == b.params);
  REQUIRE(whole.losses.size() == 50);
  CHECK(whole.losses.back() < whole.losses.front());  // it learned something
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    INFO("step " << i << ": unsplit " << whole.losses[i] << ", split " << a.losses[i]);
    CHECK(std::fabs(a.losses[i] - whole.losses[i]) <= 1e-4 * std::fabs(whole.losses[i]));
  }
}

TEST_CASE("a split the model cannot run is refused naming the node and why", "[spatial]") {
  // More tiles than the sample has blocks of the model's stride.
  REQUIRE_THROWS_WITH(SpatialPlace::make({4, 1}, 0, 96, 160, 32), Catch::Contains("at most 3"));
  // A classifier ends in features of no pixels.
  nn::ModelSpec resnet;
  resnet.name = "resnet20";
  resnet.classes = 10;
  auto g = nn::make_model(resnet, Shape(1, 3, 32, 32));
  ThreadTileHub hub(2);
  ThreadTileComm comm(hub, 0);
  g->set_tile(SpatialPlace::make({2, 1}, 0, 32, 32, 4), &comm);
  REQUIRE_THROWS_WITH(g->setup(1), Catch::Contains("parallel.spatial") && Catch::Contains("'fc'") &&
                                       Catch::Contains("value per pixel"));
  // A flatten would need every pixel of the sample on each rank.
  nn::Graph flat(Shape(1, 4, 16, 16));
  flat.add("relu", nn::relu(), flat.add("flatten", nn::flatten(), nn::Graph::k_input));
  flat.add("up", nn::upsample_bilinear(16, 16), flat.size() - 1);
  flat.set_tile(SpatialPlace::make({2, 1}, 0, 16, 16, 1), &comm);
  REQUIRE_THROWS_WITH(flat.setup(1), Catch::Contains("'flatten'"));
  // A reach across the wrapped edge wider than the whole sample.
  nn::Graph wide(Shape(1, 4, 16, 4));
  wide.add("dilated", nn::conv2d({4, 3, 1, 6, 6, true, nn::Init::uniform_fan_in}), nn::Graph::k_input);
  wide.set_wrap_columns(true);
  REQUIRE_THROWS_WITH(wide.setup(1), Catch::Contains("'dilated'") && Catch::Contains("wider than the sample") &&
                                         Catch::Contains("periodic_longitude"));
}

TEST_CASE("halos matched by order, as NCCL matches them, pair up whatever order a rank builds its lists in",
          "[spatial]") {
  // Every tile's halo plan for a 3x3 convolution of dilation `dil` on an h x w tensor; each
  // rank's sends and receives as TileHalos makes them (peer, tag from the block's shift, the
  // block's size), shuffled, then put in pair order: a sender's k-th message to a peer must be
  // the peer's k-th receive from it, tag and size.
  struct Case {
    SpatialSplit split;
    int64_t h, w, dil;
    bool wrap;
  };
  const std::vector<Case> cases = {{{1, 2}, 16, 16, 1, true},   // two blocks a pair: east and across the date line
                                   {{1, 3}, 12, 24, 2, true},   // and a tile's own wrap
                                   {{4, 1}, 16, 8, 6, false},   // multi-hop: the reach passes the next tile
                                   {{2, 2}, 16, 16, 3, true}};  // corners, and both wraps
  bool order_mattered = false;
  std::mt19937 rng(11);
  for (const Case& k : cases) {
    INFO("split " << k.split.str() << ", " << k.h << " x " << k.w << ", dilation " << k.dil
                  << (k.wrap ? ", wrapped" : ""));
    using Message = nn::TileComm::Message;
    std::vector<std::vector<Message>> sends, receives;
    for (int64_t r = 0; r < k.split.ranks(); ++r) {
      const SpatialPlace place = SpatialPlace::make(k.split, r, k.h, k.w, 1, k.wrap);
      const nn::TensorTile t = nn::tensor_tile(place, k.h, k.w);
      const nn::NeededCells needed = [&](int64_t row, int64_t col) {
        const Span ys = t.row_spans[static_cast<size_t>(row)], xs = t.col_spans[static_cast<size_t>(col)];
        return nn::within_tensor({ys.begin - k.dil, ys.end + k.dil, xs.begin - k.dil, xs.end + k.dil}, k.h, k.w,
                                 k.wrap);
      };
      const nn::TileHalos::Plan plan = nn::TileHalos::plan(t, needed);
      std::vector<Message> out, in;
      for (const auto& b : plan.sends)
        if (b.peer != r) out.push_back({b.peer, b.shift + 1, nullptr, static_cast<size_t>(b.cells.rows() * b.cells.cols())});
      for (const auto& b : plan.receives)
        if (b.peer != r) in.push_back({b.peer, b.shift + 1, nullptr, static_cast<size_t>(b.cells.rows() * b.cells.cols())});
      std::shuffle(out.begin(), out.end(), rng);
      std::shuffle(in.begin(), in.end(), rng);
      sends.push_back(out);
      receives.push_back(in);
    }
    const auto between = [](const std::vector<Message>& list, int64_t peer, bool ordered) {
      std::vector<std::pair<int64_t, size_t>> seq;
      const std::vector<size_t> order = ordered ? nn::TileComm::pair_order(list) : [&] {
        std::vector<size_t> i(list.size());
        for (size_t j = 0; j < i.size(); ++j) i[j] = j;
        return i;
      }();
      for (const size_t i : order)
        if (list[i].peer == peer) seq.emplace_back(list[i].tag, list[i].bytes);
      return seq;
    };
    for (int64_t a = 0; a < k.split.ranks(); ++a)
      for (int64_t b = 0; b < k.split.ranks(); ++b) {
        if (a == b) continue;
        INFO("messages from group rank " << a << " to " << b);
        CHECK(between(sends[static_cast<size_t>(a)], b, true) == between(receives[static_cast<size_t>(b)], a, true));
        if (between(sends[static_cast<size_t>(a)], b, false) != between(receives[static_cast<size_t>(b)], a, false))
          order_mattered = true;
      }
    // Sorted by peer, then tag.
    for (const auto& list : sends) {
      const std::vector<size_t> o = nn::TileComm::pair_order(list);
      for (size_t i = 1; i < o.size(); ++i)
        CHECK(std::make_pair(list[o[i - 1]].peer, list[o[i - 1]].tag) < std::make_pair(list[o[i]].peer, list[o[i]].tag));
    }
  }
  // The shuffled lists did not pair up by themselves somewhere: the test can fail.
  CHECK(order_mattered);
}

TEST_CASE("each layer DeepLabv3+ adds runs on tiles as it runs unsplit", "[spatial]") {
  const auto conv = [](int64_t k, int64_t kernel, int64_t stride, int64_t pad, int64_t dil, bool bias = true) {
    return nn::conv2d({k, kernel, stride, pad, dil, bias, nn::Init::uniform_fan_in});
  };
  for (const SpatialSplit split : {SpatialSplit{2, 1}, SpatialSplit{1, 2}, SpatialSplit{2, 2}, SpatialSplit{4, 1},
                                   SpatialSplit{2, 3}}) {
    DYNAMIC_SECTION("a dilation wider than a neighbour's tile (halos from the tiles beyond), split " << split.str()) {
      // 4-row tiles at [4, 1]: the dilation of 6 reaches 6 rows, across the next tile into
      // the one beyond.
      compare_layers([&](nn::Graph& g) { g.add("b", conv(4, 3, 1, 6, 6), g.add("a", conv(4, 3, 1, 1, 1), 0)); }, 2, 3,
                     16, 18, split, 1);
    }
    DYNAMIC_SECTION("image pooling: a sum over the group, whole features, a broadcast back, split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            const int a = g.add("a", conv(16, 3, 1, 1, 1), 0);
            int p = g.add("pool", nn::global_avg_pool(), a);
            p = g.add("fc", nn::linear(8), p);
            p = g.add("relu", nn::relu(), p);
            p = g.add("up", nn::upsample_bilinear(24, 18), p);
            const int x = g.add("cat", nn::concat(), {a, p});
            g.add("out", conv(3, 1, 1, 0, 1), x);
          },
          2, 3, 24, 18, split, 1);
    }
    DYNAMIC_SECTION("wrapped columns: convolutions and upsampling read across the date line, split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            g.set_wrap_columns(true);
            int x = g.add("a", conv(16, 3, 2, 1, 1), 0);
            x = g.add("b", conv(16, 3, 1, 4, 4), x);
            x = g.add("up2", nn::upsample_bilinear(24, 36), x);
            g.add("c", conv(3, 3, 1, 1, 1), x);
          },
          2, 3, 24, 36, split, 2);
    }
    DYNAMIC_SECTION("bilinear upsampling by 2 and 4 (halos of one row and column), split " << split.str()) {
      compare_layers(
          [&](nn::Graph& g) {
            int x = g.add("a", conv(16, 3, 2, 1, 1), 0);
            x = g.add("b", conv(16, 3, 2, 1, 1), x);
            const int half = g.add("up2", nn::upsample_bilinear(12, 18), x);
            x = g.add("c", conv(3, 3, 1, 1, 1), half);
            g.add("up4", nn::upsample_bilinear(48, 72), x);
          },
          2, 3, 48, 72, split, 4);
    }
  }
}

TEST_CASE("DeepLabv3+ on DeepCAM's 768 x 1152 x 16 split up to 8 ways computes what it computes unsplit",
          "[spatial][deeplab][slow]") {
  // [slow]: its own CTest entry only, not again in the runs of every case on asynchronous
  // streams (9 GiB: the unsplit model and eight tiles held at once).
  // The model at output stride 8 has 96 x 144 features for its ASPP, whose dilation-18 branch
  // reaches 18 rows: at [8, 1] a tile has 12, so its halos come from the next two tiles.
  // The loss and the running statistics agree within 1e-5. The gradients agree within 5e-2
  // of each tensor's largest value, not 1e-5: the split recomputes each tile's edges with
  // plans of their own, whose float rounding differs from the unsplit plan's, and where a
  // batch norm's output lies within that rounding of zero its ReLU's mask flips, which moves
  // the gradients by that pixel's whole share (the derivative is discontinuous there; the
  // forward values are not). Which pixels flip depends on the data and the CPU's kernels
  // (measured worst: 1.8e-2, enc3.block1.b.conv.weight at [4, 1] and [8, 1] on this sample; 7e-3
  // on two; with other data none flip and every tensor agrees within 1e-5). Each layer's tile form is held to 1e-5 on small tiles
  // above ("each layer DeepLabv3+ adds"), where no mask flips.
  // aspp.pool.fc's weight and bias are left out: with one sample their gradients are zero but
  // for rounding (the pooled features add one value to every pixel of a channel of
  // aspp.project, whose batch norm removes it). One sample: the test's threads hold the
  // unsplit model and eight tiles at once, in the memory of a CI machine.
  nn::ModelSpec spec;
  spec.name = "deeplabv3plus";
  spec.classes = 3;
  const std::vector<Batch> batches{random_batch(1, 16, 768, 1152, 3, 9)};
  const RankRun whole = run_split(spec, batches, {1, 1}, 1, 0.0f);
  auto g = nn::make_model(spec, Shape(1, 16, 768, 1152));
  g->setup(1);
  for (const SpatialSplit split : {SpatialSplit{2, 1}, SpatialSplit{4, 1}, SpatialSplit{8, 1}, SpatialSplit{2, 2}}) {
    DYNAMIC_SECTION("split " << split.str()) {
      const RankRun got = run_split(spec, batches, split, 1, 0.0f);
      INFO("loss unsplit " << whole.losses[0] << ", split " << got.losses[0]);
      CHECK(std::fabs(got.losses[0] - whole.losses[0]) <= 1e-5 * std::fabs(whole.losses[0]));
      std::vector<nn::ParamInfo> tensors;
      for (const nn::ParamInfo& p : whole.param_info)
        if (p.name.rfind("aspp.pool.fc.", 0) != 0) tensors.push_back(p);
      require_close_per_tensor(got.grads, whole.grads, tensors, 5e-2, "gradient");
      require_close_per_tensor(got.state, whole.state, g->state_info(), 1e-5, "running statistic");
      // `squall model --spatial`'s halo bytes are what the split sent (both passes), multi-hop
      // and the upsamplings' halos included.
      const double predicted = perf::halo_bytes_per_sample(perf::model_cost(spec, 16, 768, 1152), split, 4);
      INFO("halo bytes sent " << got.halo_bytes << ", predicted " << predicted);
      CHECK(static_cast<double>(got.halo_bytes) == predicted);
    }
  }
}

TEST_CASE("DeepLabv3+ split 8 ways trains as the unsplit model over 20 steps", "[spatial][deeplab]") {
  // 192 x 288: the ASPP's 24 rows over 8 ranks are 3 rows a tile, so the dilation-18 branch
  // takes its halos from six tiles each way.
  nn::ModelSpec spec;
  spec.name = "deeplabv3plus";
  spec.classes = 3;
  spec.width = 8;
  std::vector<Batch> batches;
  for (uint64_t s = 0; s < 3; ++s) batches.push_back(random_batch(1, 16, 192, 288, 3, 40 + s));
  const RankRun whole = run_split(spec, batches, {1, 1}, 20, 0.02f);
  const RankRun split = run_split(spec, batches, {8, 1}, 20, 0.02f);
  REQUIRE(whole.losses.size() == 20);
  CHECK(whole.losses.back() < whole.losses.front());  // it learned something
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    INFO("step " << i << ": unsplit " << whole.losses[i] << ", split " << split.losses[i]);
    CHECK(std::fabs(split.losses[i] - whole.losses[i]) <= 1e-4 * std::fabs(whole.losses[i]));
  }
}


namespace {

// The whole output of `spec` (forward, batch statistics) for the samples of `b` as one rank
// or the ranks of `split` (threads), its tiles put together.
Batch forward_whole(const nn::ModelSpec& spec, const Batch& b, SpatialSplit split) {
  const int64_t multiple = nn::input_multiple(spec);
  std::vector<Batch> tiles(static_cast<size_t>(split.ranks()));
  ThreadTileHub hub(split.ranks());
  const std::string errors = on_every_rank(split.ranks(), [&](int64_t r) {
    auto backend = make_test_backend(1);
    backend->bind_calling_thread(1);
    auto g = nn::make_model(spec, Shape(1, b.c, b.h, b.w));
    ThreadTileComm comm(hub, r);
    const SpatialPlace place = SpatialPlace::make(split, r, b.h, b.w, multiple);
    if (split.split()) g->set_tile(place, &comm);
    g->build(*backend, b.n, 7);
    auto s = backend->create_stream();
    const Batch in = split.split() ? crop(b, place.rows(), place.cols()) : b;
    backend->copy_from_host(*s, g->input().f32(), in.images.data(), in.images.size());
    nn::RunMode mode;
    g->forward(*s, mode);
    const Shape o = g->output_shape();
    Batch& t = tiles[static_cast<size_t>(r)];
    t = Batch{o.n(), o.c(), o.h(), o.w(), std::vector<float>(static_cast<size_t>(o.numel())), {}};
    backend->copy_to_host(*s, t.images.data(), g->output().f32(), t.images.size());
    backend->synchronize(*s);
  });
  INFO(errors);
  REQUIRE(errors.empty());
  const Batch& t0 = tiles[0];
  Batch whole{b.n, t0.c, b.h, b.w, std::vector<float>(static_cast<size_t>(b.n * t0.c * b.h * b.w)), {}};
  for (int64_t r = 0; r < split.ranks(); ++r) {
    const SpatialPlace p = SpatialPlace::make(split, r, b.h, b.w, multiple);
    const Batch& t = tiles[static_cast<size_t>(r)];
    size_t k = 0;
    for (int64_t i = 0; i < b.n; ++i)
      for (int64_t ch = 0; ch < t.c; ++ch)
        for (int64_t y = p.rows().begin; y < p.rows().end; ++y)
          for (int64_t x = p.cols().begin; x < p.cols().end; ++x)
            whole.images[static_cast<size_t>(((i * t.c + ch) * b.h + y) * b.w + x)] = t.images[k++];
  }
  return whole;
}

// b with every row rolled east by `by` columns (labels too).
Batch roll_columns(const Batch& b, int64_t by) {
  Batch r = b;
  for (int64_t i = 0; i < b.n * b.c; ++i)
    for (int64_t y = 0; y < b.h; ++y)
      for (int64_t x = 0; x < b.w; ++x)
        r.images[static_cast<size_t>((i * b.h + y) * b.w + (x + by) % b.w)] =
            b.images[static_cast<size_t>((i * b.h + y) * b.w + x)];
  return r;
}

struct Difference {
  double worst = 0, largest = 0;
  int64_t mask_changes = 0;  // pixels whose class (argmax) differs where one class leads by 1e-3
};
Difference difference(const Batch& a, const Batch& b) {
  Difference d;
  for (size_t i = 0; i < a.images.size(); ++i) {
    d.largest = std::max(d.largest, static_cast<double>(std::fabs(b.images[i])));
    d.worst = std::max(d.worst, static_cast<double>(std::fabs(a.images[i] - b.images[i])));
  }
  const int64_t hw = a.h * a.w;
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      const auto at = [&](const Batch& x, int64_t ch) { return x.images[static_cast<size_t>((i * x.c + ch) * hw + p)]; };
      int64_t ca = 0, cb = 0;
      for (int64_t ch = 1; ch < a.c; ++ch) {
        if (at(a, ch) > at(a, ca)) ca = ch;
        if (at(b, ch) > at(b, cb)) cb = ch;
      }
      float margin = 1e30f;
      for (int64_t ch = 0; ch < b.c; ++ch)
        if (ch != cb) margin = std::min(margin, at(b, cb) - at(b, ch));
      if (ca != cb && margin > 1e-3f) ++d.mask_changes;
    }
  return d;
}

}  // namespace

TEST_CASE("with periodic longitude a field rolled by half its width gives masks rolled with it, with zeros a seam",
          "[spatial][periodic]") {
  // A field whose features cross the date line: the model sees the same globe from another
  // longitude. Every layer's stride divides half the width (80 columns: 5 blocks of the
  // U-Net's 16, 10 of DeepLab's 8), so with the columns wrapped the
  // model commutes with the roll (up to the order of float sums).
  for (const std::string model : {"unet", "deeplabv3plus"}) {
    nn::ModelSpec spec = model == "unet" ? climate_unet() : nn::ModelSpec{};
    if (model == "deeplabv3plus") {
      spec.name = model;
      spec.classes = 3;
      spec.width = 8;
    }
    const Batch field = random_batch(1, 16, 96, 160, 3, 31);
    const Batch rolled = roll_columns(field, 80);
    DYNAMIC_SECTION(model << ", zeros: the seam shows") {
      spec.padding = nn::ModelPadding::zeros;
      const Difference d = difference(forward_whole(spec, rolled, {1, 1}), roll_columns(forward_whole(spec, field, {1, 1}), 80));
      INFO("worst " << d.worst << " of " << d.largest << ", " << d.mask_changes << " pixels change class");
      CHECK(d.worst > 1e-2 * d.largest);
      CHECK(d.mask_changes > 0);
    }
    for (const SpatialSplit split : {SpatialSplit{1, 1}, SpatialSplit{1, 2}, SpatialSplit{2, 2}, SpatialSplit{1, 3}}) {
      DYNAMIC_SECTION(model << ", periodic_longitude, split " << split.str()) {
        spec.padding = nn::ModelPadding::periodic_longitude;
        const Batch a = forward_whole(spec, field, split);
        const Difference d = difference(forward_whole(spec, rolled, split), roll_columns(a, 80));
        INFO("rolled: worst " << d.worst << " of " << d.largest << ", " << d.mask_changes << " pixels change class");
        CHECK(d.worst <= 1e-4 * d.largest);
        CHECK(d.mask_changes == 0);
        if (split.split()) {  // and the split computes what one rank computes
          const Difference s = difference(a, forward_whole(spec, field, {1, 1}));
          INFO("split against one rank: worst " << s.worst << " of " << s.largest);
          CHECK(s.worst <= 1e-5 * s.largest);
        }
      }
    }
  }
}
