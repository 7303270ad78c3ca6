// The checkpoint protocol of checkpoint.hpp: partial folder, parts, agreement, rename.
#include "src/train/checkpoint.hpp"

#include <algorithm>
#include <cstdio>

#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* k_prefix = "step-";
constexpr const char* k_partial = ".partial";

// The step of a complete checkpoint folder's name, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind(k_prefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::string(k_prefix).size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

// Every rank's `reason` ("" = fine) gathered to rank 0, which joins the non-empty ones
// ("rank 1: ...; rank 3: ..."); the joined text is returned on every rank.
std::string agree_on_reasons(const mpi::Communicator& world, const std::string& reason) {
  const std::vector<std::string> all = world.gather_strings(reason);
  std::string joined;
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) joined += (joined.empty() ? "" : "; ") + (all.size() > 1 ? "rank " + std::to_string(r) + ": " : "") + all[r];
  return world.broadcast_string(joined);
}

template <typename F>
std::string reason_of(F&& work) {
  try {
    work();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path run_dir, const mpi::Communicator& world, int64_t keep)
    : m_dir(std::move(run_dir) / "checkpoints"), m_world(world), m_keep(std::max<int64_t>(1, keep)) {}

std::string CheckpointStore::folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", k_prefix, static_cast<long long>(step));
  return name;
}

fs::path CheckpointStore::part_file(const fs::path& folder, int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.h5", rank);
  return folder / name;
}

std::vector<fs::path> CheckpointStore::list(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec))
    if (const int64_t step = step_of(it->path().filename().string()); step >= 0 && it->is_directory())
      found.emplace_back(step, it->path());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

fs::path CheckpointStore::save(int64_t step, const io::CheckpointData& shared, const io::CheckpointData* own) {
  const bool root = m_world.rank() == 0;
  const fs::path final_dir = m_dir / folder_name(step);
  const fs::path partial = m_dir / (folder_name(step) + k_partial);
  // 1. Rank 0 makes a fresh partial folder (a stale one, from a crash, is never valid).
  std::string failed = agree_on_reasons(m_world, root ? reason_of([&] {
    std::error_code ec;
    fs::create_directories(m_dir, ec);
    if (ec) throw Error(m_dir.string() + ": cannot create the checkpoints folder: " + ec.message());
    fs::remove_all(partial, ec);
    if (!fs::create_directory(partial, ec) || ec)
      throw Error(partial.string() + ": cannot create: " + (ec ? ec.message() : "it exists"));
  }) : std::string());
  // 2. Every rank writes its part, rank 0 the model; each file flushed to storage.
  if (failed.empty())
    failed = agree_on_reasons(m_world, reason_of([&] {
      if (own != nullptr) io::write_checkpoint_file(part_file(partial, m_world.rank()).string(), *own);
      if (root) io::write_checkpoint_file((partial / k_model_file).string(), shared);
    }));
  // 3. Rank 0 checks that every part is there (a run dir not shared by every rank would lose
  //    them), makes the folder durable and renames it into place.
  if (failed.empty())
    failed = m_world.broadcast_string(root ? reason_of([&] {
      if (own != nullptr)
        for (int r = 0; r < m_world.size(); ++r)
          if (!fs::exists(part_file(partial, r)))
            throw Error(part_file(partial, r).string() + ", written by rank " + std::to_string(r) +
                        ", is not visible to rank 0: run.dir must be on a file system that every rank shares");
      sync_dir(partial);
      // A folder of this step from an earlier attempt (one that resumed from an older
      // checkpoint because this one was unreadable) is replaced.
      const fs::path replaced = m_dir / (folder_name(step) + ".replaced");
      std::error_code ec;
      fs::remove_all(replaced, ec);
      if (fs::exists(final_dir, ec)) rename_durably(final_dir, replaced);
      rename_durably(partial, final_dir);
      fs::remove_all(replaced, ec);
    }) : std::string());
  if (!failed.empty()) {
    if (root) {
      std::error_code ec;
      fs::remove_all(partial, ec);
    }
    const std::vector<fs::path> earlier = list(m_dir.parent_path());
    throw CollectiveError("checkpoint of step " + std::to_string(step) + " not written: " + failed + "; " +
                              (earlier.empty() ? std::string("there is no earlier checkpoint")
                                               : "the last checkpoint, " + earlier.front().string() + ", is intact"),
                          k_exit_failure);
  }
  if (root) prune();
  return final_dir;
}

