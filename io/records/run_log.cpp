// The records of a training run: field names and line formats live here only
// (docs/metrics.md, "Run records").
#include "io/records/run_log.hpp"

#include <cmath>
#include <cstdio>

#include "io/records/mllog.hpp"
#include "io/records/run_files.hpp"
#include "io/records/tensorboard.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::records {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Sized to fit: the closing line holds the run dir's path, which may be long.
std::string printf_text(const char* format, auto... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return {};
  std::string line(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(line.data(), line.size(), format, args...);
  line.pop_back();
  return line;
}

// A per-class IoU for the console: "-" where it is undefined (docs/metrics.md).
std::string fixed4(double v) { return std::isnan(v) ? "-" : printf_text("%.4f", v); }

// A rate that may be unknown: null in JSON.
json or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string class_name(const std::vector<std::string>& names, size_t k) {
  return k < names.size() ? names[k] : "class " + std::to_string(k);
}

// TensorBoard tags are paths; a class name may hold spaces ("tropical cyclone").
std::string tag_part(std::string s) {
  for (char& c : s)
    if (c == ' ' || c == '/') c = '_';
  return s;
}

}  // namespace

RunLog::RunLog(const RunLogOptions& options) : m_options(options) {
  m_clock.start(options.earlier_s, options.earlier_eval_s);
  m_progress = std::make_unique<Progress>(options.root && options.live_progress, options.log_every);
  if (!options.root) return;
  write_file_atomic(options.dir / k_config_file.name, options.config_toml);
  const fs::path metrics = options.dir / k_metrics_file.name;
  const bool resumed = options.keep_metrics_lines >= 0;
  // Resuming: the records written after the checkpoint are written again from here.
  if (resumed) keep_first_lines(metrics, options.keep_metrics_lines);
  m_metrics = std::make_unique<LineFile>(metrics, resumed, std::string(k_metrics_file.name));
  m_metrics->set_lines(resumed ? options.keep_metrics_lines : 0);
  // One event file per attempt (TensorBoard reads every file of the folder), so no file is
  // ever rewritten; a resumed attempt's events continue the steps of the first.
  if (options.tensorboard)
    m_tensorboard = std::make_unique<TensorBoardWriter>(options.dir / "tensorboard",
                                                            "attempt-" + std::to_string(options.attempt));
  if (options.mllog) m_mllog = std::make_unique<MlLog>(options.dir / k_mllog_file.name, resumed);
}

RunLog::~RunLog() {
  if (!m_mllog || m_ended) return;
  try {  // the run is unwinding after an error: the log says so, and nothing else may throw
    m_mllog->end(mlkey::run_stop, nullptr, {{"status", "aborted"}});
  } catch (...) {
  }
}

int64_t RunLog::metrics_lines() const { return m_metrics ? m_metrics->lines() : 0; }

void RunLog::record(json j) {
  if (!m_metrics) return;
  j["attempt"] = m_options.attempt;
  if (!j.contains("elapsed_s")) j["elapsed_s"] = m_clock.run_s();
  m_metrics->write(j.dump() + "\n");
}

void RunLog::scalar(const std::string& tag, int64_t step, double value) {
  if (m_tensorboard) m_tensorboard->scalar(tag, step, value, system_seconds());
}

void RunLog::end_progress() { m_progress->finish(); }

void RunLog::warn(const std::string& text) {
  m_progress->finish();
  if (m_options.root) log::warn(text);
}

namespace {

json shape_change_json(const ShapeChange& c) {
  return json{{"step", c.step},
              {"from",
               {{"ranks", c.from_ranks},
                {"nodes", c.from_nodes > 0 ? json(c.from_nodes) : json(nullptr)},
                {"spatial", {c.from_spatial_rows, c.from_spatial_cols}},
                {"learner_batch", c.from_learner_batch},
                {"global_batch", c.from_global_batch}}},
              {"to",
               {{"ranks", c.ranks},
                {"nodes", c.nodes},
                {"spatial", {c.spatial_rows, c.spatial_cols}},
                {"learner_batch", c.learner_batch},
                {"global_batch", c.global_batch}}},
              {"keep", c.keep},
              {"lr_scale", c.lr_scale},
              {"epoch", c.epoch},
              {"epoch_position", c.epoch_position}};
}

}  // namespace

