// The memory a rank needs before it trains (src/train/memory_need.hpp): the parts at a tile
// against the whole sample's, the batch, the split that fits a limit and the refusal that
// names it, run.memory_limit's sizes, and the estimate against the peak memory of real
// training steps of the climate U-Net, measured in a process of their own.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <barrier>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi/sum.hpp"
#include "src/config/config.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/optim/optimizer.hpp"
#include "src/parallel/learners.hpp"
#include "src/train/memory_need.hpp"
#include "tests/support/process.hpp"
#include "tests/support/spatial_batch.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/thread_tile_comm.hpp"

namespace {

using namespace squall;
using Catch::Contains;
using nn::Shape;
using nn::SpatialSplit;
using train::MemoryNeed;
using train::MemoryQuery;

// The CPU backend's capabilities (fusion, blocked layout), as a run would plan with them.
nn::Capabilities cpu_caps() {
  static const nn::Capabilities caps = cpu::CpuBackend(cpu::CpuBackendOptions{1, false, std::nullopt}).capabilities();
  return caps;
}

// The climate U-Net on h x w samples of 16 channels, trained with Adam in f32, blocked.
MemoryQuery climate(int64_t h, int64_t w, int64_t batch, SpatialSplit split = {}) {
  MemoryQuery q;
  q.model = testing::climate_unet();
  q.sample = Shape(1, 16, h, w);
  q.batch = batch;
  q.split = split;
  q.layout = nn::Layout::blocked;
  q.optimizer = optim::OptimizerKind::adam;
  q.caps = cpu_caps();
  return q;
}

// VmRSS or VmHWM of this process, in bytes.
size_t status_bytes(const std::string& field) {
  const train::ProcessMemory m = train::process_memory();
  const size_t bytes = field == "VmHWM" ? m.peak : m.resident;
  if (bytes == 0) throw Error("no " + field + " in /proc/self/status");
  return bytes;
}

// The CPU backend, counting the bytes its buffers hold at most (the graph's, the optimizer's,
// the group's, the halos': what the estimate counts exactly; not oneDNN's own memory).
class CountingBackend final : public cpu::CpuBackend {
 public:
  explicit CountingBackend(int threads) : cpu::CpuBackend(cpu::CpuBackendOptions{threads, false, std::nullopt}) {}
  nn::Buffer allocate_memory(size_t count, nn::DType dtype) override {
    nn::Buffer inner = cpu::CpuBackend::allocate_memory(count, dtype);
    const size_t bytes = inner.bytes();
    m_live += bytes;
    m_most = std::max(m_most, m_live);
    std::shared_ptr<void> owner(inner.raw(), [inner, bytes, this](void*) { m_live -= bytes; });
    return nn::Buffer(inner.raw(), count, dtype, std::move(owner));
  }
  size_t most() const { return m_most; }

 private:
  size_t m_live = 0, m_most = 0;
};

}  // namespace

TEST_CASE("a rank's memory at a tile of [2, 1]: half the activations, the same parameters, and halos", "[memory]") {
  const MemoryNeed whole = train::memory_need(climate(96, 144, 2));
  const MemoryNeed half = train::memory_need(climate(96, 144, 2, {2, 1}));
  INFO(whole.text() << "\n" << half.text());
  CHECK(whole.tile_h == 96);
  CHECK(half.tile_h == 48);
  CHECK(half.tile_w == 144);
  // Every activation of a tile is half the whole one's (up to each view's 256-byte alignment).
  const double ratio = static_cast<double>(half.activations) / static_cast<double>(whole.activations);
  CHECK(ratio > 0.49);
  CHECK(ratio < 0.51);
  CHECK(half.parameters == whole.parameters);
  CHECK(half.gradients == whole.gradients);
  CHECK(half.optimizer == whole.optimizer);
  CHECK(whole.halos == 0);
  CHECK(half.halos > 0);
  // A halo is a row of each 3x3 convolution's input, with its edge strips a few rows: far less
  // than the tile. Each such convolution keeps a copy of its weight gradients besides.
  CHECK(half.halos > half.gradients / 2);
  CHECK(half.halos < half.gradients + half.activations / 4);
  // Each edge strip has a plan of its own, and each convolution on a tile a copy of its weight
  // gradients: at this small size they outweigh half the activations; on a larger sample, the
  // activations dominate.
  const MemoryNeed large = train::memory_need(climate(384, 576, 2));
  const MemoryNeed large_half = train::memory_need(climate(384, 576, 2, {2, 1}));
  INFO(large.text() << "\n" << large_half.text());
  CHECK(large_half.total() < large.total() * 6 / 10);
  CHECK(large_half.total() > large.total() / 2);
  // Adam keeps two floats per parameter; the gradients one float per arena float.
  CHECK(whole.optimizer > whole.gradients);
  CHECK(whole.optimizer <= 2 * whole.gradients);
  CHECK_THAT(whole.text(), Contains("per rank: ") && Contains(" MiB (activations ") && Contains("optimizer") &&
                               Contains("workspace"));
  // A [4, 1] split's middle rank has neighbours both ways: more halo than rank 0.
  MemoryQuery q = climate(128, 144, 2, {4, 1});
  q.group_rank = 0;
  const MemoryNeed top = train::memory_need(q);
  q.group_rank = 1;
  const MemoryNeed middle = train::memory_need(q);
  CHECK(middle.halos > top.halos);
  q.group_rank = -1;
  CHECK(train::memory_need(q).total() == std::max(top.total(), middle.total()));
}

