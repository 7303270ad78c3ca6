// The optimizer kernels (single-range steps, the fused updates over the chunk table, and the
// per-tensor norms of LAMB and LARC), emulated on the host, against the CPU backend: the
// weights, gradients and optimizer state bit for bit (docs/design.md, "Backends").
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;

namespace {

constexpr size_t kOdd = 70001;

// The same parameters, gradients and state twice: one copy for the CPU, one for the emulator.
struct Model {
  std::vector<std::vector<float>> w, g;
  std::vector<float> s1, s2;  // velocity or m; v
  explicit Model(const std::vector<size_t>& sizes) {
    size_t total = 0;
    uint32_t seed = 71;
    for (size_t n : sizes) {
      w.push_back(random_floats(n, seed++, -1.0f, 1.0f));
      g.push_back(random_floats(n, seed++, -0.1f, 0.1f));
      total += n;
    }
    s1 = random_floats(total, seed++, -0.05f, 0.05f);
    s2 = random_floats(total, seed++, 0.0f, 0.01f);
  }
};

void require_same(const Model& got, const Model& want, const std::string& what) {
  for (size_t i = 0; i < want.w.size(); ++i) {
    INFO(what << ", tensor " << i);
    require_same_bits(got.w[i], want.w[i], "weights");
    require_same_bits(got.g[i], want.g[i], "gradient");
  }
  require_same_bits(got.s1, want.s1, what + ": first state");
  require_same_bits(got.s2, want.s2, what + ": second state");
}

}  // namespace

TEST_CASE("sgd_step and adam_step match the CPU bit for bit", "[cuda-host][kernels]") {
  for (const bool nesterov : {false, true}) {
    Model want({kOdd}), got = want;
    cpu().sgd_step(cpu_stream(), want.w[0].data(), want.g[0].data(), want.s1.data(), kOdd, 0.1f, 0.9f, 1e-4f, nesterov);
    emu::sgd_step(got.w[0].data(), got.g[0].data(), got.s1.data(), kOdd, 0.1f, 0.9f, 1e-4f, nesterov);
    require_same(got, want, nesterov ? "nesterov sgd" : "sgd");
  }
  for (const bool decoupled : {false, true})
    for (const bool apply : {false, true})
      for (const int64_t step : {int64_t{1}, int64_t{7}}) {
        INFO("decoupled " << decoupled << ", apply " << apply << ", step " << step);
        Model want({kOdd}), got = want;
        std::vector<float> want_u(kOdd, 0.0f), got_u(kOdd, 0.0f);
        cpu().adam_step(cpu_stream(), want.w[0].data(), want.g[0].data(), want.s1.data(), want.s2.data(),
                        want_u.data(), kOdd, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled, step, apply);
        emu::adam_step(got.w[0].data(), got.g[0].data(), got.s1.data(), got.s2.data(), got_u.data(), kOdd, 1e-3f,
                       0.9f, 0.999f, 1e-8f, 0.01f, decoupled, step, apply);
        require_same(got, want, "adam");
        require_same_bits(got_u, want_u, "update");
      }
}

TEST_CASE("fused updates over the chunk table match the CPU bit for bit", "[cuda-host][kernels]") {
  // Chunks cross tensors of every size (an empty one and a one-element one among them),
  // with the backend's chunk size and with a small one that splits each tensor many times.
  struct Layout {
    std::vector<size_t> sizes;
    int32_t chunk;
  };
  const std::vector<Layout> layouts{{{1000, 1, 0, 2500, 777}, 256}, {{150000, 3, 65537}, 65536}};
  const std::vector<bool> decay{true, false, true, true, false};
  for (const Layout& lay : layouts) {
    INFO("chunk " << lay.chunk);
    auto run = [&](const std::string& what, auto&& on_cpu, auto&& on_emu) {
      INFO(what);
      Model want(lay.sizes), got = want;
      std::vector<squall::nn::TensorRef> refs;
      std::vector<emu::Tensor> tensors;
      for (size_t i = 0; i < lay.sizes.size(); ++i) {
        refs.push_back({want.w[i].data(), want.g[i].data(), lay.sizes[i], decay[i]});
        tensors.push_back({got.w[i].data(), got.g[i].data(), lay.sizes[i], decay[i]});
      }
      auto set = cpu().make_tensor_set(refs);
      emu::FusedSet fused(tensors, lay.chunk);
      CHECK(fused.chunks() > static_cast<int32_t>(lay.sizes.size()) - 2);
      for (int step = 1; step <= 3; ++step) {  // the state carries over between steps
        on_cpu(*set, want, step);
        on_emu(fused, got, step);
      }
      require_same(got, want, what);
    };
    for (const bool nesterov : {false, true})
      run(
          "sgd",
          [&](auto& set, Model& m, int) {
            squall::nn::SgdArgs a;
            a.lr = 0.05f, a.momentum = 0.9f, a.weight_decay = 5e-4f, a.nesterov = nesterov;
            cpu().sgd_update(cpu_stream(), set, m.s1.data(), a);
          },
          [&](emu::FusedSet& f, Model& m, int) { f.sgd_update(m.s1.data(), 0.05f, 0.9f, 5e-4f, nesterov); });
    using Kind = squall::nn::AdamArgs::Kind;
    for (const Kind kind : {Kind::adam, Kind::adamw, Kind::lamb})
      run(
          kind == Kind::adam ? "adam" : kind == Kind::adamw ? "adamw" : "lamb",
          [&](auto& set, Model& m, int step) {
            squall::nn::AdamArgs a;
            a.kind = kind, a.lr = 2e-3f, a.weight_decay = 0.01f, a.step = step;
            cpu().adam_update(cpu_stream(), set, m.s1.data(), m.s2.data(), a);
          },
          [&](emu::FusedSet& f, Model& m, int step) {
            f.adam_update(m.s1.data(), m.s2.data(), static_cast<int>(kind), 2e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
          });
    for (const bool clip : {false, true})
      run(
          clip ? "larc, clipped" : "larc",
          [&](auto& set, Model&, int) {
            squall::nn::LarcArgs a;
            a.lr = 0.1f, a.eta = 0.02f, a.weight_decay = 1e-4f, a.clip = clip;
            cpu().larc_scale(cpu_stream(), set, a);
          },
          [&](emu::FusedSet& f, Model&, int) { f.larc_scale(0.1f, 0.02f, 1e-4f, clip); });
  }
}