void RunLog::opened(const RunFacts& f) {
  if (!m_options.root) return;
  if (!f.resumed_from.empty()) {
    json r{{"kind", "resume"}, {"step", f.first_step}, {"checkpoint", f.resumed_from}};
    if (f.shape_change) r["shape_change"] = shape_change_json(*f.shape_change);
    record(r);
  }
  const std::string device =
      f.device_index >= 0 ? " (" + f.device + ", GPU " + std::to_string(f.device_index) + ")" : std::string();
  std::vector<std::string> lines{
      "squall train: " + f.model + " (" + std::to_string(f.parameters) + " parameters) on " + f.data + ", backend " +
      f.backend + device + ", " + std::to_string(f.ranks) + " rank(s) on " + std::to_string(f.nodes) + " node(s) x " +
      std::to_string(f.learners) + " learner(s), " + f.algorithm + ", batch " + std::to_string(f.batch) +
      " per learner (global " + std::to_string(f.global_batch) + "), " + std::to_string(f.total_steps) + " steps (" +
      std::to_string(f.steps_per_epoch) + " per epoch), optimizer " + f.optimizer + ", " + f.precision + ", run dir " +
      f.run_dir};
  for (const std::string* l : {&f.spatial_line, &f.memory_line, &f.sma_line, &f.cross_line, &f.periods_line})
    if (!l->empty()) lines.push_back(*l);
  for (const std::string& l : lines) log::info(l);
  if (m_tensorboard) {
    // What the run is, in TensorBoard's Text tab: the opening lines (the algorithm and its
    // knobs in words), then the whole config as a Markdown code block.
    std::string setup;
    for (const std::string& l : lines) setup += l + "\n\n";
    std::string config;
    for (size_t at = 0; at < m_options.config_toml.size();) {
      const size_t end = std::min(m_options.config_toml.find('\n', at), m_options.config_toml.size());
      config += "    " + m_options.config_toml.substr(at, end - at) + "\n";
      at = end + 1;
    }
    m_tensorboard->text("run/setup", f.first_step, setup, system_seconds());
    m_tensorboard->text("run/config", f.first_step, config, system_seconds());
    m_tensorboard->flush();
  }
  if (!f.resumed_from.empty())
    log::info("resuming from " + f.resumed_from + ": attempt " + std::to_string(m_options.attempt) + ", step " +
              std::to_string(f.first_step) + " of " + std::to_string(f.total_steps) + ", " +
              printf_text("%.1f", m_clock.earlier_s()) + " s of training before");
  if (!m_mllog) return;
  // MLPerf HPC's keys (docs/metrics.md, "MLPerf logging"): the job, the hyper-parameters, then
  // the timed region. A resumed attempt writes them again: each attempt is a run to the log.
  MlLog& ml = *m_mllog;
  ml.log_at(f.init_start_s, MlEvent::interval_start, mlkey::init_start);
  ml.point(mlkey::submission_benchmark, f.model);
  ml.point(mlkey::number_of_ranks, f.ranks);
  ml.point(mlkey::number_of_nodes, f.nodes);
  ml.point(mlkey::seed, f.seed);
  ml.point(mlkey::global_batch_size, f.global_batch);
  ml.point(mlkey::local_batch_size, f.batch);
  ml.point(mlkey::train_samples, f.train_samples);
  ml.point(mlkey::eval_samples, f.test_samples);
  ml.point(mlkey::opt_name, f.optimizer);
  ml.point(mlkey::opt_base_learning_rate, f.base_lr);
  ml.point(mlkey::opt_learning_rate_warmup_steps, f.warmup_steps);
  ml.point(mlkey::opt_weight_decay, f.weight_decay);
  ml.point(mlkey::gradient_accumulation_steps, 1);
  // An attempt on another shape than the checkpoint's says so (squall's own key; the keys above
  // give this attempt's shape).
  if (f.shape_change) ml.point(mlkey::shape_change, shape_change_json(*f.shape_change));
  if (f.staging_ms) {
    ml.log_at(static_cast<double>(f.staging_ms->first) / 1000.0, MlEvent::interval_start,
              mlkey::staging_start);
    ml.log_at(static_cast<double>(f.staging_ms->second) / 1000.0, MlEvent::interval_end,
              mlkey::staging_stop);
  }
  ml.end(mlkey::init_stop);
  ml.start(mlkey::run_start);
}

void RunLog::epoch_started(int64_t epoch) {
  if (m_mllog) m_mllog->start(mlkey::epoch_start, nullptr, {{"epoch_num", epoch}});
}

void RunLog::epoch_ended(int64_t epoch) {
  if (m_mllog) m_mllog->end(mlkey::epoch_stop, nullptr, {{"epoch_num", epoch}});
}

void RunLog::progress(const ProgressSample& p) {
  if (m_options.root) m_progress->update(p);
}