void CheckpointStore::prune() {
  const std::vector<fs::path> all = list(m_dir.parent_path());
  for (size_t i = static_cast<size_t>(m_keep); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i], ec);
    if (ec) log::warn("cannot remove the old checkpoint " + all[i].string() + ": " + ec.message());
  }
}

std::string CheckpointStore::try_load(const fs::path& folder, LoadedCheckpoint& out) {
  out = LoadedCheckpoint{};
  out.path = folder;
  // Rank 0 reads and checks model.h5 and hands it to the others: one reader, not thousands.
  std::string failed = m_world.broadcast_string(
      m_world.rank() == 0 ? reason_of([&] { out.shared = io::read_checkpoint_file((folder / k_model_file).string()); })
                          : std::string());
  if (!failed.empty()) return failed;
  const std::string origin = (folder / k_model_file).string();
  out.shared = io::CheckpointData::deserialize(
      m_world.broadcast_string(m_world.rank() == 0 ? out.shared.serialize() : std::string()), origin);
  const std::string shape = reason_of([&] {
    if (out.shared.integer("world_size") != m_world.size())
      throw Error(origin + ": written by a job of " + std::to_string(out.shared.integer("world_size")) +
                  " rank(s), this job has " + std::to_string(m_world.size()) +
                  " (resume with the same number of ranks)");
  });
  if (!shape.empty()) throw CollectiveError(shape, k_exit_usage);
  out.has_own = out.shared.integer("per_rank_parts") != 0;
  if (!out.has_own) return {};
  return agree_on_reasons(m_world, reason_of([&] {
    out.own = io::read_checkpoint_file(part_file(folder, m_world.rank()).string());
  }));
}

std::optional<LoadedCheckpoint> CheckpointStore::load_newest() {
  const std::vector<fs::path> all = m_world.rank() == 0 ? list(m_dir.parent_path()) : std::vector<fs::path>{};
  std::string names;
  for (const auto& p : all) names += p.string() + "\n";
  names = m_world.broadcast_string(names);  // every rank tries the same folders, in the same order
  std::vector<fs::path> candidates;
  for (size_t at = 0, end; (end = names.find('\n', at)) != std::string::npos; at = end + 1)
    candidates.emplace_back(names.substr(at, end - at));
  if (candidates.empty()) return std::nullopt;
  std::string skipped;
  for (const fs::path& folder : candidates) {
    LoadedCheckpoint loaded;
    const std::string why = try_load(folder, loaded);
    if (why.empty()) return loaded;
    if (m_world.rank() == 0) log::warn("checkpoint " + folder.string() + " is not usable, trying an older one: " + why);
    skipped += (skipped.empty() ? "" : "; ") + folder.filename().string() + ": " + why;
  }
  throw CollectiveError("--resume auto: no usable checkpoint in " + m_dir.string() + " (" + skipped +
                            "); remove them, or start over with --overwrite",
                        k_exit_failure);
}

LoadedCheckpoint CheckpointStore::load(const fs::path& path) {
  const fs::path folder = path.filename() == k_model_file ? path.parent_path() : path;
  // A path that names no checkpoint at all is the user's to fix (exit 2), not a damaged one.
  std::string wrong;
  if (m_world.rank() == 0 && !fs::is_regular_file(folder / k_model_file))
    wrong = fs::exists(path) ? path.string() + " is not a checkpoint (there is no " + (folder / k_model_file).string() + ")"
                             : path.string() + " does not exist";
  wrong = m_world.broadcast_string(wrong);
  if (!wrong.empty())
    throw CollectiveError("--resume " + path.string() + ": " + wrong +
                              "; give a step-N folder of <run.dir>/checkpoints, its model.h5, or auto",
                          k_exit_usage);
  LoadedCheckpoint loaded;
  const std::string why = try_load(folder, loaded);
  if (!why.empty()) throw CollectiveError("--resume " + path.string() + ": cannot use this checkpoint: " + why, k_exit_failure);
  return loaded;
}

}  // namespace squall::train
