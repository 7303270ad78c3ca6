#pragma once
// Environment settings that Open MPI and NCCL need on machines that restrict a process, made
// before either library starts (docs/allreduce.md, "Launch settings"). Each decision is a pure
// function of the environment and of what the machine answered, so that tests can hand it
// both; the apply_* functions ask the machine and set the variables.
//
// - Open MPI's shared-memory transport copies large messages straight from one rank's memory
//   into another's (CMA: process_vm_readv), which ptrace restrictions forbid (containers without
//   CAP_SYS_PTRACE, gVisor and Firecracker sandboxes, yama's ptrace_scope >= 1): the first large
//   message between two ranks of a host then fails. Where a probe shows that this process may
//   not read a sibling's memory, the single copy is switched off (`none`: copies through the
//   shared segment), unless the user chose a mechanism.
// - NCCL's bootstrap looks for a network interface; on a machine whose only interface is the
//   loopback one (a GPU sandbox) it may find none. There, unless the user chose one,
//   NCCL_SOCKET_IFNAME names the loopback interface.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace squall::mpi {

// An environment variable's value, or nullopt when it is unset (std::getenv in production).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// A variable to set, and why (for the log line).
struct EnvSetting {
  std::string name, value, why;
};

// ---- Open MPI's single copy -----------------------------------------------------------------

// Whether a process may read the memory of one that is not its descendant, as two ranks of a
// host must for CMA: works, refused (the reason says how), or unknown (the probe could not run).
struct CmaProbe {
  enum class Result { works, refused, unknown } result = Result::unknown;
  std::string reason;  // "process_vm_readv: Operation not permitted", "fork: ..."
};
// Forks a child that reads a value from this process (its parent) with process_vm_readv.
CmaProbe probe_cma();

// The MCA variable of the Open MPI squall is built with: OMPI_MCA_btl_vader_single_copy_mechanism
// (Open MPI 4) or OMPI_MCA_btl_sm_single_copy_mechanism (5 and later); "" for another MPI.
std::string single_copy_variable();

// `variable` = none when the probe says refused; nothing when `variable` is empty, when the user
// set either spelling (vader or sm) of the mechanism, or when the probe works or cannot tell.
// `probe` runs only when its answer decides.
std::optional<EnvSetting> single_copy_setting(const EnvLookup& env, const std::function<CmaProbe()>& probe,
                                              const std::string& variable);

// ---- NCCL's bootstrap interface ---------------------------------------------------------------

struct NetInterface {
  std::string name;
  bool up = false, loopback = false, has_address = false;  // IPv4 or IPv6
};
// The machine's interfaces (getifaddrs), one entry per name.
std::vector<NetInterface> network_interfaces();

// NCCL_SOCKET_IFNAME = the loopback interface's name when the user did not set it, no other
// interface is up with an address and a loopback one is; nothing otherwise.
std::optional<EnvSetting> nccl_interface_setting(const EnvLookup& env, const std::vector<NetInterface>& interfaces);

// ---- applied ------------------------------------------------------------------------------------

// Before MPI_Init (mpi::Runtime): the single copy setting, made in this process's environment.
// Returns the line to log once MPI is up ("" when nothing was set).
std::string apply_mpi_launch_settings();
// Before the first NCCL call of the process (mpi/nccl.cpp); once per process, logged on rank 0.
void apply_nccl_launch_settings();

}  // namespace squall::mpi
