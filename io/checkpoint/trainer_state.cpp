// The trainer's checkpoint entries as one table (trainer_state.hpp): each row binds a key to
// its member, and writing and reading both walk it, as the config's field table does
// (config_fields.cpp).
#include "io/checkpoint/trainer_state.hpp"

#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "src/core/error.hpp"

namespace squall::checkpoint {
namespace {

// A member of the state and, for an entry added after the first checkpoint format, the value a
// checkpoint without it reads as: the state a run of that version had. No fallback: required.
template <typename T>
struct Member {
  T TrainerState::*member;
  std::optional<T> fallback;
};

// One entry of model.h5. The member's type is the entry's kind: int64_t an integer, bool an
// integer 1 or 0, double a real, std::string a text.
struct StateField {
  const char* key;
  std::variant<Member<int64_t>, Member<bool>, Member<double>, Member<std::string>> member;
  bool trainer_writes = true;  // false: the learner group writes it with its own entries
};

StateField integer(const char* key, int64_t TrainerState::*m, std::optional<int64_t> fallback = {}) {
  return {key, Member<int64_t>{m, fallback}};
}
StateField flag(const char* key, bool TrainerState::*m, std::optional<bool> fallback = {}) {
  return {key, Member<bool>{m, fallback}};
}
StateField real(const char* key, double TrainerState::*m, std::optional<double> fallback = {}) {
  return {key, Member<double>{m, fallback}};
}
StateField text(const char* key, std::string TrainerState::*m, std::optional<std::string> fallback = {}) {
  return {key, Member<std::string>{m, std::move(fallback)}};
}
StateField written_by_learner_group(StateField f) {
  f.trainer_writes = false;
  return f;
}

// Every entry, in the order they are read: the first one missing is the one an error names.
const std::vector<StateField>& state_fields() {
  using S = TrainerState;
  static const std::vector<StateField> table = {
      integer("step", &S::step),
      integer("epoch", &S::epoch),
      integer("epoch_batches", &S::epoch_batches),
      integer("epoch_position", &S::epoch_position, -1),
      integer("epoch_start_position", &S::epoch_start_position, 0),
      integer("epoch_start_batches", &S::epoch_start_batches, 0),
      integer("samples_done", &S::samples_done),
      written_by_learner_group(integer("learners", &S::learners)),  // src/parallel/learners_checkpoint.cpp
      flag("tuner_done", &S::tuner_done),
      real("window_loss_sum", &S::window_loss_sum),
      real("window_loss_weight", &S::window_loss_weight),
      real("last_train_loss", &S::last_train_loss),
      integer("metrics_lines", &S::metrics_lines),
      integer("attempt", &S::attempt, 1),
      real("elapsed_s", &S::elapsed_s, 0.0),
      real("eval_elapsed_s", &S::eval_elapsed_s, 0.0),
      flag("target_reached", &S::target_reached, false),
      integer("world_size", &S::world_size),
      integer("nodes", &S::nodes, 0),
      text("rank_nodes", &S::rank_nodes, ""),
      integer("schedule_steps", &S::schedule_steps, 0),
      integer("schedule_step_samples", &S::schedule_step_samples, 0),
      integer("schedule_steps_per_epoch", &S::schedule_steps_per_epoch, 0),
      text("schedule_segments", &S::schedule_segments, ""),
      integer("planned_steps", &S::planned_steps, 0),
      integer("last_eval_step", &S::last_eval_step, -1),
      integer("learner_batch", &S::learner_batch, 0),
      real("lr_factor", &S::lr_factor, 1.0),
      flag("per_rank_parts", &S::per_rank_parts),
      integer("train_samples", &S::train_samples),
      integer("param_count", &S::param_count),
      integer("state_count", &S::state_count),
      text("config", &S::config),
      text("config_origin", &S::config_origin),
      text("model", &S::model),
      text("algorithm", &S::algorithm),
  };
  return table;
}

template <typename T>
bool present(const CheckpointData& in, const std::string& key) {
  if constexpr (std::is_same_v<T, double>) {
    return in.reals.contains(key);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return in.texts.contains(key);
  } else {
    return in.ints.contains(key);
  }
}

// The entry, or the accessor's error naming the file and the entry when it is missing.
template <typename T>
T entry(const CheckpointData& in, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    return in.integer(key) != 0;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return in.integer(key);
  } else if constexpr (std::is_same_v<T, double>) {
    return in.real(key);
  } else {
    return in.text(key);
  }
}

template <typename T>
void put(CheckpointData& out, const std::string& key, const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    out.ints[key] = value ? 1 : 0;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    out.ints[key] = value;
  } else if constexpr (std::is_same_v<T, double>) {
    out.reals[key] = value;
  } else {
    out.texts[key] = value;
  }
}

}  // namespace