void RunLog::train_window(const TrainWindow& w) {
  if (!m_options.root) return;
  json j{{"kind", "train"}, {"step", w.step},         {"epoch", w.epoch},
         {"loss", w.loss},  {"lr", w.lr},             {"learners", w.learners},
         {"samples_per_s", w.samples_per_s}, {"steady_samples_per_s", or_null(w.steady_samples_per_s)}};
  if (w.loss_scale) j["loss_scale"] = *w.loss_scale;
  if (w.skipped_steps) j["skipped_steps"] = *w.skipped_steps;
  if (w.halo_exposed_s) j["halo_exposed_s"] = *w.halo_exposed_s;
  if (w.halo_hidden_s) j["halo_hidden_s"] = *w.halo_hidden_s;
  record(j);
  scalar("train/loss", w.step, w.loss);
  scalar("train/lr", w.step, w.lr);
  scalar("train/samples_per_s", w.step, w.samples_per_s);
  if (w.steady_samples_per_s) scalar("train/steady_samples_per_s", w.step, *w.steady_samples_per_s);
  scalar("train/learners", w.step, w.learners);
  scalar("time/compute_s", w.step, w.compute_s);
  scalar("time/allreduce_s", w.step, w.allreduce_s);
  scalar("time/io_wait_s", w.step, w.io_wait_s);
  scalar("time/run_s", w.step, m_clock.run_s());
  if (w.loss_scale) scalar("train/loss_scale", w.step, *w.loss_scale);
  if (w.skipped_steps) scalar("train/skipped_steps", w.step, static_cast<double>(*w.skipped_steps));
  if (w.halo_exposed_s) scalar("time/halo_exposed_s", w.step, *w.halo_exposed_s);
  if (w.halo_hidden_s) scalar("time/halo_hidden_s", w.step, *w.halo_hidden_s);
  if (m_tensorboard) m_tensorboard->flush();
}

void RunLog::eval_started(int64_t epoch) {
  if (m_mllog) m_mllog->start(mlkey::eval_start, nullptr, {{"epoch_num", epoch}});
}

void RunLog::evaluated(const EvalFacts& e) {
  if (!m_options.root) return;
  const nn::ConfusionMatrix& cm = *e.cm;
  m_clock.add_eval(e.eval_s);
  const double run_s = m_clock.run_s();
  json j{{"kind", "eval"},
         {"step", e.step},
         {"epoch", e.epoch},
         {"test_loss", e.loss},
         {"test_accuracy", cm.accuracy()},
         {"test_miou", cm.mean_iou()},
         {"eval_s", e.eval_s},
         {"elapsed_s", run_s},
         {"train_s", m_clock.train_s()},
         {"epochs_done", e.epochs_done}};
  if (m_options.per_pixel) j["test_iou_per_class"] = iou_per_class_json(cm);
  if (e.final_model) j["final_model"] = true;
  record(j);
  scalar("eval/loss", e.step, e.loss);
  scalar("eval/accuracy", e.step, cm.accuracy());
  if (m_options.per_pixel) {
    scalar("eval/miou", e.step, cm.mean_iou());
    const std::vector<double> iou = cm.iou_per_class();
    for (size_t k = 0; k < iou.size(); ++k)
      if (!std::isnan(iou[k])) scalar("eval/iou/" + tag_part(class_name(m_options.class_names, k)), e.step, iou[k]);
  }
  if (m_tensorboard) m_tensorboard->flush();
  if (m_mllog && !e.final_model) {
    m_mllog->point(mlkey::eval_accuracy, m_options.per_pixel ? cm.mean_iou() : cm.accuracy(),
                   {{"epoch_num", e.epoch}});
    m_mllog->end(mlkey::eval_stop, nullptr, {{"epoch_num", e.epoch}});
  }
  m_progress->finish();
  log::info(printf_text("eval  epoch %lld step %lld%s: test loss %.4f accuracy %.4f mIoU %.4f (%.1f s)",
                        static_cast<long long>(e.epoch), static_cast<long long>(e.step),
                        e.final_model ? " (the final model, after the last synchronisation)" : "", e.loss,
                        cm.accuracy(), cm.mean_iou(), e.eval_s));
}

void RunLog::target_reached(const TargetFacts& t) {
  if (!m_options.root) return;
  record({{"kind", "target"},
          {"step", t.step},
          {"epoch", t.epoch},
          {"metric", t.metric},
          {"value", t.value},
          {"target", t.target},
          {"elapsed_s", t.run_s}});
  scalar("eval/time_to_target_s", t.step, t.run_s);
  log::info(printf_text("target reached: test %s %.4f >= %.4f at step %lld (epoch %lld) after %.1f s of training",
                        t.metric.c_str(), t.value, t.target, static_cast<long long>(t.step),
                        static_cast<long long>(t.epoch), t.run_s));
}

