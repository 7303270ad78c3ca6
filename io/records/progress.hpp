#pragma once
// Progress reporting for a training run: on the terminal of a one-rank job, one line rewritten
// in place ("\r"); otherwise (a batch job's log, any job under a launcher) a plain line every
// `log_every` steps, so that a log holds no carriage return or escape sequence.
#include <chrono>
#include <cstdint>
#include <string>

namespace squall::records {

struct ProgressSample {
  int64_t step = 0, total_steps = 0;
  int epoch = 0, epochs = 0;
  double loss = 0;
  double samples_per_s = 0;
  double elapsed_s = 0;        // this attempt's
  int64_t attempt_steps = 0;   // steps this attempt has run (the ETA's rate)
};

// Whether a job of `ranks` ranks may redraw a progress line: standard output is a terminal
// and the process was not started by a launcher (mpirun, srun), which hands every rank a
// pseudo-terminal even when the job's output goes to a file.
bool progress_redraws(int ranks);

// "epoch 2/5 step 1200/4685 loss 0.4312 1834 samples/s ETA 1m54s"
std::string format_progress(const ProgressSample& p);
// "1m54s", "2h03m", "37s"
std::string format_duration(double seconds);

class Progress {
 public:
  // live: rewrite one line (a terminal); else print a line every log_every steps.
  Progress(bool live, int64_t log_every);
  void update(const ProgressSample& p);  // rank 0 only; cheap when nothing is printed
  void finish();                         // ends the live line

 private:
  bool m_live;
  int64_t m_log_every;
  bool m_open_line = false;
  std::chrono::steady_clock::time_point m_last_draw{};
};

}  // namespace squall::records
