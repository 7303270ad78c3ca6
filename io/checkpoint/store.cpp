// The checkpoint protocol of checkpoint.hpp: partial folder, node files, agreement, rename.
#include "io/checkpoint/store.hpp"

#include <algorithm>
#include <cstdio>

#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::checkpoint {
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

constexpr const char* k_node_prefix = "node-";
// The most reasons that one message lists; the others are counted ("and 12 more ranks").
constexpr int k_listed_reasons = 4;

// Every rank's `reason` ("" = fine) gathered to rank 0, which joins the non-empty ones
// ("rank 1: ...; rank 3: ..."); the joined text is returned on every rank.
std::string agree_on_reasons(const mpi::Communicator& world, const std::string& reason) {
  const std::vector<std::string> all = world.gather_strings(reason);
  std::string joined;
  int failed = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || ++failed > k_listed_reasons) continue;
    joined += (joined.empty() ? "" : "; ") + (all.size() > 1 ? "rank " + std::to_string(r) + ": " : "") + all[r];
  }
  if (failed > k_listed_reasons) joined += "; and " + std::to_string(failed - k_listed_reasons) + " more rank(s)";
  return world.broadcast_string(joined);
}

// Lines of text, one name each, and back: lists of names handed between ranks.
std::string join_lines(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += n + "\n";
  return out;
}
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    out.push_back(text.substr(at, end - at));
  return out;
}

// The node files in `folder`, sorted ("node-00000.h5", ...).
std::vector<std::string> node_files_in(const fs::path& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(k_node_prefix, 0) == 0 && it->path().extension() == ".h5") out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
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

// On a node leader: its ranks' parts (`ranks`: their world ranks, in node order; `parts`:
// what gather_strings brought, the leader's own first and empty) as one file of groups.
void write_node_file(const fs::path& file, const CheckpointData& own, const std::vector<int>& ranks,
                     std::vector<std::string>& parts) {
  // A rank that could not serialize its part sent nothing and reports why itself.
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].empty()) return;
  std::vector<CheckpointData> others;
  others.reserve(parts.size());
  for (size_t i = 1; i < parts.size(); ++i) {
    others.push_back(CheckpointData::deserialize(parts[i], "the part of rank " + std::to_string(ranks[i])));
    std::string().swap(parts[i]);  // one copy of each part at a time
  }
  std::vector<CheckpointGroup> groups;
  for (size_t i = 0; i < ranks.size(); ++i)
    groups.push_back({CheckpointStore::rank_group(ranks[i]), i == 0 ? &own : &others[i - 1]});
  write_checkpoint_groups(file.string(), groups);
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path run_dir, const mpi::Topology& topo, int64_t keep, PartSource source)
    : m_dir(std::move(run_dir) / "checkpoints"),
      m_topo(topo),
      m_world(topo.world()),
      m_node(topo.node_comm()),
      m_keep(std::max<int64_t>(1, keep)),
      m_source(std::move(source)) {
  if (!m_source)
    m_source = [rank = m_world.rank()](const CheckpointData& shared) -> int64_t {
      return rank < shared.integer("world_size") ? rank : -1;
    };
}

std::string CheckpointStore::folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", k_prefix, static_cast<long long>(step));
  return name;
}

fs::path CheckpointStore::node_file(const fs::path& folder, int node) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%05d.h5", k_node_prefix, node);
  return folder / name;
}

