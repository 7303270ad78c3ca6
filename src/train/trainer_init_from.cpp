// train.init_from (docs/training.md, "Fine-tuning from another run"): a new run starts from
// another run's weights. The mapping of tensors is init_weights.hpp's; this file reads the
// checkpoint on the job's ranks and hands the weights to the learner group.
#include <system_error>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/init_weights.hpp"
#include "src/train/training_run.hpp"

namespace squall::train {

namespace fs = std::filesystem;

// Collective: every rank calls it, and every rank does the same collectives in the same order
// (rank 0 decides whether the path is a run dir and reads; the others receive). A run that
// resumes its own checkpoint goes on from it: a preempted fine-tune resumes itself.
void TrainingRun::read_init_weights() {
  const std::string& from = m_cfg.train.init_from;
  if (from.empty()) return;
  if (m_checkpoint) {
    if (m_root)
      log::info("train.init_from = '" + from + "' is not applied: the run resumes from its own checkpoint " +
                m_checkpoint->path.string());
    return;
  }
  // A run dir (its newest readable checkpoint) or a checkpoint: decided where the file is read.
  std::error_code ec;
  const bool run_dir = m_world.broadcast_string(m_root ? (fs::is_directory(fs::path(from) / "checkpoints", ec) &&
                                                                  !fs::exists(fs::path(from) / "model.h5", ec)
                                                              ? "1"
                                                              : "0")
                                                       : std::string()) == "1";
  try {
    m_init = run_dir ? checkpoint::read_newest_checkpoint_model(from, m_world)
                     : checkpoint::read_checkpoint_model(from, m_world);
  } catch (const CollectiveError& e) {  // every rank alike
    throw CollectiveError("train.init_from = '" + from + "': " + e.what(), e.exit_code());
  }
}

// After the model is built, before anything trains or an earlier run's outputs are removed:
// the central model and every replica start from the checkpoint's weights, with the optimizer
// state, loss scale and synchronisation state of a new run. The group restores them from a
// checkpoint of its own fresh state in which the central model is replaced (the names are
// learners_checkpoint.cpp's: central/params and central/state, and sma's and local-sgd's
// history of the central model, central/z, central/z_prev and central/averaged_state).
void TrainingRun::start_from_init_weights() {
  parallel::LearnerGroup& g = *m_device.group;
  const data::DatasetInfo& info = m_data.train->info();
  const InitWeights w = map_init_weights(m_init->model, g.replica_graph(0), m_data.spec, info);
  checkpoint::CheckpointData fresh;
  g.save_shared(fresh);
  fresh.origin = m_init->folder.string();
  for (const char* key : {"central/params", "central/z", "central/z_prev"})
    if (fresh.arrays.contains(key)) fresh.arrays[key] = w.params;
  for (const char* key : {"central/state", "central/averaged_state"})
    if (fresh.arrays.contains(key)) fresh.arrays[key] = w.state;
  // Replicas that differ between ranks (sma, local-sgd) start from the central model, as a
  // rank new to a job does; otherwise every replica is the central model.
  g.restore(fresh, nullptr, g.replicas_differ(), false);
  if (!m_root) return;
  for (const std::string& line : init_weights_lines(m_init->model, w, info, m_init->folder.string())) log::info(line);
}

}  // namespace squall::train
