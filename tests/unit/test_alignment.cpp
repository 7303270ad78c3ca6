// Every activation view, and every parameter, gradient and state tensor, of every zoo model
// starts on a 256-byte boundary, at every activation type and in both layouts: cuDNN's
// tensor-core kernels need aligned bf16/f16 operands (a view that starts at an odd element of
// a 2-byte type is not even 4-byte aligned), and cuDNN 9 may refuse a misaligned filter or
// bias (a packed arena puts LeNet-5's conv biases 8 bytes in). The arenas' padding is zero and
// stays zero through training steps, and the parameter count is the model's, not the arena's.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/param_arena.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/tiny_model.hpp"

namespace optim = squall::optim;
namespace parallel = squall::parallel;

using namespace squall::nn;

namespace {

struct Case {
  std::string name;
  Shape input;
};
// Shapes whose node sizes are odd multiples of small numbers, so that packed views would
// fall off 256-byte boundaries (lenet5's 6x24x24 is 3456 elements: 6912 bytes in bf16).
const Case k_cases[] = {{"lenet5", Shape(1, 1, 28, 28)},
                        {"resnet20", Shape(1, 3, 28, 28)},
                        {"unet", Shape(1, 16, 32, 48)},
                        {"deeplabv3plus", Shape(1, 16, 32, 48)}};

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % k_arena_alignment == 0; }

// Every float of `arena` that no tensor of `infos` covers, for the padding checks; and the
// checks that the tensors lie in order, apart, inside the arena, each on a boundary.
std::vector<float> padding_of(const std::vector<float>& arena, const std::vector<ParamInfo>& infos) {
  std::vector<bool> covered(arena.size(), false);
  size_t end = 0;
  for (const ParamInfo& p : infos) {
    INFO(p.name << " at " << p.offset << " (" << p.count << " floats)");
    CHECK(p.offset % k_arena_alignment_floats == 0);
    CHECK(p.offset >= end);
    REQUIRE(p.offset + p.count <= arena.size());
    for (size_t i = p.offset; i < p.offset + p.count; ++i) covered[i] = true;
    end = p.offset + p.count;
  }
  std::vector<float> out;
  for (size_t i = 0; i < arena.size(); ++i)
    if (!covered[i]) out.push_back(arena[i]);
  return out;
}

bool all_zero(const std::vector<float>& v) {
  for (float x : v)
    if (x != 0.0f) return false;
  return true;
}

}  // namespace

TEST_CASE("activation views of every zoo model are 256-byte aligned", "[models][alignment]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  for (const Case& c : k_cases)
    for (const DType t : {DType::f32, DType::bf16, DType::f16})
      for (const Layout l : {Layout::nchw, Layout::nhwc}) {
        INFO(c.name << " " << dtype_name(t) << " " << layout_name(l));
        ModelSpec spec;
        spec.name = c.name;
        spec.classes = 3;
        auto g = make_model(spec, c.input);
        g->set_dtype(t);
        g->set_layout(l);
        g->build(*backend, 3, 1);  // batch 3: odd sizes everywhere
        int checked = 0;
        for (int i = 0; i < g->size(); ++i) {
          for (const Tensor& v : {g->node_value(i), g->node_grad(i)}) {
            INFO("node " << g->node_name(i));
            CHECK(reinterpret_cast<uintptr_t>(v.data) % Graph::k_view_alignment == 0);
            ++checked;
          }
        }
        CHECK(checked == 2 * g->size());
        CHECK(g->size() > 5);
      }
}

