#pragma once
// FlagAgreement: every rank learns the OR of some per-rank flags, one step late, without
// waiting for it. Each training step posts this rank's flags (a signal arrived, rank 0's clock
// says a checkpoint is due) in a nonblocking allreduce and collects the previous step's result,
// so all ranks act on the same flags at the same step (a checkpoint, a clean stop) and the
// collective's latency hides behind a step's work. Collective: every rank calls exchange() at
// the same steps (every step; under asynchronous or paced outer rounds, at each round's end, so
// that a node is held by the others once a round, not once a step: src/train/pace.hpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/comm.hpp"

namespace squall::mpi {

class FlagAgreement {
 public:
  explicit FlagAgreement(const Communicator& comm);  // duplicates comm: its traffic stays apart
  ~FlagAgreement();                                   // completes a posted exchange
  FlagAgreement(const FlagAgreement&) = delete;
  FlagAgreement& operator=(const FlagAgreement&) = delete;

  // Posts `mine` and returns the OR over the job of the flags posted at the previous call (0 at
  // the first call).
  uint64_t exchange(uint64_t mine);
  // The same, and `value` gathered from every rank beside the flags: `previous` gets the values
  // posted at the previous call, in rank order (empty at the first call, or after a call of
  // exchange() alone).
  uint64_t exchange(uint64_t mine, double value, std::vector<double>& previous);

 private:
  // Completes the posted exchange (if any) and returns its OR.
  uint64_t drain();
  // Completes the posted gather of values (if any) into `out` (empty: none was posted).
  void drain_values(std::vector<double>& out);

  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace squall::mpi

#include <functional>
#include <string>

namespace squall::mpi {

// Runs `work` on every rank of `comm` and agrees on how it ended: when it threw on any rank,
// every rank throws the same CollectiveError (src/core/error.hpp), carrying the message of the
// lowest rank that failed ("rank 3: cfg.toml: config file not found" when not every rank
// failed) and exit status 2 for a UsageError, else 1. So a failure that only some ranks see (a
// file missing on one node) ends the job on every rank instead of leaving the others waiting
// in their next collective. Collective; `work` itself must not call collectives that a
// failing rank would skip.
void run_agreed(const Communicator& comm, const std::function<void()>& work);

// The agreed message of a failure, from the lowest rank that failed, how many ranks failed, the
// job's size and that rank's own message.
using FailureWording = std::function<std::string(int first, int failed, int size, const std::string& message)>;
// As above, with the message worded by `wording`, also in a job of one rank.
void run_agreed(const Communicator& comm, const std::function<void()>& work, const FailureWording& wording);

}  // namespace squall::mpi