void RunLog::checkpoint_written(int64_t step, const fs::path& path, double seconds) {
  if (!m_options.root) return;
  record({{"kind", "checkpoint"}, {"step", step}, {"path", path.string()}, {"seconds", seconds}});
  m_progress->finish();
  log::info(printf_text("checkpoint step %lld: ", static_cast<long long>(step)) + path.string() + " (" +
            std::to_string(static_cast<int>(seconds * 1000)) + " ms)");
}

void RunLog::paced(int64_t epoch, int64_t step, const std::vector<int64_t>& node_trained,
                   const std::vector<int64_t>& node_idle, int64_t carried, double quorum) {
  if (!m_options.root) return;
  record({{"kind", "pace"},
          {"epoch", epoch},
          {"step", step},
          {"node_trained_steps", node_trained},
          {"node_idle_steps", node_idle},
          {"carried_samples", carried}});
  if (carried == 0) return;
  std::string steps;
  for (size_t n = 0; n < node_trained.size(); ++n) steps += (n == 0 ? "" : ", ") + std::to_string(node_trained[n]);
  const int64_t of = node_trained.empty() ? 0 : node_trained[0] + node_idle[0];
  m_progress->finish();
  log::info(printf_text("epoch %lld: nodes 0 to %zu trained %s of its %lld steps (train.epoch_quorum = %g); %lld "
                        "samples the slower nodes did not reach are carried to the front of their next epoch",
                        static_cast<long long>(epoch), node_trained.size() - 1, steps.c_str(),
                        static_cast<long long>(of), quorum, static_cast<long long>(carried)));
}

void RunLog::autotuned(int64_t step, const json& d, int learners, int64_t steps_per_epoch, int64_t total_steps) {
  if (!m_options.root) return;
  record({{"kind", "autotune"},
          {"step", step},
          {"learners_before", d["learners"]},
          {"samples_per_s", d["samples_per_s"]},
          {"decision", d["decision"]},
          {"learners", learners},
          {"steps_per_epoch", steps_per_epoch},
          {"total_steps", total_steps}});
  m_progress->finish();
  log::info(printf_text("autotune step %lld: %d learner(s) per device ran %.0f samples/s; %s (now %lld steps per "
                        "epoch, %lld in all)",
                        static_cast<long long>(step), d["learners"].get<int>(), d["samples_per_s"].get<double>(),
                        d["decision"].get<std::string>().c_str(), static_cast<long long>(steps_per_epoch),
                        static_cast<long long>(total_steps)));
}

json RunLog::summary_json(const RunSummary& s) const {
  const nn::ConfusionMatrix& cm = *s.cm;
  json final_metrics{{"train_loss", s.train_loss}, {"test_loss", s.test_loss}};
  if (m_options.per_pixel) {
    final_metrics["test_miou"] = cm.mean_iou();
    final_metrics["test_iou_per_class"] = iou_per_class_json(cm);
  } else {
    final_metrics["test_accuracy"] = cm.accuracy();
  }
  json out{{"world_size", s.ranks},
           {"nodes", s.nodes},
           {"devices_per_rank", 1},
           {"replicas_per_device", s.learners},
           {"algorithm", s.algorithm},
           {"parallel", s.parallel},
           {"memory", s.memory},
           {"backend", s.backend},
           {"device", s.device},
           {"threads", s.threads},
           {"model", s.model},
           {"parameters", s.parameters},
           {"input", {{"channels", s.input_c}, {"height", s.input_h}, {"width", s.input_w}}},
           {"classes", s.classes},
           {"precision", s.precision},
           {"layout", s.layout},
           {"skipped_steps", s.skipped_steps},
           {"optimizer", s.optimizer},
           {"global_batch", s.global_batch},
           {"batch_per_learner", s.batch},
           {"epochs", s.epochs},
           {"steps", s.steps},
           {"wall_s", s.wall_s},
           {"train_loop_s", s.loop_s},
           {"samples_per_s", s.samples_per_s},
           {"steady_samples_per_s", or_null(s.steady.samples_per_s())},
           {"time_breakdown_s",
            {{"compute", s.compute_s},
             {"allreduce", s.allreduce_s},
             {"io_wait", s.io_wait_s},
             {"allreduce_overlapped", s.overlapped_s}}},
           {"attempt",
            {{"number", m_options.attempt},
             {"shape_change", s.shape_change ? shape_change_json(*s.shape_change) : json(nullptr)},
             {"first_step", s.first_step},
             {"steps", s.steps - s.first_step},
             {"wall_s", s.wall_s},
             {"train_loop_s", s.loop_s},
             {"samples_per_s", s.samples_per_s},
             {"steady_samples_per_s", or_null(s.steady.samples_per_s())},
             {"steady",
              {{"skipped_steps", s.steady.skip()},
               {"steps", s.steady.steps()},
               {"samples", s.steady.samples()},
               {"seconds", s.steady.seconds()}}}}},
           {"run",
            {{"attempts", m_options.attempt}, {"steps", s.steps}, {"train_loop_s", m_clock.earlier_s() + s.loop_s}, {"samples", s.samples_done}}},
           {"skipped_samples", s.skipped_samples},
           {"data", s.data},
           {"normalization", s.normalization},
           {"final", final_metrics},
           {"model_checksum", s.model_checksum},
           {"config", s.config_origin}};
  if (!s.target_metric.empty()) {
    json t{{"metric", s.target_metric}, {"value", s.target_value}, {"reached", s.target.has_value()}};
    if (s.target) {
      t["step"] = s.target->step;
      t["epoch"] = s.target->epoch;
      t["time_to_target_s"] = s.target->run_s;
      t["metric_value"] = s.target->value;
    }
    out["target"] = t;
  }
  if (s.cpu_streams) out["cpu_streams"] = *s.cpu_streams;
  if (s.cpu_stream_jitter_us) out["cpu_stream_jitter_us"] = *s.cpu_stream_jitter_us;
  return out;
}

