#include "mpi/launch_env.hpp"

#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "src/core/log.hpp"

namespace squall::mpi {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

constexpr const char* k_vader = "OMPI_MCA_btl_vader_single_copy_mechanism";
constexpr const char* k_sm = "OMPI_MCA_btl_sm_single_copy_mechanism";

void set_env(const EnvSetting& s) { ::setenv(s.name.c_str(), s.value.c_str(), 1); }

}  // namespace

CmaProbe probe_cma() {
  // The child reads this from its parent's memory; a value it could not have by chance.
  volatile uint64_t marker = 0x5371'7561'6c6c'2121ull ^ static_cast<uint64_t>(::getpid());
  const uint64_t expected = marker;
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return {CmaProbe::Result::unknown, std::string("fork: ") + std::strerror(errno)};
  if (child == 0) {
    // Only async-signal-safe calls between fork and _exit.
    uint64_t got = 0;
    iovec local{&got, sizeof(got)};
    iovec remote{const_cast<uint64_t*>(&marker), sizeof(marker)};
    const ssize_t n = ::process_vm_readv(parent, &local, 1, &remote, 1, 0);
    if (n < 0) ::_exit(errno > 0 && errno < 255 ? errno : 254);
    ::_exit(n == static_cast<ssize_t>(sizeof(got)) && got == expected ? 0 : 255);
  }
  int status = 0;
  pid_t waited = 0;
  do {
    waited = ::waitpid(child, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited < 0) return {CmaProbe::Result::unknown, std::string("waitpid: ") + std::strerror(errno)};
  if (!WIFEXITED(status)) return {CmaProbe::Result::unknown, "the probe's child did not exit normally"};
  const int code = WEXITSTATUS(status);
  if (code == 0) return {CmaProbe::Result::works, ""};
  if (code == 255) return {CmaProbe::Result::refused, "process_vm_readv read something else than was there"};
  return {CmaProbe::Result::refused, std::string("process_vm_readv: ") + std::strerror(code)};
}

std::string single_copy_variable() {
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5
  return k_sm;
#elif defined(OMPI_MAJOR_VERSION)
  return k_vader;
#else
  return "";
#endif
}

std::optional<EnvSetting> single_copy_setting(const EnvLookup& env, const std::function<CmaProbe()>& probe,
                                              const std::string& variable) {
  if (variable.empty()) return std::nullopt;
  // Either spelling is the user's choice (a job script written for the other Open MPI).
  if (env(k_vader) || env(k_sm)) return std::nullopt;
  const CmaProbe p = probe();
  if (p.result != CmaProbe::Result::refused) return std::nullopt;
  return EnvSetting{variable, "none",
                    "this process may not read another process's memory (" + p.reason +
                        "), which Open MPI's shared-memory single copy (CMA) needs between two ranks of a host"};
}

std::vector<NetInterface> network_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::map<std::string, NetInterface> by_name;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    NetInterface& i = by_name[a->ifa_name];
    i.name = a->ifa_name;
    i.up = i.up || (a->ifa_flags & IFF_UP) != 0;
    i.loopback = i.loopback || (a->ifa_flags & IFF_LOOPBACK) != 0;
    const int family = a->ifa_addr != nullptr ? a->ifa_addr->sa_family : AF_UNSPEC;
    i.has_address = i.has_address || family == AF_INET || family == AF_INET6;
  }
  ::freeifaddrs(list);
  std::vector<NetInterface> out;
  for (auto& [name, i] : by_name) out.push_back(i);
  return out;
}

std::optional<EnvSetting> nccl_interface_setting(const EnvLookup& env, const std::vector<NetInterface>& interfaces) {
  if (env("NCCL_SOCKET_IFNAME")) return std::nullopt;
  const NetInterface* loopback = nullptr;
  for (const NetInterface& i : interfaces) {
    if (!i.up || !i.has_address) continue;
    if (!i.loopback) return std::nullopt;  // NCCL finds this one itself
    if (loopback == nullptr) loopback = &i;
  }
  if (loopback == nullptr) return std::nullopt;  // nothing to name: NCCL says what it lacks
  return EnvSetting{"NCCL_SOCKET_IFNAME", loopback->name,
                    "no network interface but the loopback one (" + loopback->name + ") is up with an address"};
}

std::string apply_mpi_launch_settings() {
  const std::optional<EnvSetting> s = single_copy_setting(process_env(), probe_cma, single_copy_variable());
  if (!s) return "";
  set_env(*s);
  return "mpi: " + s->why + ": " + s->name + "=" + s->value + " (set it yourself to choose)";
}

void apply_nccl_launch_settings() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::optional<EnvSetting> s = nccl_interface_setting(process_env(), network_interfaces());
    if (!s) return;
    set_env(*s);
    log::info("nccl: " + s->why + ": " + s->name + "=" + s->value + " (set it yourself to choose another)");
  });
}

}  // namespace squall::mpi