TEST_CASE("a rank's memory grows with the batch, the learners and the precision's copies", "[memory]") {
  const MemoryNeed two = train::memory_need(climate(96, 144, 2));
  const MemoryNeed four = train::memory_need(climate(96, 144, 4));
  CHECK(four.total() > two.total());
  CHECK(static_cast<double>(four.activations) / static_cast<double>(two.activations) == Approx(2.0).epsilon(0.01));
  CHECK(four.parameters == two.parameters);
  MemoryQuery q = climate(96, 144, 2);
  q.learners = 2;
  const MemoryNeed learners = train::memory_need(q);
  CHECK(learners.activations == 2 * two.activations);
  CHECK(learners.optimizer == 2 * two.optimizer);
  CHECK(learners.sums == two.sums);  // one per group
  q = climate(96, 144, 2);
  q.eval_batch = 2;
  const MemoryNeed evaluating = train::memory_need(q);
  CHECK(evaluating.evaluation > 0);
  CHECK(evaluating.evaluation < two.activations);  // forward only, values shared by lifetime
  q = climate(96, 144, 2);
  q.precision = nn::DType::bf16;
  q.layout = nn::Layout::nchw;
  const MemoryNeed bf16 = train::memory_need(q);
  CHECK(bf16.mirrors > 0);
  CHECK(bf16.activations < two.activations);
}

TEST_CASE("the planned activation memory is what build() allocates", "[memory]") {
  auto backend = test::make_test_backend(1);
  for (const nn::Layout layout : {nn::Layout::nchw, nn::Layout::blocked}) {
    auto planned = nn::make_model(testing::climate_unet(), Shape(1, 16, 64, 96));
    planned->set_layout(layout);
    planned->setup(2);
    const size_t unplanned = planned->activation_bytes();
    planned->plan_layouts(backend->capabilities());
    auto built = nn::make_model(testing::climate_unet(), Shape(1, 16, 64, 96));
    built->set_layout(layout);
    built->build(*backend, 2, 1);
    INFO("layout " << nn::layout_name(layout));
    CHECK(planned->activation_bytes() == built->activation_bytes());
    CHECK(planned->fused_nodes() == built->fused_nodes());
    if (built->fused_nodes() > 0) CHECK(planned->activation_bytes() < unplanned);
  }
}

TEST_CASE("every optimizer keeps the state floats per parameter that memory planning counts", "[memory]") {
  auto backend = test::make_test_backend(1);
  std::vector<float> w(10, 0.5f), g(10, 0.1f);
  nn::Buffer wb = backend->allocate(10), gb = backend->allocate(10);
  for (const auto kind : {optim::OptimizerKind::sgd, optim::OptimizerKind::adam, optim::OptimizerKind::adamw,
                          optim::OptimizerKind::lamb}) {
    optim::OptimizerOptions o;
    o.name = kind;
    std::vector<optim::ParamGroup> groups{{wb.data(), gb.data(), 7, true, "a"},
                                          {wb.data() + 7, gb.data() + 7, 3, false, "b"}};
    const auto opt = optim::make_optimizer(o, *backend, groups);
    size_t floats = 0;
    for (const auto& s : opt->state()) floats += s.count;
    CHECK(floats == static_cast<size_t>(10 * optim::state_floats_per_parameter(kind)));
  }
}

