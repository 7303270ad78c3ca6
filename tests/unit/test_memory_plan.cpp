// Activation memory (docs/design.md, "Activation memory"): the planner on made-up blocks, and
// every zoo model built with shared memory against the same model with memory of its own per
// value and gradient: the same gradients and logits, bit for bit, at every type and layout, in
// less memory; the forward-only graph (evaluation, prediction) the same way; and the
// forward-only graph against the training graph's forward in evaluation mode, which runs other
// oneDNN primitives (within a tolerance: see check_shared_memory).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/nn/graph.hpp"
#include "src/nn/memory_plan.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/zoo_cases.hpp"

using namespace squall;
using nn::DType;
using nn::Layout;
using nn::MemoryBlock;
using nn::Shape;

TEST_CASE("memory plan: blocks alive at different times share memory, blocks alive together do not",
          "[models][memory]") {
  // a and b never meet: one range for both. c meets both: a range of its own.
  const std::vector<MemoryBlock> blocks{{100, 0, 1}, {100, 2, 3}, {300, 1, 2}};
  const nn::MemoryPlan plan = nn::plan_memory(blocks, 256);
  CHECK(plan.offsets[0] == plan.offsets[1]);
  CHECK(plan.offsets[2] != plan.offsets[0]);
  CHECK(plan.bytes == 256 + 512);
  CHECK(nn::memory_plan_valid(blocks, plan, 256));
  // A block that meets another at one step only still needs its own range.
  const std::vector<MemoryBlock> touching{{256, 0, 2}, {256, 2, 4}};
  CHECK(nn::plan_memory(touching, 256).bytes == 512);
  // And the check itself refuses two live blocks in one range, and a misaligned one.
  nn::MemoryPlan bad = plan;
  bad.offsets[2] = bad.offsets[0];
  CHECK_FALSE(nn::memory_plan_valid(blocks, bad, 256));
  bad = plan;
  bad.offsets[2] += 8;
  CHECK_FALSE(nn::memory_plan_valid(blocks, bad, 256));
  CHECK_THROWS(nn::plan_memory({{10, 3, 2}}, 256));
  CHECK_THROWS(nn::plan_memory(blocks, 100));
}

TEST_CASE("memory plan: random lifetimes get a valid plan no larger than the sum", "[models][memory]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<MemoryBlock> blocks(1 + rng() % 40);
    size_t sum = 0;
    for (MemoryBlock& b : blocks) {
      b.bytes = rng() % 5000;
      b.first = static_cast<int>(rng() % 30);
      b.last = b.first + static_cast<int>(rng() % 10);
      sum += (b.bytes + 63) / 64 * 64;
    }
    const nn::MemoryPlan plan = nn::plan_memory(blocks, 64);
    INFO("trial " << trial);
    REQUIRE(nn::memory_plan_valid(blocks, plan, 64));
    CHECK(plan.bytes <= sum);
  }
}

namespace {

nn::Backend& be() { return test::test_backend(); }

// The logits of a forward in evaluation mode (as bytes, and widened to f32), then (training
// graphs) the parameters' gradients of a training step whose loss gradient is the logits, as bytes.
struct Results {
  std::vector<unsigned char> eval_logits, grads;
  std::vector<float> eval_f32;
};
Results run(nn::Graph& g, nn::Stream& s) {
  const auto x = test::random_floats(static_cast<size_t>(g.input().numel()), 11);
  Results r;
  be().copy_from_host(s, g.input().f32(), x.data(), x.size());
  nn::RunMode eval;
  eval.train = false;
  g.forward(s, eval);
  r.eval_logits = test::bytes_on_host(be(), s, g.output().data, g.output().bytes());
  const auto n = static_cast<size_t>(g.output().numel());
  nn::Buffer wide = be().allocate(n);
  be().convert(s, g.output().data, g.output().dtype, wide.data(), DType::f32, n);
  r.eval_f32 = test::download(be(), wide.data(), n);
  if (g.forward_only()) return r;
  be().copy_from_host(s, g.input().f32(), x.data(), x.size());
  g.forward(s, nn::RunMode{});
  be().copy_bytes(s, g.output_grad().data, g.output().data, g.output().bytes());
  g.backward(s);
  r.grads = test::bytes_on_host(be(), s, g.grads(), g.param_arena_floats() * sizeof(float));
  return r;
}

// The relative difference allowed between the logits of two forwards that sum in different
// orders. f32: sums of hundreds of products differ in their last bits, carried through a
// few dozen layers (3.4e-7 measured on ResNet-20, AVX-512). bf16 and f16 round every layer's
// output, so such a difference moves an output by one rounding of the type now and then:
// 8 unit roundoffs, as tests/unit/test_precision.cpp allows (1.0e-4 measured at f16).
double memory_tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 8 * std::ldexp(1.0, -8);
    case DType::f16: return 8 * std::ldexp(1.0, -11);
    default: return 1e-5;
  }
}

