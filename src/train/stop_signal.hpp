#pragma once
// SIGTERM and SIGUSR1, what batch systems send before a job's time runs out (Slurm's
// --signal, LSF's warning action), ask a training run to stop cleanly: it finishes the step
// in flight, writes a checkpoint and exits with k_exit_requeue (75) so that the job script can
// requeue it with --resume auto (docs/training.md, "Signals"). A second such signal changes
// nothing (a batch system ending a job sends several); any other ends the process as usual.
namespace squall::train {

// Installs the handlers (idempotent; for the whole process).
void install_stop_handlers();
// The first stop signal received (SIGTERM or SIGUSR1), or 0.
int stop_signal();
// "SIGTERM", "SIGUSR1", "signal N".
const char* signal_name(int signal);

}  // namespace squall::train
