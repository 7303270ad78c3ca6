// The launch settings of mpi/launch_env.hpp: when squall switches Open MPI's shared-memory
// single copy off, and when it names the loopback interface for NCCL. The decisions get their
// environment and the machine's answers injected; the probe runs for real on this machine.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mpi/launch_env.hpp"

using namespace squall::mpi;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// A probe that answers `result` and counts how often it was asked.
struct FakeProbe {
  CmaProbe::Result result;
  int calls = 0;
  std::function<CmaProbe()> fn() {
    return [this] {
      ++calls;
      return CmaProbe{result, result == CmaProbe::Result::refused ? "process_vm_readv: Operation not permitted" : ""};
    };
  }
};

const std::string k_vader = "OMPI_MCA_btl_vader_single_copy_mechanism";
const std::string k_sm = "OMPI_MCA_btl_sm_single_copy_mechanism";

}  // namespace

TEST_CASE("single copy: switched off where the probe is refused, and only there", "[launch-env][mpi-env]") {
  for (const std::string& variable : {k_vader, k_sm}) {
    INFO(variable);
    FakeProbe refused{CmaProbe::Result::refused};
    const auto s = single_copy_setting(env_of({}), refused.fn(), variable);
    REQUIRE(s.has_value());
    CHECK(s->name == variable);
    CHECK(s->value == "none");
    CHECK_THAT(s->why, Catch::Contains("Operation not permitted") && Catch::Contains("CMA"));
    CHECK(refused.calls == 1);

    FakeProbe works{CmaProbe::Result::works};
    CHECK_FALSE(single_copy_setting(env_of({}), works.fn(), variable).has_value());
    CHECK(works.calls == 1);
    // A probe that could not run changes nothing: Open MPI's default stands.
    FakeProbe unknown{CmaProbe::Result::unknown};
    CHECK_FALSE(single_copy_setting(env_of({}), unknown.fn(), variable).has_value());
  }
}

TEST_CASE("single copy: the user's setting wins, in either spelling, without a probe", "[launch-env][mpi-env]") {
  for (const std::string& user : {k_vader, k_sm})
    for (const std::string& value : {"cma", "none", ""}) {
      INFO(user << "=" << value);
      FakeProbe refused{CmaProbe::Result::refused};
      CHECK_FALSE(single_copy_setting(env_of({{user, value}}), refused.fn(), k_vader).has_value());
      CHECK_FALSE(single_copy_setting(env_of({{user, value}}), refused.fn(), k_sm).has_value());
      CHECK(refused.calls == 0);
    }
  // Another MPI (no Open MPI variable): nothing to set, nothing probed.
  FakeProbe refused{CmaProbe::Result::refused};
  CHECK_FALSE(single_copy_setting(env_of({}), refused.fn(), "").has_value());
  CHECK(refused.calls == 0);
}

TEST_CASE("single copy: the probe answers on this machine", "[launch-env][mpi-env]") {
  const CmaProbe p = probe_cma();
  INFO("probe: " << p.reason);
  // It ran: a fork and a wait do not fail here.
  REQUIRE(p.result != CmaProbe::Result::unknown);
  // Where this process is allowed to read another's memory (root, no seccomp or yama rule
  // against it), the probe must say so; where it is not, it must name the refusal.
  if (p.result == CmaProbe::Result::refused) {
    CHECK_THAT(p.reason, Catch::Contains("process_vm_readv"));
    WARN("CMA is refused on this machine: " << p.reason);
  } else {
    CHECK(p.reason.empty());
  }
  // The build's Open MPI has a variable for it.
  CHECK((single_copy_variable() == k_vader || single_copy_variable() == k_sm));
}

TEST_CASE("nccl interface: the loopback one where it is the only one up", "[launch-env][nccl-env]") {
  const NetInterface lo{"lo", true, true, true};
  const NetInterface eth{"eth0", true, false, true};
  const NetInterface eth_down{"eth0", false, false, true};
  const NetInterface eth_bare{"eth1", true, false, false};  // up, no address

  SECTION("only loopback: named") {
    for (const auto& ifs : {std::vector<NetInterface>{lo}, std::vector<NetInterface>{lo, eth_down},
                            std::vector<NetInterface>{eth_bare, lo}}) {
      const auto s = nccl_interface_setting(env_of({}), ifs);
      REQUIRE(s.has_value());
      CHECK(s->name == "NCCL_SOCKET_IFNAME");
      CHECK(s->value == "lo");
    }
    // Its own name, whatever the machine calls it.
    const auto s = nccl_interface_setting(env_of({}), {NetInterface{"lo0", true, true, true}});
    REQUIRE(s.has_value());
    CHECK(s->value == "lo0");
  }
  SECTION("another interface up with an address: NCCL finds it, nothing set") {
    CHECK_FALSE(nccl_interface_setting(env_of({}), {lo, eth}).has_value());
    CHECK_FALSE(nccl_interface_setting(env_of({}), {eth, lo}).has_value());
  }
  SECTION("the user's choice wins") {
    CHECK_FALSE(nccl_interface_setting(env_of({{"NCCL_SOCKET_IFNAME", "ib0"}}), {lo}).has_value());
    CHECK_FALSE(nccl_interface_setting(env_of({{"NCCL_SOCKET_IFNAME", ""}}), {lo}).has_value());
  }
  SECTION("no usable interface at all: nothing to name") {
    CHECK_FALSE(nccl_interface_setting(env_of({}), {}).has_value());
    CHECK_FALSE(nccl_interface_setting(env_of({}), {NetInterface{"lo", false, true, true}}).has_value());
  }
}

TEST_CASE("nccl interface: this machine's interfaces are read", "[launch-env][nccl-env]") {
  const std::vector<NetInterface> ifs = network_interfaces();
  bool loopback = false;
  for (const NetInterface& i : ifs) loopback = loopback || (i.loopback && i.up && i.has_address);
  // Every Linux machine squall runs on has a loopback interface up with 127.0.0.1 or ::1.
  CHECK(loopback);
}
