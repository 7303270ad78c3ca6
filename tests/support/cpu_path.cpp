#include "tests/support/cpu_path.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "src/cpu/cpu_info.hpp"

namespace squall::test {

namespace {

std::string ask_uncapped_isa() {
  if (cpu::dnn_isa_cap().empty()) return cpu::dnn_isa();
  int fds[2];
  if (pipe(fds) != 0) return "unknown (no pipe)";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "unknown (no fork)";
  }
  if (pid == 0) {  // the child: no cap, one question, no atexit handlers of the test binary
    close(fds[0]);
    unsetenv("ONEDNN_MAX_CPU_ISA");
    unsetenv("DNNL_MAX_CPU_ISA");
    const std::string isa = cpu::dnn_isa();
    const bool ok = write(fds[1], isa.data(), isa.size()) == static_cast<ssize_t>(isa.size());
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  std::string isa;
  char buf[128];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) isa.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || isa.empty()) return "unknown (the child failed)";
  return isa;
}

}  // namespace

std::string uncapped_isa() {
  static const std::string isa = ask_uncapped_isa();
  return isa;
}

std::string cpu_path() {
  const std::string uncapped = uncapped_isa();  // first: before this process asks oneDNN anything
  std::string s = cpu::dnn_library() + ", ISA " + cpu::dnn_isa();
  if (const std::string cap = cpu::dnn_isa_cap(); !cap.empty())
    s += " (ONEDNN_MAX_CPU_ISA=" + cap + "; this CPU: " + uncapped + ")";
  return s + ", bf16 path " + cpu::dnn_bf16_path();
}

std::string isa_rerun_skip_reason() {
  const char* rerun = std::getenv("SQUALL_TEST_ISA_RERUN");
  if (rerun == nullptr || *rerun == '\0' || std::string(rerun) == "0") return "";
  const std::string cap = cpu::dnn_isa_cap();
  if (cap.empty())
    return "SQUALL_TEST_ISA_RERUN is set without ONEDNN_MAX_CPU_ISA: nothing to rerun at another ISA";
  const std::string uncapped = uncapped_isa(), here = cpu::dnn_isa();
  if (here != uncapped) return "";
  return "oneDNN runs " + here + " on this CPU with or without ONEDNN_MAX_CPU_ISA=" + cap +
         ": the plain entries already ran this path";
}

}  // namespace squall::test
