#pragma once
// What `squall model --calibrate RUN_DIR` reads from a run dir (docs/model.md, "From a run"):
// the measurement of its summary.json, the model as its config.toml describes it (name and
// knobs), and the input that model was built for, from the run's newest checkpoint or else
// the training data its config names. So a run of any zoo model calibrates without the user
// repeating its shape on the command line.
#include <cstdint>
#include <string>

#include "src/nn/graph.hpp"
#include "src/perf/perf_model.hpp"

namespace squall::perf {

struct CalibrationRun {
  std::string path;             // as given: a run dir or its summary.json
  RunMeasurement measurement;   // its steps: the last attempt's, also for a run dir written before `attempt`
  nn::ModelSpec spec;           // the run's model; spec.classes are the run's when has_input
  std::string model_from;       // "RUN/config.toml", or "RUN/summary.json" (its model name only)
  bool has_knobs = false;       // spec's width, depth and ASPP rates are the run's (from its config or checkpoint)
  bool has_input = false;
  int64_t c = 0, h = 0, w = 0;  // one sample as the model took it
  std::string input_from;       // "checkpoint RUN/checkpoints/step-00000004" or "data.train PATH"
  std::string no_input_why;     // when !has_input: what was tried
};

// Reads `path`: a run dir, or a summary.json (its folder is then the run dir). Throws
// UsageError naming the file when summary.json or config.toml cannot be read, or when they
// name different models. A run dir without config.toml (a summary.json copied alone) gives
// the summary's model name with the zoo's default knobs.
CalibrationRun read_calibration_run(const std::string& path);

}  // namespace squall::perf
