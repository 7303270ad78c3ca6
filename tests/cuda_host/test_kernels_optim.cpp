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

TEST_CASE("fused updates write the weight mirrors with the weights, as the CPU does, bit for bit",
          "[cuda-host][kernels]") {
  // Filters of a bf16 and an f16 NHWC plan, a bias (no mirror), the CPU's widened copy in the
  // weights' order, and an f32 NHWC plan's copy; small chunks, so that chunks cross filters.
  struct Mirror {
    size_t n;
    bool has;
    DType type;
    bool widened, nhwc;
    int64_t k, c, rs;
  };
  const std::vector<Mirror> mirrors{{16 * 8 * 9, true, DType::bf16, false, true, 16, 8, 9},
                                    {16, false, DType::f32, false, false, 0, 0, 0},
                                    {32 * 16, true, DType::f16, false, true, 32, 16, 1},
                                    {5 * 7 * 9, true, DType::bf16, true, false, 5 * 7 * 9, 1, 1},
                                    {4 * 6 * 25, true, DType::f32, false, true, 4, 6, 25}};
  std::vector<size_t> sizes;
  for (const Mirror& m : mirrors) sizes.push_back(m.n);
  const auto stored = [](const Mirror& m) { return m.widened ? sizeof(float) : squall::nn::dtype_size(m.type); };
  using Kind = squall::nn::AdamArgs::Kind;
  for (int kind = -1; kind < 3; ++kind) {  // -1: sgd; else adam, adamw, lamb
    INFO("optimizer " << kind);
    Model want(sizes), got = want;
    std::vector<Bytes> want_m, got_m;
    for (const Mirror& m : mirrors) {
      want_m.emplace_back(m.n * stored(m), 0);
      got_m.emplace_back(m.n * stored(m), 0);
    }
    std::vector<squall::nn::TensorRef> refs;
    std::vector<emu::Tensor> tensors;
    for (size_t i = 0; i < mirrors.size(); ++i) {
      const Mirror& m = mirrors[i];
      squall::nn::WeightMirror wm;
      if (m.has) wm = {want_m[i].data(), m.type, m.widened, m.nhwc, m.k, m.c, m.rs};
      refs.push_back({want.w[i].data(), want.g[i].data(), m.n, i != 1, wm});
      emu::Tensor t{got.w[i].data(), got.g[i].data(), m.n, i != 1};
      if (m.has) {
        t.mirror = got_m[i].data();
        t.mirror_type = code(m.type);
        t.mirror_widened = m.widened;
        t.mirror_c = m.nhwc ? m.c : 0;
        t.mirror_rs = m.nhwc ? m.rs : 0;
      }
      tensors.push_back(t);
    }
    auto set = cpu().make_tensor_set(refs);
    emu::FusedSet fused(tensors, 256);
    for (int step = 1; step <= 3; ++step) {
      if (kind < 0) {
        squall::nn::SgdArgs a;
        a.lr = 0.05f, a.momentum = 0.9f, a.weight_decay = 5e-4f;
        cpu().sgd_update(cpu_stream(), *set, want.s1.data(), a);
        fused.sgd_update(got.s1.data(), 0.05f, 0.9f, 5e-4f, false);
      } else {
        squall::nn::AdamArgs a;
        a.kind = static_cast<Kind>(kind), a.lr = 2e-3f, a.weight_decay = 0.01f, a.step = step;
        cpu().adam_update(cpu_stream(), *set, want.s1.data(), want.s2.data(), a);
        fused.adam_update(got.s1.data(), got.s2.data(), kind, 2e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
      }
    }
    require_same(got, want, "with mirrors");
    for (size_t i = 0; i < mirrors.size(); ++i) {
      const Mirror& m = mirrors[i];
      INFO("tensor " << i);
      if (!m.has) {
        CHECK(got_m[i] == Bytes(got_m[i].size(), 0));  // a tensor without one: nothing written
        continue;
      }
      require_same_bits(got_m[i], want_m[i], stored(m), "mirror, emulated against the CPU");
      // What the plan's own copy of the final weights would hold.
      Bytes copy(m.n * squall::nn::dtype_size(m.type));
      using squall::nn::Layout;
      cpu().permute_convert(cpu_stream(), got.w[i].data(), DType::f32, Layout::nchw, copy.data(), m.type,
                            m.nhwc ? Layout::nhwc : Layout::nchw, m.k, m.c, m.rs, 1);
      if (m.widened) copy = to_type(DType::f32, widen(m.type, copy));
      require_same_bits(got_m[i], copy, stored(m), "mirror, against a copy of the new weights");
    }
  }
}