void RunLog::finished(const RunSummary& s) {
  m_progress->finish();
  if (!m_options.root) return;
  const fs::path summary = m_options.dir / k_summary_file.name;
  write_file_atomic(summary, summary_json(s).dump(2) + "\n");
  const nn::ConfusionMatrix& cm = *s.cm;
  const int64_t attempt_steps = s.steps - s.first_step;
  const std::string run_part =
      m_options.attempt > 1 ? printf_text(" (the run: %lld steps over %lld attempts, %.1f s of training)",
                                          static_cast<long long>(s.steps), static_cast<long long>(m_options.attempt),
                                          m_clock.earlier_s() + s.loop_s)
                            : std::string();
  const std::optional<double> steady = s.steady.samples_per_s();
  const std::string steady_part =
      steady ? printf_text("%.0f samples/s steady (%.0f over the loop)", *steady, s.samples_per_s)
             : printf_text("%.0f samples/s over the loop (too few steps for a steady rate)", s.samples_per_s);
  log::info(printf_text("done: %lld steps in %.1f s%s, %s on %d rank(s) x %d learner(s), train loss "
                        "%.4f, test accuracy %.4f (compute %.1f s, allreduce %.1f s, io_wait %.1f s); summary in %s",
                        static_cast<long long>(attempt_steps), s.wall_s, run_part.c_str(), steady_part.c_str(), s.ranks,
                        s.learners, s.train_loss, cm.accuracy(), s.compute_s, s.allreduce_s, s.io_wait_s,
                        summary.c_str()));
  if (m_options.per_pixel) {  // segmentation: the held-out IoU, per class too
    const std::vector<double> per_class = cm.iou_per_class();
    std::string iou = "test mean IoU " + fixed4(cm.mean_iou()) + " (";
    for (size_t k = 0; k < per_class.size(); ++k)
      iou += (k ? ", " : "") + class_name(m_options.class_names, k) + " " + fixed4(per_class[k]);
    log::info(iou + ")");
  }
  if (m_tensorboard) m_tensorboard->flush();
  if (m_mllog) {
    m_mllog->end(mlkey::run_stop, nullptr,
                 {{"status", s.target || s.target_metric.empty() ? "success" : "aborted"}});
    m_ended = true;
  }
}

void RunLog::stopped(int64_t step, int64_t total_steps, const std::string& signal, const fs::path& checkpoint,
                     int exit_code) {
  m_progress->finish();
  if (!m_options.root) return;
  log::info("stopped by " + signal + " after step " + std::to_string(step) + " of " + std::to_string(total_steps) +
            ": checkpoint " + checkpoint.string() + "; exit " + std::to_string(exit_code) +
            ": requeue the job with --resume auto");
  if (m_tensorboard) m_tensorboard->flush();
  if (m_mllog) {
    m_mllog->end(mlkey::run_stop, nullptr, {{"status", "aborted"}});
    m_ended = true;
  }
}

nlohmann::json iou_per_class_json(const nn::ConfusionMatrix& cm) {
  nlohmann::json per_class = nlohmann::json::array();
  for (double v : cm.iou_per_class()) per_class.push_back(std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v));
  return per_class;
}

}  // namespace squall::records
