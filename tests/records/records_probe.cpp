// Writes the records a run leaves, with known contents, for tests/records/check_records.py to
// read back with TensorBoard's and mlperf_logging's own readers (tests/records/run_records.sh):
//
//   squall_records_probe DIR
//
//   DIR/tb/                      two event files, as a run and its resumed attempt write them
//   DIR/expected_tensorboard.json  {tag: [[step, value as float32], ...]}, by step
//   DIR/mllog.txt                a DeepCAM run's MLPerf log under the HPC 3.0.0 closed rules
//   DIR/expected_mllog.json      [[key, value, event_type], ...], in the order written
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <source_location>
#include <utility>
#include <vector>

#include "io/records/mllog.hpp"
#include "io/records/tensorboard.hpp"

using namespace squall;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Series = std::map<std::string, std::vector<std::pair<int64_t, double>>>;

// A scalar into the file and into the expectation, as the float32 TensorBoard stores.
void scalar(records::TensorBoardWriter& w, Series& expected, const std::string& tag, int64_t step, double value) {
  w.scalar(tag, step, value, 1.7e9 + static_cast<double>(step) * 0.5);
  expected[tag].emplace_back(step, static_cast<double>(static_cast<float>(value)));
}

// Texts, read back by TensorBoard's Text tab: Markdown, a code block, UTF-8, an empty one.
struct Text {
  const char* tag;
  int64_t step;
  const char* text;
};
constexpr Text k_texts[] = {{"run/setup", 0, "outer: every **8** steps, momentum 0.9\n\nsecond line"},
                            {"run/config", 0, "    [parallel]\n    algorithm = \"outer\"\n"},
                            {"run/setup", 40, "resumed: \xce\xbc = 0.5"},
                            {"note/empty", 7, ""}};

void write_tensorboard(const fs::path& dir, const fs::path& expected_file) {
  Series expected;
  {
    records::TensorBoardWriter run(dir);
    for (int step = 0; step < 20; ++step) {
      scalar(run, expected, "train/loss", step, 2.5 * std::exp(-0.1 * step));
      scalar(run, expected, "train/lr", step, step < 5 ? 0.0 : 0.01 / 3.0);  // zeros must arrive
      if (step % 10 == 9) scalar(run, expected, "eval/accuracy", step, step == 9 ? 0.5 : 0.8125);
      if (step == 10) run.flush();
    }
    const double edges[] = {-1.0, 1e-30, 3.0e38, 1.0 / 3.0, -0.0, 123456789.0};
    for (size_t i = 0; i < std::size(edges); ++i)
      scalar(run, expected, "edge/values", static_cast<int64_t>(i), edges[i]);
    scalar(run, expected, "eval/\xce\xbc", 3, 0.25);  // a UTF-8 tag ("eval/mu")
    for (const auto& [tag, step, text] : k_texts) run.text(tag, step, text, 1.7e9);
  }  // the destructor flushes the rest
  {
    // A resumed attempt: a new file in the same directory, read as one run with the first.
    records::TensorBoardWriter resumed(dir);
    for (int step = 20; step < 30; ++step) scalar(resumed, expected, "train/loss", step, 2.5 * std::exp(-0.1 * step));
    scalar(resumed, expected, "eval/accuracy", 29, 0.84375);
    scalar(resumed, expected, "edge/values", 5000000000LL, 7.0);  // a step beyond 32 bits
    resumed.flush();
  }
  json out = json::object();
  for (const auto& [tag, points] : expected) {
    json list = json::array();
    for (const auto& [step, value] : points) list.push_back({step, value});
    out[tag] = list;
  }
  std::ofstream(expected_file) << out.dump(1) << "\n";
  json texts = json::object();
  for (const auto& [tag, step, text] : k_texts) texts[tag].push_back({step, text});
  std::ofstream(expected_file.parent_path() / "expected_texts.json") << texts.dump(1) << "\n";
}

// The log of a short DeepCAM run: every key the HPC 3.0.0 closed DeepCAM rules require, in the
// order a trainer writes them.
void write_mllog(const fs::path& file, const fs::path& expected_file) {
  records::MlLog log(file, false);
  json expected = json::array();
  auto emit = [&](records::MlEvent type, const char* key, const json& value = nullptr, const json& metadata = nullptr,
                  std::source_location where = std::source_location::current()) {
    log.log(type, key, value, metadata, where);
    expected.push_back({key, value, records::ml_event_name(type)});
  };
  using records::MlEvent;
  namespace k = records::mlkey;
  namespace m = records::mlmeta;
  emit(MlEvent::point, k::cache_clear, true);
  emit(MlEvent::interval_start, k::init_start);
  emit(MlEvent::point, k::submission_benchmark, "deepcam");
  emit(MlEvent::point, k::submission_org, "squall");
  emit(MlEvent::point, k::submission_division, "closed");
  emit(MlEvent::point, k::submission_status, "research");
  emit(MlEvent::point, k::submission_platform, "records probe");
  emit(MlEvent::point, k::number_of_ranks, 1);
  emit(MlEvent::point, k::number_of_nodes, 1);
  emit(MlEvent::point, k::accelerators_per_node, 0);
  emit(MlEvent::point, k::seed, 4242);
  emit(MlEvent::point, k::global_batch_size, 16);
  emit(MlEvent::point, k::local_batch_size, 16);
  emit(MlEvent::point, k::batchnorm_group_size, 1);
  emit(MlEvent::point, k::gradient_accumulation_frequency, 1);
  emit(MlEvent::point, k::opt_name, "AdamW");
  emit(MlEvent::point, k::opt_lr, 0.0055);
  emit(MlEvent::point, k::opt_betas, json::array({0.9, 0.999}));
  emit(MlEvent::point, k::opt_eps, 1e-6);
  emit(MlEvent::point, k::opt_weight_decay, 0.01);
  emit(MlEvent::point, k::scheduler_type, "multistep");
  emit(MlEvent::point, k::scheduler_milestones, json::array({800}));
  emit(MlEvent::point, k::scheduler_decay_rate, 0.1);
  emit(MlEvent::point, k::scheduler_lr_warmup_steps, 0);
  emit(MlEvent::point, k::scheduler_lr_warmup_factor, 1.0);
  emit(MlEvent::point, k::train_samples, 121266);
  emit(MlEvent::point, k::eval_samples, 15158);
  emit(MlEvent::interval_end, k::init_stop);
  emit(MlEvent::interval_start, k::staging_start);
  emit(MlEvent::interval_end, k::staging_stop, nullptr, {{"staged_files", 2}});
  emit(MlEvent::interval_start, k::run_start);
  const double accuracy[] = {0.5, 0.8359375};  // the second above the rules' 0.82
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const json e = {{m::epoch_num, epoch}};
    emit(MlEvent::interval_start, k::epoch_start, nullptr, e);
    emit(MlEvent::interval_end, k::epoch_stop, nullptr, e);
    emit(MlEvent::interval_start, k::eval_start, nullptr, e);
    emit(MlEvent::point, k::eval_accuracy, accuracy[epoch - 1], e);
    emit(MlEvent::interval_end, k::eval_stop, nullptr, e);
  }
  emit(MlEvent::interval_end, k::run_stop, nullptr, {{m::status, m::success}, {m::epoch_num, 2}});
  std::ofstream(expected_file) << expected.dump(1) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const fs::path dir = argv[1];
    fs::create_directories(dir);
    write_tensorboard(dir / "tb", dir / "expected_tensorboard.json");
    write_mllog(dir / "mllog.txt", dir / "expected_mllog.json");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "records_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