TEST_CASE("parameter, gradient and state tensors of every zoo model are 256-byte aligned", "[models][alignment]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  auto stream = backend->create_stream();
  for (const Case& c : k_cases)
    for (const DType t : {DType::f32, DType::bf16, DType::f16})
      for (const Layout l : {Layout::nchw, Layout::nhwc}) {
        INFO(c.name << " " << dtype_name(t) << " " << layout_name(l));
        ModelSpec spec;
        spec.name = c.name;
        spec.classes = 3;
        auto g = make_model(spec, c.input);
        g->set_dtype(t);
        g->set_layout(l);
        g->build(*backend, 3, 1);
        REQUIRE(!g->param_info().empty());
        int misaligned = 0;
        for (const ParamInfo& p : g->param_info()) {
          INFO(p.name);
          CHECK(aligned(g->params() + p.offset));
          CHECK(aligned(g->grads() + p.offset));
          misaligned += (p.offset * sizeof(float)) % k_arena_alignment != 0;
        }
        for (const ParamInfo& p : g->state_info()) {
          INFO(p.name);
          CHECK(aligned(g->state() + p.offset));
          misaligned += (p.offset * sizeof(float)) % k_arena_alignment != 0;
        }
        CHECK(misaligned == 0);
        // The two sizes: the model's values, and its arenas with their padding.
        CHECK(g->parameter_count() == packed_count(g->param_info()));
        CHECK(g->state_value_count() == packed_count(g->state_info()));
        CHECK(g->param_arena_floats() % k_arena_alignment_floats == 0);
        CHECK(g->state_arena_floats() % k_arena_alignment_floats == 0);
        CHECK(g->param_arena_floats() >= g->parameter_count());
        // The padding holds zeros from the start, in all three arenas.
        std::vector<float> params(g->param_arena_floats()), grads(params.size()), state(g->state_arena_floats());
        backend->copy_to_host(*stream, params.data(), g->params(), params.size());
        backend->copy_to_host(*stream, grads.data(), g->grads(), grads.size());
        backend->copy_to_host(*stream, state.data(), g->state(), state.size());
        backend->synchronize(*stream);
        CHECK(all_zero(padding_of(params, g->param_info())));
        CHECK(all_zero(padding_of(grads, g->param_info())));
        CHECK(all_zero(padding_of(state, g->state_info())));
        // Round trip through the packed form checkpoints keep.
        const std::vector<float> packed = pack_arena(params, g->param_info());
        CHECK(packed.size() == g->parameter_count());
        CHECK(unpack_arena(packed, g->param_info(), params.size(), "test") == params);
      }
}

TEST_CASE("the parameter counts are the models' own", "[models][alignment]") {
  // The counts PyTorch gives for the same models (docs/model.md); the arenas are larger.
  const struct {
    const char* name;
    Shape input;
    size_t params, state;
  } known[] = {{"lenet5", Shape(1, 1, 28, 28), 61706, 0}, {"resnet20", Shape(1, 1, 28, 28), 272186, 1568}};
  for (const auto& k : known) {
    INFO(k.name);
    ModelSpec spec;
    spec.name = k.name;
    auto g = make_model(spec, k.input);
    g->setup(1);
    CHECK(g->parameter_count() == k.params);
    CHECK(g->state_value_count() == k.state);
    CHECK(g->param_arena_floats() > k.params);  // their tensors do not all end on a boundary
  }
}

TEST_CASE("unpacking a packed arena refuses a wrong length, naming it", "[models][alignment]") {
  std::vector<ParamInfo> infos{{"a.weight", 0, 12, Shape(3, 4, 1, 1)}, {"a.bias", 64, 3, Shape(3, 1, 1, 1)}};
  const std::vector<float> packed{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const std::vector<float> arena = unpack_arena(packed, infos, 128, "test");
  REQUIRE(arena.size() == 128);
  CHECK(arena[11] == 12);
  CHECK(arena[12] == 0);
  CHECK(arena[64] == 13);
  CHECK(arena[66] == 15);
  CHECK(arena[67] == 0);
  CHECK(pack_arena(arena, infos) == packed);
  CHECK_THROWS_WITH(unpack_arena(std::vector<float>(16), infos, 128, "model.h5: dataset central/params"),
                    Catch::Contains("model.h5: dataset central/params holds 16 values") && Catch::Contains("hold 15"));
}

TEST_CASE("the arenas' padding stays zero through training steps", "[learners][alignment]") {
  using namespace squall;
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 4;
  for (const parallel::Algorithm algorithm : {parallel::Algorithm::ssgd, parallel::Algorithm::sma}) {
    INFO(parallel::algorithm_name(algorithm));
    parallel::LearnerGroupOptions o;
    o.algorithm = algorithm;
    o.learners = 2;
    optim::OptimizerConfig opt = test::plain_sgd();
    opt.momentum = 0.9;
    opt.weight_decay = 0.01;
    opt.larc = true;  // per-tensor norms
    parallel::LearnerGroup group(*backend, test::make_tiny_graph, b, b, opt, {}, o, alone);
    for (int64_t step = 0; step < 3; ++step) group.step(test::tiny_step(0, 2, step, b).inputs, step, 0.5f);
    const std::vector<ParamInfo>& info = group.replica_graph(0).param_info();
    const std::vector<float> central = test::on_host(group.central_params(), test::k_tiny_arena);
    CHECK(all_zero(padding_of(central, info)));
    CHECK(!all_zero(central));
    for (int j = 0; j < 2; ++j) {
      CHECK(all_zero(padding_of(test::on_host(group.replica_params(j), test::k_tiny_arena), info)));
      CHECK(all_zero(padding_of(test::on_host(group.replica_graph(j).grads(), test::k_tiny_arena), info)));
    }
  }
}
