// Every activation view of every zoo model starts on a 256-byte boundary, at every activation
// type and in both layouts: cuDNN's tensor-core kernels need aligned bf16/f16 operands, and
// a view that starts at an odd element of a 2-byte type is not even 4-byte aligned.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"

using namespace squall::nn;

TEST_CASE("activation views of every zoo model are 256-byte aligned", "[models][alignment]") {
  auto backend = make_cpu_backend(1);
  struct Case {
    std::string name;
    Shape input;
  };
  // Shapes whose node sizes are odd multiples of small numbers, so that packed views would
  // fall off 256-byte boundaries (lenet5's 6x24x24 is 3456 elements: 6912 bytes in bf16).
  const Case cases[] = {{"lenet5", Shape(1, 1, 28, 28)},
                        {"resnet20", Shape(1, 3, 28, 28)},
                        {"unet", Shape(1, 16, 32, 48)},
                        {"deeplabv3plus", Shape(1, 16, 32, 48)}};
  for (const Case& c : cases)
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