void write_trainer_state(const TrainerState& s, CheckpointData& out) {
  for (const StateField& f : state_fields()) {
    if (!f.trainer_writes) continue;
    std::visit([&](const auto& m) { put(out, f.key, s.*m.member); }, f.member);
  }
}

TrainerState read_trainer_state(const CheckpointData& in) {
  TrainerState s;
  for (const StateField& f : state_fields()) {
    std::visit(
        [&](const auto& m) {
          using T = std::remove_cvref_t<decltype(s.*m.member)>;
          s.*m.member = m.fallback && !present<T>(in, f.key) ? *m.fallback : entry<T>(in, f.key);
        },
        f.member);
  }
  if (s.step < 0 || s.epoch < 1 || s.learners < 1 || s.param_count < 0 || s.state_count < 0 || s.world_size < 1)
    throw Error(in.origin + ": step = " + std::to_string(s.step) + ", epoch = " + std::to_string(s.epoch) +
                ", learners = " + std::to_string(s.learners) + ", param_count = " + std::to_string(s.param_count) +
                ", state_count = " + std::to_string(s.state_count) + ", world_size = " +
                std::to_string(s.world_size) + ": not a training run's state");
  if (s.learner_batch < 0 || !(s.lr_factor > 0) || !std::isfinite(s.lr_factor))
    throw Error(in.origin + ": learner_batch = " + std::to_string(s.learner_batch) + ", lr_factor = " +
                std::to_string(s.lr_factor) + ": not a training run's state");
  (void)schedule_segments_of(s.schedule_segments, in.origin);
  return s;
}

std::vector<int64_t> schedule_segments_of(const std::string& text, const std::string& origin) {
  std::vector<int64_t> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    int64_t v = 0;
    try {
      size_t used = 0;
      v = std::stoll(word, &used);
      if (used != word.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
    if (v <= 0 || (!out.empty() && v <= out.back()))
      throw Error(origin + ": schedule_segments = '" + text +
                  "': not the ascending first steps of a schedule's segments: not a training run's state");
    out.push_back(v);
  }
  return out;
}

std::string schedule_segments_text(const std::vector<int64_t>& starts) {
  std::string out;
  for (const int64_t s : starts) {
    if (!out.empty()) out += ' ';
    out += std::to_string(s);
  }
  return out;
}

std::string rank_nodes_text(const std::vector<int>& node_of_rank) {
  std::string out;
  for (const int n : node_of_rank) out += (out.empty() ? "" : " ") + std::to_string(n);
  return out;
}

std::vector<int> rank_nodes_of(const TrainerState& s) {
  std::vector<int> out;
  if (!s.rank_nodes.empty()) {
    std::istringstream in(s.rank_nodes);
    for (int n; in >> n;) out.push_back(n);
    return std::ssize(out) == s.world_size ? out : std::vector<int>{};
  }
  if (s.nodes <= 0 || s.world_size % s.nodes != 0) return out;
  const int64_t per_node = s.world_size / s.nodes;
  for (int64_t r = 0; r < s.world_size; ++r) out.push_back(static_cast<int>(r / per_node));
  return out;
}

bool nodes_carry_over(const std::vector<int>& then, const std::vector<int>& node_of_rank) {
  if (then.empty()) return false;
  std::map<int, int> source;  // a node of this job -> the checkpoint's node of its ranks (-1: new ranks)
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    const int from = r < then.size() ? then[r] : -1;
    const auto [it, first] = source.emplace(node_of_rank[r], from);
    if (!first && it->second != from) return false;
  }
  return true;
}

}  // namespace squall::checkpoint