TEST_CASE("the split that fits a limit: the fewest ranks, rows first, and none for a limit too small", "[memory]") {
  const MemoryQuery q = climate(384, 576, 2);
  const MemoryNeed whole = train::memory_need(q);
  CHECK_FALSE(train::fitting_split(q, whole.total() - 1, 1));
  const auto same = train::fitting_split(q, whole.total());
  REQUIRE(same);
  CHECK(same->split == SpatialSplit{1, 1});

  // Parameters, gradients and optimizer state stay whole on every rank: a limit between them
  // and the whole need takes a few ranks.
  const size_t fixed = whole.parameters + whole.gradients + whole.optimizer + whole.sums;
  const size_t limit = fixed + (whole.total() - fixed) * 2 / 5;
  const auto fits = train::fitting_split(q, limit);
  REQUIRE(fits);
  INFO("limit " << limit << ": " << fits->split.str() << " " << fits->text());
  CHECK(fits->total() <= limit);
  CHECK(fits->split.ranks() >= 3);
  CHECK(fits->split.cols == 1);  // rows only: the sample has 24 blocks of 16 rows
  // Every split of fewer ranks needs more (or cannot run).
  for (int64_t n = 1; n < fits->split.ranks(); ++n)
    for (int64_t rows = 1; rows <= n; ++rows) {
      if (n % rows != 0) continue;
      MemoryQuery at = q;
      at.split = {rows, n / rows};
      size_t need = 0;
      try {
        need = train::memory_need(at).total();
      } catch (const Error&) {
        continue;  // the model cannot run on these tiles
      }
      INFO(at.split.str());
      CHECK(need > limit);
    }
  // A limit below the parameters alone fits no split.
  CHECK_FALSE(train::fitting_split(q, fixed / 2, 64));

  // A sample of 2 blocks of rows: 4 ranks are [2, 2] ([4, 1] cannot be cut), not [1, 4].
  MemoryQuery flat = climate(32, 1152, 2);
  flat.split = {2, 2};
  const size_t square = train::memory_need(flat).total();
  flat.split = {1, 1};
  const auto four = train::fitting_split(flat, square);
  REQUIRE(four);
  CHECK(four->total() <= square);
  CHECK(four->split.ranks() <= 4);
  if (four->split.ranks() == 4) CHECK(four->split == SpatialSplit{2, 2});
  if (four->split.ranks() == 3) CHECK(four->split == SpatialSplit{1, 3});
}

TEST_CASE("the refusal names run.memory_limit, the figure and the split that would fit", "[memory]") {
  const MemoryQuery q = climate(384, 576, 2);
  const MemoryNeed whole = train::memory_need(q);
  CHECK(train::memory_refusal(whole, whole.total(), std::nullopt).empty());
  const size_t limit = whole.total() * 3 / 4;
  const auto fits = train::fitting_split(q, limit);
  REQUIRE(fits);
  const std::string text = train::memory_refusal(whole, limit, fits);
  INFO(text);
  CHECK_THAT(text, Contains("run.memory_limit (" + train::bytes_text(limit) + ")") &&
                       Contains(train::bytes_text(whole.total())) && Contains("384 x 576") &&
                       Contains("parallel.spatial = [1, 1]") &&
                       Contains("parallel.spatial = " + fits->split.str() + " would fit (" +
                                train::bytes_text(fits->total())) &&
                       Contains(whole.text()));
  const std::string none = train::memory_refusal(whole, 1000, std::nullopt, "the device's memory");
  CHECK_THAT(none, Contains("the device's memory (1000 bytes)") && Contains("no split of at most 64 ranks would fit"));
  CHECK(train::bytes_text(size_t{12} << 30) == "12.0 GiB");
  CHECK(train::bytes_text(size_t{800} << 20) == "800.0 MiB");
}