void check_shared_memory(const test::ZooCase& c) {
  auto s = be().create_stream();
  for (const DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Layout l : {Layout::nchw, Layout::nhwc, Layout::blocked}) {
      INFO(c.name << " " << nn::dtype_name(t) << " " << nn::layout_name(l));
      auto own = test::make_zoo_model(c, t, l);
      own->set_memory_reuse(false);
      own->build(be(), 2, 7);
      auto shared = test::make_zoo_model(c, t, l);
      shared->build(be(), 2, 7);
      // Forward-only, unfused: a folded batch norm rounds differently
      // (tests/unit/test_inference_fusion.cpp compares the fused graph).
      auto forward_only = test::make_zoo_model(c, t, l);
      forward_only->set_forward_only(true);
      forward_only->set_fusion(false);
      forward_only->build(be(), 2, 7);
      auto forward_only_own = test::make_zoo_model(c, t, l);
      forward_only_own->set_forward_only(true);
      forward_only_own->set_fusion(false);
      forward_only_own->set_memory_reuse(false);
      forward_only_own->build(be(), 2, 7);
      const Results a = run(*own, *s), b = run(*shared, *s), f = run(*forward_only, *s),
                    fo = run(*forward_only_own, *s);
      // Shared memory against memory of its own: the same graph makes the same plans, so the
      // same kernels run on both sides, and anything but the same bits is a value or gradient
      // overwritten while still needed.
      REQUIRE(a.grads.size() == b.grads.size());
      CHECK(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size()) == 0);
      REQUIRE(a.eval_logits.size() == f.eval_logits.size());
      REQUIRE(f.eval_logits.size() == fo.eval_logits.size());
      CHECK(std::memcmp(a.eval_logits.data(), b.eval_logits.data(), a.eval_logits.size()) == 0);
      CHECK(std::memcmp(fo.eval_logits.data(), f.eval_logits.data(), f.eval_logits.size()) == 0);
      // The forward-only graph against the training graph's forward in evaluation mode: other
      // plans. Its convolutions are oneDNN forward_inference primitives, the training graph's
      // forward_training ones (with their ReLUs as post-ops), and oneDNN picks each one's kernel (on AVX-512 its brgemm
      // kernels for inference and the direct JIT kernel for training; on AVX2 one kernel for
      // both): the same products summed in another order, then rounded to t after each layer.
      // A few roundings of t apart at most; a value freed too early is an O(1) error.
      const double tol = memory_tolerance(t);
      INFO("relative difference " << test::relative_l2(f.eval_f32, a.eval_f32) << ", tolerance " << tol);
      CHECK(test::relative_l2(f.eval_f32, a.eval_f32) < tol);
      // Less memory: gradients shared, and a forward-only graph under half of that (both
      // unfused: a fused ReLU's value is its convolution's, which shrinks the training graph).
      CHECK(shared->activation_bytes() < own->activation_bytes());
      auto shared_unfused = test::make_zoo_model(c, t, l);
      shared_unfused->set_fusion(false);
      shared_unfused->build(be(), 2, 7);
      CHECK(shared->activation_bytes() <= shared_unfused->activation_bytes());
      CHECK(2 * forward_only->activation_bytes() < shared_unfused->activation_bytes());
      CHECK_THROWS(forward_only->backward(*s));
      CHECK_THROWS(forward_only->output_grad());
    }
}

}  // namespace

TEST_CASE("memory plan: every zoo model computes the same bits in shared memory, forward-only too",
          "[models][memory][isa]") {
  for (const test::ZooCase& c : test::small_zoo()) check_shared_memory(c);
}

TEST_CASE("memory plan: DeepLabv3+ on ResNet-50 at DeepCAM's size needs less than half the memory",
          "[models][memory]") {
  // Shapes only, nothing computed: the plan of the full-size model, 16 x 768 x 1152, batch 1.
  nn::ModelSpec spec;
  spec.name = "deeplabv3plus-resnet50";
  spec.classes = 3;
  auto g = nn::make_model(spec, Shape(1, 16, 768, 1152));
  g->setup(1);
  g->set_memory_reuse(false);
  const size_t total = g->activation_bytes();
  g->set_memory_reuse(true);
  const size_t planned = g->activation_bytes();
  g->set_forward_only(true);
  const size_t planned_forward = g->activation_bytes();
  INFO("every value and gradient apart " << total / 1e6 << " MB, shared " << planned / 1e6 << " MB, forward only "
                                          << planned_forward / 1e6 << " MB");
  CHECK(total > size_t{5} << 30);  // every value and gradient apart: over 5 GiB
  CHECK(planned < total * 3 / 4);
  CHECK(planned_forward < total / 8);
}