std::string CheckpointStore::rank_group(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d", rank);
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

fs::path CheckpointStore::save(int64_t step, const CheckpointData& shared,
                               const CheckpointData* own) {
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
  // 2. Each node's leader gathers its ranks' parts and writes the node's file, rank 0 the
  //    model; each file flushed to storage.
  if (failed.empty()) {
    const bool leader = m_node.rank() == 0;
    std::string mine;  // this rank's part, serialized (the leader keeps its own as it is)
    std::string reason = own != nullptr && !leader ? reason_of([&] { mine = own->serialize(); }) : std::string();
    std::vector<std::string> parts;
    if (own != nullptr) parts = m_node.gather_strings(mine);
    mine.clear();
    const std::vector<int> ranks = own != nullptr ? m_node.allgather(m_world.rank()) : std::vector<int>{};
    if (reason.empty())
      reason = reason_of([&] {
        if (own != nullptr && leader) write_node_file(node_file(partial, m_topo.node()), *own, ranks, parts);
        if (root) write_checkpoint_file((partial / k_model_file).string(), shared);
      });
    failed = agree_on_reasons(m_world, reason);
  }
  // 3. Rank 0 checks that every node's file is there (a run dir not shared by every rank would
  //    lose them), makes the folder durable and renames it into place.
  if (failed.empty())
    failed = m_world.broadcast_string(root ? reason_of([&] {
      if (own != nullptr)
        for (int n = 0; n < m_topo.nodes(); ++n)
          if (!fs::exists(node_file(partial, n)))
            throw Error(node_file(partial, n).string() + ", written by node " + std::to_string(n) +
                        "'s leader, is not visible to rank 0: run.dir must be on a file system that every rank shares");
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
  // Each node's leader reads and checks model.h5 and hands it to its node's ranks: one reader
  // per node, not one per rank, nor one rank sending it to the whole job.
  const bool leader = m_node.rank() == 0;
  const std::string origin = (folder / k_model_file).string();
  std::string failed = agree_on_reasons(
      m_world, leader ? reason_of([&] { out.shared = read_checkpoint_file(origin); }) : std::string());
  if (!failed.empty()) return failed;
  {
    std::string bytes = m_node.broadcast_string(leader ? out.shared.serialize() : std::string());
    if (!leader) out.shared = CheckpointData::deserialize(bytes, origin);
  }
  // Any number of ranks may resume it (the trainer checks what else must hold: docs/training.md,
  // "Elastic resume"): a rank takes the part its PartSource names, a new one none.
  out.has_own = out.shared.integer("per_rank_parts") != 0;
  if (!out.has_own) return {};
  const int64_t written_by = out.shared.integer("world_size");
  int64_t source = m_source(out.shared);
  if (source >= written_by) source = -1;
  const std::string parts = load_parts(folder, out, written_by, source);
  if (parts.empty() && source < 0) {
    out.has_own = false;
    out.from_centre = true;
  }
  return parts;
}

std::string CheckpointStore::load_parts(const fs::path& folder, LoadedCheckpoint& out, int64_t written_by,
                                        int64_t source) {
  // Rank 0 lists the node files once; none means a checkpoint of an earlier squall version,
  // whose rank-RRRRR.h5 files each rank reads itself.
  std::string listing;
  if (m_world.rank() == 0) {
    listing = join_lines(node_files_in(folder));
    if (listing.empty() && !fs::exists(part_file(folder, 0)))
      listing = "!" + folder.string() + ": its model.h5 says the ranks' parts are saved, but it holds neither " +
                node_file("", 0).string() + " nor " + part_file("", 0).string();
  }
  listing = m_world.broadcast_string(listing);
  if (!listing.empty() && listing.front() == '!') return listing.substr(1);
  const std::vector<std::string> files = split_lines(listing);
  if (files.empty() && written_by != m_world.size())
    throw CollectiveError(folder.string() + " was written by an earlier version of squall, a file per rank, by " +
                              std::to_string(written_by) + " rank(s): resume it with " + std::to_string(written_by) +
                              " rank(s)",
                          k_exit_usage);
  if (files.empty())
    return agree_on_reasons(m_world, reason_of([&] {
      if (source >= 0) out.own = read_checkpoint_file(part_file(folder, static_cast<int>(source)).string());
    }));
  if (m_world.rank() == 0 && static_cast<int>(files.size()) != m_topo.nodes())
    log::info(folder.string() + " was written by a job of " + std::to_string(files.size()) + " node(s), this job has " +
              std::to_string(m_topo.nodes()) + ": each node reads its ranks' parts from the node files that hold them");
  const bool leader = m_node.rank() == 0;
  const std::vector<int> sources = m_node.allgather(static_cast<int>(source));
  std::vector<std::string> parts, origins;
  const std::string failed = agree_on_reasons(
      m_world, leader ? reason_of([&] { read_node_parts(folder, files, sources, parts, origins); }) : std::string());
  if (!failed.empty()) return failed;
  const std::string origin = m_node.scatter_strings(origins);
  std::string bytes = m_node.scatter_strings(parts);
  std::vector<std::string>().swap(parts);
  if (source >= 0) out.own = CheckpointData::deserialize(bytes, origin);  // else: a new rank, no part
  return {};
}

void CheckpointStore::read_node_parts(const fs::path& folder, const std::vector<std::string>& files,
                                      const std::vector<int>& sources, std::vector<std::string>& parts,
                                      std::vector<std::string>& origins) const {
  // Ranks that take no part (the writing job had no rank, or no group, for them): their wanted
  // group stays "" (found by no file, read by none).
  std::vector<std::string> wanted;
  for (const int r : sources) wanted.push_back(r >= 0 ? rank_group(r) : std::string());
  // Which file holds each wanted group: this node's own file when it holds them all (a resume
  // on the same layout reads one file per node), else every node file's list of groups.
  std::vector<std::string> holder(wanted.size());
  const std::string own_name = node_file(folder, m_topo.node()).filename().string();
  auto take_from = [&](const std::string& file, const std::vector<std::string>& groups) {
    for (size_t i = 0; i < wanted.size(); ++i)
      if (holder[i].empty() && std::find(groups.begin(), groups.end(), wanted[i]) != groups.end()) holder[i] = file;
  };
  if (std::find(files.begin(), files.end(), own_name) != files.end())
    take_from(own_name, read_checkpoint_group_names((folder / own_name).string()));
  if (std::find(holder.begin(), holder.end(), std::string()) != holder.end())
    for (const std::string& file : files)
      if (file != own_name) take_from(file, read_checkpoint_group_names((folder / file).string()));
  for (size_t i = 0; i < wanted.size(); ++i)
    if (holder[i].empty() && !wanted[i].empty())
      throw Error(folder.string() + ": no node file holds the part of rank " + std::to_string(sources[i]) + " (group " +
                  wanted[i] + "; " + std::to_string(files.size()) + " node file(s): " + files.front() +
                  (files.size() > 1 ? " to " + files.back() : std::string()) + ")");
  parts.assign(wanted.size(), std::string());
  origins.assign(wanted.size(), std::string());
  for (const std::string& file : files) {
    // The groups to read from this file, each once (the ranks of a spatial group take one part).
    std::vector<std::string> here;
    for (size_t i = 0; i < wanted.size(); ++i)
      if (holder[i] == file && std::find(here.begin(), here.end(), wanted[i]) == here.end()) here.push_back(wanted[i]);
    if (here.empty()) continue;
    std::vector<CheckpointData> read = read_checkpoint_groups((folder / file).string(), here);
    for (size_t k = 0; k < here.size(); ++k) {
      const std::string bytes = read[k].serialize();
      for (size_t i = 0; i < wanted.size(); ++i)
        if (holder[i] == file && wanted[i] == here[k]) {
          origins[i] = read[k].origin;
          parts[i] = bytes;
        }
      read[k] = CheckpointData{};
    }
  }
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

}  // namespace squall::checkpoint