TEST_CASE("run.memory_limit takes bytes or a size with a unit, and refuses anything else naming the key", "[memory]") {
  using config::load_config;
  CHECK(config::Config{}.run.memory_limit.bytes == 0);
  CHECK(load_config("", {"run.memory_limit=12GiB"}).run.memory_limit.bytes == int64_t{12} << 30);
  CHECK(load_config("", {"run.memory_limit=800MB"}).run.memory_limit.bytes == 800000000);
  CHECK(load_config("", {"run.memory_limit=\"1.5 gib\""}).run.memory_limit.bytes == int64_t{3} << 29);
  CHECK(load_config("", {"run.memory_limit=4096"}).run.memory_limit.bytes == 4096);
  CHECK(load_config("", {"run.memory_limit=\"4096\""}).run.memory_limit.bytes == 4096);
  CHECK(load_config("", {"run.memory_limit=2 TiB"}).run.memory_limit.bytes == int64_t{2} << 40);
  CHECK(load_config("", {"run.memory_limit=64kB"}).run.memory_limit.bytes == 64000);
  CHECK(config::parse_byte_size("512 B", "k") == 512);
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=12G"}),
                      Contains("--set run.memory_limit=12G: run.memory_limit must be a size") &&
                          Contains("\"G\" is not a unit") && Contains("GiB"));
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=GiB"}),
                      Contains("run.memory_limit must be a size") && Contains("does not start with a number"));
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=\"-1GiB\""}),
                      Contains("run.memory_limit must be a size") && Contains("not negative"));
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=-5"}), Contains("run.memory_limit must be >= 0"));
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=1.5"}),
                      Contains("run.memory_limit must be an integer (bytes) or a size with a unit"));
  REQUIRE_THROWS_WITH(load_config("", {"run.memory_limit=99999999 TiB"}), Contains("more than 2^63 bytes"));
  REQUIRE_THROWS_WITH(config::parse_byte_size("12 GiB/s", "run.memory_limit"), Contains("\"GiB/s\" is not a unit"));

  // From a file, with its line; written back as bytes, which read back the same.
  const test::TempDir dir("squall-memory-limit");
  const std::string path = dir.file("x.toml");
  std::ofstream(path) << "[run]\nmemory_limit = \"800 MiB\"\n";
  const config::Config c = load_config(path);
  CHECK(c.run.memory_limit.bytes == int64_t{800} << 20);
  CHECK_THAT(config::to_toml(c), Contains("memory_limit = 838860800\n"));
  CHECK(config::parse_config(config::to_toml(c), "back") == c);
  std::ofstream(path) << "[run]\n\nmemory_limit = \"lots\"\n";
  REQUIRE_THROWS_WITH(load_config(path), Contains(path + ": run.memory_limit must be a size") && Contains("line 3"));
}

// ---- the estimate against the peak of real training steps ------------------------------------

