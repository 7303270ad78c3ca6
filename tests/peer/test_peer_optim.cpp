// squall's optimizers against torch.optim (SGD, Adam, AdamW) and a hand-written PyTorch LAMB
// after 1 and 3 steps, on the inputs tests/peer/gen_optim.py wrote.
#include <catch2/catch.hpp>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "src/optim/optimizer.hpp"
#include "tests/support/peer.hpp"

namespace {

squall::optim::OptimizerConfig config_of(const nlohmann::json& j) {
  squall::optim::OptimizerConfig c;
  c.name = squall::optim::k_optimizer_kinds.parse(j.at("name").get<std::string>(), "name", "gen_optim.py");
  c.momentum = j.at("momentum").get<double>();
  c.nesterov = j.at("nesterov").get<bool>();
  c.weight_decay = j.at("weight_decay").get<double>();
  c.beta1 = j.at("beta1").get<double>();
  c.beta2 = j.at("beta2").get<double>();
  c.eps = j.at("eps").get<double>();
  return c;
}

}  // namespace

TEST_CASE("optimizers match PyTorch after 1 and 3 steps", "[peer][optim]") {
  const auto cases = squall::test::load_peer_cases(std::string(SQUALL_PEER_DIR) + "/optim");
  REQUIRE(cases.size() >= 4);
  for (const auto& pc : cases) {
    DYNAMIC_SECTION(pc.name) {
      const auto cfg = config_of(pc.params.at("optimizer"));
      const int tensors = pc.params.at("tensors").get<int>();
      const auto decay = pc.params.at("decay").get<std::vector<bool>>();
      const auto lrs = pc.params.at("lr").get<std::vector<double>>();
      const int steps = pc.params.at("steps").get<int>();

      auto be = std::make_unique<squall::cpu::CpuBackend>(1);
      auto stream = be->create_stream();
      size_t total = 0;
      for (int k = 0; k < tensors; ++k) total += pc.at("w0.t" + std::to_string(k)).data.size();
      auto w = be->allocate(total), g = be->allocate(total);
      std::vector<squall::optim::ParamGroup> groups;
      size_t off = 0;
      for (int k = 0; k < tensors; ++k) {
        const auto& w0 = pc.at("w0.t" + std::to_string(k)).data;
        be->copy_from_host(*stream, w.data() + off, w0.data(), w0.size());
        groups.push_back({w.data() + off, g.data() + off, w0.size(), static_cast<bool>(decay[static_cast<size_t>(k)]),
                          "t" + std::to_string(k)});
        off += w0.size();
      }
      auto opt = squall::optim::make_optimizer(cfg, *be, groups);
      for (int s = 0; s < steps; ++s) {
        for (int k = 0; k < tensors; ++k) {
          const auto& gs = pc.at("g" + std::to_string(s) + ".t" + std::to_string(k)).data;
          be->copy_from_host(*stream, groups[static_cast<size_t>(k)].g, gs.data(), gs.size());
        }
        opt->step(*be, *stream, static_cast<float>(lrs[static_cast<size_t>(s)]));
        const int done = s + 1;
        if (done != 1 && done != 3) continue;
        for (int k = 0; k < tensors; ++k) {
          const auto& grp = groups[static_cast<size_t>(k)];
          std::vector<float> got(grp.n);
          be->copy_to_host(*stream, got.data(), grp.w, grp.n);
          be->synchronize(*stream);
          const auto& want = pc.at("w" + std::to_string(done) + ".t" + std::to_string(k)).data;
          INFO(pc.name << " after step " << done << ", tensor " << k);
          CHECK(squall::test::closeness(got, want, 1e-6, 1e-5) <= 1.0);
        }
      }
    }
  }
}