// What SQUALL_MEMORY_PROBE="h w batch rows cols evaluate layout threads" asks: the climate
// U-Net trained for two Adam steps by every rank of a rows x cols split (each a thread with a
// CPU backend of `threads` threads, its learner group, and the group's halo exchange through
// threads), then, unless evaluate is 0, its evaluation graph built and run once; the layout
// blocked or nchw. Prints the growth of the process's peak resident memory (VmHWM) over its
// resident memory once the backends exist, and the most bytes the backends' buffers held: every
// rank's together. Run in a process of its own (below), so that the peak is this work's alone.
TEST_CASE("memory probe (run by the calibration case in a process of its own)", "[.memory-probe]") {
  const char* spec = std::getenv("SQUALL_MEMORY_PROBE");
  if (spec == nullptr) return;
  std::istringstream in(spec);
  int64_t h = 0, w = 0, batch = 0;
  SpatialSplit split;
  int evaluate = 1;
  std::string layout = "blocked";
  int team = 1;
  in >> h >> w >> batch >> split.rows >> split.cols >> evaluate >> layout >> team;
  const nn::ModelSpec model = testing::climate_unet();
  const int64_t ranks = split.ranks();
  testing::ThreadTileHub hub(ranks);
  size_t baseline = 0;
  // The batch each rank trains on, made before the baseline: the loader's, not the model's.
  const testing::Batch whole = testing::random_batch(batch, 16, h, w, 3, 5);
  std::vector<testing::Batch> tiles;
  for (int64_t r = 0; r < ranks; ++r) {
    const nn::SpatialPlace place = nn::SpatialPlace::make(split, r, h, w, nn::input_multiple(model));
    tiles.push_back(testing::crop(whole, place.rows(), place.cols()));
  }
  std::barrier ready(ranks, [&]() noexcept { baseline = status_bytes("VmRSS"); });
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<size_t> allocated(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto backend = std::make_unique<CountingBackend>(team);
      backend->bind_calling_thread(team);
      ready.arrive_and_wait();
      try {
        testing::ThreadTileComm comm(hub, r);
        const nn::SpatialPlace place = nn::SpatialPlace::make(split, r, h, w, nn::input_multiple(model));
        const auto make_graph = [&] {
          auto g = nn::make_model(model, Shape(1, 16, h, w));
          if (split.split()) g->set_tile(place, &comm);
          return g;
        };
        const int64_t th = place.rows().size(), tw = place.cols().size();
        const testing::Batch& tile = tiles[static_cast<size_t>(r)];
        parallel::LearnerGroupOptions o;
        o.threads = team;
        o.layout = layout == "nchw" ? nn::Layout::nchw : nn::Layout::blocked;
        optim::OptimizerOptions adam;
        adam.name = optim::OptimizerKind::adam;
        mpi::OneRankAllreduce alone;
        parallel::LearnerGroup group(*backend, make_graph, batch, batch * th * tw, adam, testing::k_class_weights, o,
                                     alone);
        for (int64_t step = 0; step < 2; ++step)
          group.step({parallel::LearnerBatch{tile.images.data(), tile.labels.data()}}, step, 0.001f);
        if (evaluate == 0) {
          allocated[static_cast<size_t>(r)] = backend->most();
          return;
        }
        nn::Graph& eval = group.eval_graph();
        auto stream = backend->create_stream();
        backend->copy_from_host(*stream, eval.input().f32(), tile.images.data(), tile.images.size());
        nn::RunMode mode;
        mode.train = false;
        eval.forward(*stream, mode);
        backend->synchronize(*stream);
        allocated[static_cast<size_t>(r)] = backend->most();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE(e.empty());
  size_t buffers = 0;
  for (const size_t a : allocated) buffers += a;
  std::printf("memory-probe growth %zu buffers %zu\n", status_bytes("VmHWM") - baseline, buffers);
}

// The figures the workspace estimate was fitted to (src/train/memory_need.cpp) came from this
// probe; here three of them, one of each kind: a whole sample whose evaluation takes oneDNN's
// Winograd kernel on AVX-512 (batch 4), one whose evaluation does not, and a split's training.
// The parts the estimate counts exactly must be the bytes the backends' buffers held (each rank
// also holds the loss's and the finite check's few floats, which it does not count). The total
// must be within 10% of the measured growth: the fit was within 2.5% on AVX-512 and on AVX2, at
// one and two threads, and the rest is for another CPU's cache sizes, by which oneDNN sizes
// its blocks and scratchpads (the issue asks for 15% of a split rank's measured peak). Each
// plan keeping its own scratchpad had made the Winograd case 13% over its estimate on a Xeon
// with AMX; a stream's plans now share one (cpu::CpuStream::scratch). A split
// that evaluates is left out: its ranks share one process here, and oneDNN's primitive cache
// and the allocator's free memory make their evaluation plans cost less than a rank's of its
// own (up to 16% less in all); training alone is not affected.
TEST_CASE("the estimate is close to the peak memory of real training steps", "[memory]") {
  char exe[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  struct Case {
    int64_t h, w, batch;
    SpatialSplit split;
    bool evaluate;
  };
  for (const Case& c : {Case{96, 144, 4, {1, 1}, true}, Case{192, 288, 2, {1, 1}, true},
                        Case{192, 288, 2, {2, 1}, false}}) {
    const std::string spec = std::to_string(c.h) + " " + std::to_string(c.w) + " " + std::to_string(c.batch) + " " +
                             std::to_string(c.split.rows) + " " + std::to_string(c.split.cols) + " " +
                             (c.evaluate ? "1" : "0") + " blocked 1";
    const std::string command = "SQUALL_TEST_CPU_STREAMS=inline OMP_NUM_THREADS=1 SQUALL_MEMORY_PROBE='" + spec +
                                "' '" + std::string(exe, static_cast<size_t>(n)) + "' '[.memory-probe]'";
    const test::ProcessResult r = test::run_command(command);
    INFO(command << "\n" << test::output_tail(r));
    REQUIRE(r.exit_code == 0);
    double measured = 0, buffers = 0;
    const size_t at = r.out.find("memory-probe growth ");
    REQUIRE(at != std::string::npos);
    std::string word;
    std::istringstream(r.out.substr(at + 20)) >> measured >> word >> buffers;
    // Every rank of the split ran in the probe's process: their estimates together.
    double estimate = 0, exact = 0;
    std::string parts;
    for (int64_t rank = 0; rank < c.split.ranks(); ++rank) {
      MemoryQuery q = climate(c.h, c.w, c.batch, c.split);
      q.group_rank = rank;
      q.eval_batch = c.evaluate ? c.batch : 0;
      const MemoryNeed m = train::memory_need(q);
      // The probe has no loader and evaluates from its own vectors: the host batches are not its.
      estimate += static_cast<double>(m.total() - m.input);
      exact += static_cast<double>(m.total() - m.workspace - m.input);
      parts += m.text() + "\n";
    }
    INFO(spec << ": estimate " << estimate / 1048576 << " MiB, measured " << measured / 1048576 << " MiB; exact parts "
              << exact << " bytes, buffers " << buffers << " bytes\n"
              << parts);
    CHECK(buffers >= exact);
    CHECK(buffers - exact <= 64.0 * static_cast<double>(c.split.ranks()));
    CHECK(estimate >= measured * 0.9);
    CHECK(estimate <= measured * 1.1);
  }
}
