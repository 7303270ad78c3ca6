// `squall predict`: the checkpoint's model on new files (src/eval/predict.hpp).
#include "src/config/setup.hpp"
#include "src/eval/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <deque>
#include <memory>
#include <numeric>
#include <set>

#include "io/checkpoint/store.hpp"
#include "io/formats/dataset.hpp"
#include "io/formats/mask.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "io/input/pad_source.hpp"
#include "io/pictures/png.hpp"
#include "mpi/agreement.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/eval/eval_run.hpp"
#include "src/eval/read_ahead.hpp"
#include "io/pictures/prediction_picture.hpp"
#include "src/nn/models/input_multiple.hpp"

namespace squall::eval {
namespace {

namespace fs = std::filesystem;

bool is_data_file(const fs::path& p) {
  return (p.extension() == ".h5" && p.filename() != "stats.h5") || p.extension() == ".nc";
}
bool is_netcdf(const std::string& p) { return fs::path(p).extension() == ".nc"; }

// A picture of one time step: its first channel in grey, and beside it the mask's classes.
pictures::RgbImage mask_picture(const float* channel, const uint8_t* mask, int64_t h, int64_t w) {
  constexpr int64_t gap = 4;
  pictures::RgbImage img(2 * w + gap, h, 255);
  // Pixels cropped away by data.pad = crop have no value (NaN) and no class: drawn white.
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t i = 0; i < h * w; ++i)
    if (std::isfinite(channel[i])) lo = std::min(lo, channel[i]), hi = std::max(hi, channel[i]);
  const float range = hi > lo ? hi - lo : 1.0f;
  for (int64_t y = 0; y < h; ++y) {
    const int64_t row = h - 1 - y;  // north at the top
    for (int64_t x = 0; x < w; ++x) {
      const auto i = row * w + x;
      if (!std::isfinite(channel[i]) || mask[i] == formats::k_mask_fill) {
        img.set(x, y, 255, 255, 255);
        img.set(w + gap + x, y, 255, 255, 255);
        continue;
      }
      const auto grey = static_cast<uint8_t>(std::clamp((channel[i] - lo) / range, 0.0f, 1.0f) * 255.0f + 0.5f);
      img.set(x, y, grey, grey, grey);
      uint8_t rgb[3];
      pictures::class_colour(mask[i], rgb);
      if (mask[i] == 0) rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(grey / 2);
      img.set(w + gap + x, y, rgb[0], rgb[1], rgb[2]);
    }
  }
  return img;
}

}  // namespace

std::vector<std::string> predict_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      // The masks squall wrote there (--out may be the input folder) are outputs, not inputs.
      std::vector<std::string> files;
      int64_t masks = 0;
      for (const auto& e : fs::directory_iterator(p)) {
        if (!e.is_regular_file() || !is_data_file(e.path())) continue;
        if (formats::is_squall_mask(e.path().string())) ++masks;
        else files.push_back(e.path().string());
      }
      if (files.empty())
        throw UsageError("--data " + p + ": a folder with no data files (*.nc, or *.h5 other than stats.h5" +
                         (masks > 0 ? "; its " + std::to_string(masks) + " mask file(s) squall wrote are left out" : "") +
                         ")");
      std::sort(files.begin(), files.end());
      out.insert(out.end(), files.begin(), files.end());
    } else if (fs::exists(p, ec)) {
      if (is_data_file(p) && formats::is_squall_mask(p))
        throw UsageError("--data " + p + ": a mask file squall predict wrote (attribute " + formats::k_mask_marker +
                         "), not an input");
      out.push_back(p);
    } else {
      throw UsageError("--data " + p + ": no such file or folder");
    }
  }
  return out;
}

int64_t count_regions(const uint8_t* mask, int64_t h, int64_t w, uint8_t cls) {
  std::vector<uint8_t> seen(static_cast<size_t>(h * w), 0);
  std::vector<int64_t> stack;
  int64_t regions = 0;
  for (int64_t start = 0; start < h * w; ++start) {
    if (mask[start] != cls || seen[static_cast<size_t>(start)]) continue;
    ++regions;
    seen[static_cast<size_t>(start)] = 1;
    stack.push_back(start);
    while (!stack.empty()) {
      const int64_t p = stack.back();
      stack.pop_back();
      const int64_t y = p / w, x = p % w;
      for (int64_t dy = -1; dy <= 1; ++dy)
        for (int64_t dx = -1; dx <= 1; ++dx) {
          const int64_t ny = y + dy;
          if ((dy == 0 && dx == 0) || ny < 0 || ny >= h) continue;
          const int64_t nx = (x + dx + w) % w;  // longitude wraps around
          const int64_t q = ny * w + nx;
          if (mask[q] == cls && !seen[static_cast<size_t>(q)]) {
            seen[static_cast<size_t>(q)] = 1;
            stack.push_back(q);
          }
        }
    }
  }
  return regions;
}

std::vector<int64_t> count_event_regions(const uint8_t* mask, int64_t h, int64_t w, int64_t classes) {
  std::vector<int64_t> regions(static_cast<size_t>(std::max<int64_t>(classes, 0)), 0);
  if (h <= 0 || w <= 0 || classes <= 1) return regions;
  const int64_t n = h * w;
  if (n > std::numeric_limits<int32_t>::max()) {  // beyond 32-bit pixel indices: a fill per class
    for (int64_t c = 1; c < classes && c < 256; ++c) regions[static_cast<size_t>(c)] = count_regions(mask, h, w, static_cast<uint8_t>(c));
    return regions;
  }
  // parent[p]: a pixel of the same region nearer its root; a root is its own parent. Pixels of
  // the background or of no class in range are never looked at.
  std::vector<int32_t> parent(static_cast<size_t>(n));
  const auto event = [&](int64_t p) { return mask[p] != 0 && mask[p] < classes; };
  const auto find = [&](int32_t p) {
    while (parent[static_cast<size_t>(p)] != p) {
      const int32_t up = parent[static_cast<size_t>(parent[static_cast<size_t>(p)])];
      parent[static_cast<size_t>(p)] = up;  // path halving
      p = up;
    }
    return p;
  };
  const auto join = [&](int32_t a, int32_t b) {
    a = find(a), b = find(b);
    if (a != b) parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  };
  for (int64_t p = 0; p < n; ++p) parent[static_cast<size_t>(p)] = static_cast<int32_t>(p);
  // Every pair of 8-neighbours once: a pixel with its right neighbour (the last column's is the
  // first: longitude wraps) and the three below it.
  for (int64_t y = 0; y < h; ++y) {
    const int64_t row = y * w, below = row + w;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t p = row + x;
      if (!event(p)) continue;
      const uint8_t c = mask[p];
      const int64_t left = x == 0 ? w - 1 : x - 1, right = x == w - 1 ? 0 : x + 1;
      const auto p32 = static_cast<int32_t>(p);
      if (mask[row + right] == c) join(p32, static_cast<int32_t>(row + right));
      if (y + 1 < h) {
        if (mask[below + left] == c) join(p32, static_cast<int32_t>(below + left));
        if (mask[below + x] == c) join(p32, static_cast<int32_t>(below + x));
        if (mask[below + right] == c) join(p32, static_cast<int32_t>(below + right));
      }
    }
  }
  for (int64_t p = 0; p < n; ++p)
    if (event(p) && parent[static_cast<size_t>(p)] == p) ++regions[mask[p]];
  return regions;
}

GridSpacing grid_spacing(int64_t rows, int64_t cols, const std::vector<double>& lat, const std::vector<double>& lon) {
  GridSpacing g;
  g.rows = rows, g.cols = cols;
  const auto step = [](const std::vector<double>& c) {
    return std::abs(c.back() - c.front()) / static_cast<double>(c.size() - 1);
  };
  g.lat_from_coordinates = rows > 1 && static_cast<int64_t>(lat.size()) == rows;
  g.lon_from_coordinates = cols > 1 && static_cast<int64_t>(lon.size()) == cols;
  g.dlat = g.lat_from_coordinates ? step(lat) : rows > 0 ? 180.0 / static_cast<double>(rows) : 0.0;
  g.dlon = g.lon_from_coordinates ? step(lon) : cols > 0 ? 360.0 / static_cast<double>(cols) : 0.0;
  return g;
}

bool same_spacing(const GridSpacing& file, const GridSpacing& trained, data::PadMode trained_pad, int64_t multiple) {
  const auto near = [](double x, double y) { return x > 0 && y > 0 && std::abs(x / y - 1.0) <= 0.05; };
  // The training grid's side as read: the model's, or any that data.pad padded or cropped to it.
  const auto fits = [&](int64_t side, int64_t model) {
    const int64_t lo = trained_pad == data::PadMode::pad ? model - multiple + 1 : model;
    const int64_t hi = trained_pad == data::PadMode::crop ? model + multiple - 1 : model;
    const auto s = static_cast<double>(side);
    return side > 0 && s >= 0.95 * static_cast<double>(lo) && s <= 1.05 * static_cast<double>(hi);
  };
  const bool lat = file.lat_from_coordinates && trained.lat_from_coordinates ? near(file.dlat, trained.dlat)
                                                                              : fits(file.rows, trained.rows);
  const bool lon = file.lon_from_coordinates && trained.lon_from_coordinates ? near(file.dlon, trained.dlon)
                                                                              : fits(file.cols, trained.cols);
  return lat && lon;
}

std::string grid_text(const GridSpacing& g) {
  char spacing[96];
  std::snprintf(spacing, sizeof(spacing), "%.4g x %.4g degrees", g.dlat, g.dlon);
  const char* how = g.lat_from_coordinates && g.lon_from_coordinates   ? ""
                    : !g.lat_from_coordinates && !g.lon_from_coordinates ? ", from its size as a global grid"
                                                                          : ", partly from its size as a global grid";
  return std::to_string(g.rows) + " x " + std::to_string(g.cols) + " (rows x columns) at " + spacing +
         " (latitude x longitude" + how + ")";
}

void ChannelSums::add(const float* images, int64_t samples, int64_t channels, int64_t hw) {
  if (sum.empty()) sum.assign(static_cast<size_t>(channels), 0.0), sum_sq.assign(static_cast<size_t>(channels), 0.0);
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = images + (s * channels + c) * hw;
      double a = 0, b = 0;
      for (int64_t i = 0; i < hw; ++i) a += p[i], b += static_cast<double>(p[i]) * p[i];
      sum[static_cast<size_t>(c)] += a;
      sum_sq[static_cast<size_t>(c)] += b;
    }
  count += samples * hw;
}

std::vector<std::string> input_statistics_warnings(const ChannelSums& sums, const data::Normalization& norm,
                                                   const std::vector<std::string>& names,
                                                   const std::vector<std::string>& units, const std::string& file) {
  std::vector<std::string> out;
  if (norm.kind == "none" || sums.count == 0) return out;
  const bool zscore = norm.kind == "zscore";
  const auto n = static_cast<double>(sums.count);
  for (size_t c = 0; c < sums.sum.size() && c < norm.mean.size() && c < norm.std.size(); ++c) {
    const double mean = sums.sum[c] / n;
    if (!(std::abs(mean) > k_input_mean_limit)) continue;  // NaN sums are the bad-sample checks' to report
    const double spread = std::sqrt(std::max(0.0, sums.sum_sq[c] / n - mean * mean));
    const double centre = norm.mean[c], scale = norm.std[c], input_scale = norm.input_scale;
    const double raw_mean = (mean * scale + centre) / input_scale;
    const std::string unit = c < units.size() && !units[c].empty() ? " " + units[c] : "";
    const std::string name = c < names.size() && !names[c].empty()
                                 ? names[c] + " (channel " + std::to_string(c) + ")"
                                 : "channel " + std::to_string(c);
    char text[640];
    if (zscore)
      std::snprintf(text, sizeof(text),
                    "averages %.6g%s, %.1f standard deviations %s the training mean %.6g%s (standard deviation "
                    "%.4g%s; normalised values of this file: mean %.1f, spread %.3g)",
                    raw_mean, unit.c_str(), std::abs(mean), mean > 0 ? "above" : "below", centre / input_scale,
                    unit.c_str(), scale / input_scale, unit.c_str(), mean, spread);
    else
      std::snprintf(text, sizeof(text),
                    "averages %.6g%s, %.1f training ranges %s the training range [%.6g, %.6g]%s (normalised "
                    "values of this file: mean %.1f, spread %.3g)",
                    raw_mean, unit.c_str(), mean > 0 ? mean - 1.0 : -mean, mean > 0 ? "above" : "below",
                    centre / input_scale, (centre + scale) / input_scale, unit.c_str(), mean, spread);
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", k_input_mean_limit);
    out.push_back(file + ": input " + name + " " + text + ", beyond the " + limit +
                  " that predict accepts: the model never saw such values and its masks here mean little. Likely "
                  "causes: other units than the training data's (hPa read as Pa, degrees Celsius as kelvin, a "
                  "flux per hour as per second), another variable in this channel (data.netcdf_variables), or fill "
                  "values the file does not declare");
  }
  return out;
}

namespace {

// One input file on its way through predict: opened and read by the reader thread, its masks
// filled by the model's thread, and written by the reader once its last time step is done.
struct FileJob {
  int64_t index = 0;  // in the inputs
  std::string input;
  std::unique_ptr<formats::NetcdfSource> nc_source;
  std::unique_ptr<data::DataSource> h5_source;
  std::unique_ptr<data::DataSource> fitted;  // the input on the model's grid, when data.pad changes it
  const data::DataSource* source = nullptr;  // what the batches read: fitted, or the input as it is
  input::GridFit fit;                        // the input's grid -> the model's (data.pad)
  ChannelSums sums;                          // of its normalised values, for the statistics check
  std::vector<std::string> notes, warnings;  // PredictedFile's
  formats::MaskOutput out;
  formats::NetcdfGrid input_grid;     // a netCDF input's grid: its dimension names, its latitude order
  int64_t read = 0;                   // time steps read (reader thread)
  int64_t done = 0;                   // time steps predicted (model thread)
};

// A batch of samples from one or more files: slot i holds time step slots[i].t of slots[i].file.
// Slots past slots.size() repeat stale samples, whose outputs are not used.
struct HostBatch {
  struct Slot {
    FileJob* file;
    int64_t t;
  };
  std::vector<float> images;
  std::vector<int32_t> labels;
  std::vector<Slot> slots;
};

// A split predict's group runs the same files in the same batches and exchanges halos at every
// one, so a failure that only some of its ranks meet (a window that cannot be read, a mask the
// first rank cannot write) must stop all of them at the same batch, not leave the others
// waiting in an exchange. Collective over the group (a no-op without a split): every rank says
// whether its work since the last call failed; when one did, every rank throws, the failing
// ones their own error, the others the error of the group's lowest rank that failed.
void agree_in_group(const TileGroups& t, std::exception_ptr failed, int world_rank) {
  if (!t.split_sample()) {
    if (failed) std::rethrow_exception(failed);
    return;
  }
  const mpi::Communicator& group = t.groups->group;
  if (group.allreduce_max(static_cast<int64_t>(failed != nullptr)) == 0) return;
  std::string mine;  // "u" or "e" (a usage error or another), then the message; "" when fine
  if (failed) {
    try {
      std::rethrow_exception(failed);
    } catch (const UsageError& e) {
      mine = "u" + std::string(e.what());
    } catch (const std::exception& e) {
      mine = "e" + std::string(e.what());
    } catch (...) {
      mine = "eunknown error";
    }
    mine.insert(1, "rank " + std::to_string(world_rank) + " (tile " + std::to_string(t.group_rank) + " of group " +
                       std::to_string(t.index) + "): ");
  }
  std::string lowest;
  for (const std::string& m : group.gather_strings(mine))
    if (lowest.empty()) lowest = m;
  lowest = group.broadcast_string(lowest);
  if (failed) std::rethrow_exception(failed);
  const std::string why = "another rank of this rank's group failed: " + lowest.substr(1);
  if (lowest[0] == 'u') throw UsageError(why);
  throw Error(why);
}

class Predictor {
 public:
  Predictor(const checkpoint::CheckpointModel& ck, const config::Config& cfg, data::PadMode trained_pad,
            const PredictOptions& options, const std::vector<std::string>& inputs, int64_t first, int64_t last,
            const mpi::Topology& topo, TileGroups& tiles)
      : m_ck(ck), m_cfg(cfg), m_trained_pad(trained_pad), m_options(options), m_inputs(inputs), m_next(first),
        m_last(last), m_topo(topo), m_tiles(tiles) {
    const data::Normalization& norm = ck.model.normalization;
    m_open.normalize = norm.kind != "none";
    m_open.fixed = norm;  // its kind, not open.normalization, says how
    m_open.labels_optional = true;
    m_open.cache_bytes = 0;
    m_netcdf = formats::netcdf_options(cfg.data.channels, cfg.data.netcdf_variables, cfg.data.netcdf_labels);
    m_netcdf.units = ck.model.channel_units;  // the files' values in the units the model was trained on
    m_batch = config::eval_batch(cfg);
  }

  // Runs the files: the reader thread opens, reads and writes while the model computes the
  // batch before. Batches run across file boundaries, so files of one time step (DeepCAM's)
  // fill whole batches.
  Predictions run() {
    Predictions result;
    if (m_next >= m_last) return result;
    const int rank = m_topo.rank();
    std::exception_ptr failed;
    try {
      start();
    } catch (...) {
      failed = std::current_exception();
    }
    agree_in_group(m_tiles, failed, rank);
    ReadAhead next;  // the reader thread: it uses the jobs and the host batches
    const Stopwatch timer;
    try {
      fill(m_host[0]);
    } catch (...) {
      failed = std::current_exception();
    }
    agree_in_group(m_tiles, failed, rank);
    std::vector<FileJob*> finished;  // predicted, not yet written
    for (int k = 0;; ++k) {
      try {
        next.wait();  // this batch's read (and the last writes); rethrows their error
      } catch (...) {
        failed = std::current_exception();
      }
      agree_in_group(m_tiles, failed, rank);
      HostBatch& cur = m_host[k % 2];
      if (cur.slots.empty()) break;
      HostBatch& other = m_host[(k + 1) % 2];
      next.start([this, &other, done = std::move(finished)] {
        for (FileJob* f : done) finish(*f);
        fill(other);
      });
      finished = compute(cur);
      if (m_tiles.first()) result.samples += static_cast<int64_t>(cur.slots.size());
    }
    for (FileJob* f : finished) finish(*f);
    // In input order (a file of no time steps was written when it was opened).
    std::stable_sort(m_done.begin(), m_done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& d : m_done) {
      result.warnings += static_cast<int64_t>(d.second.warnings.size());
      result.files.push_back(std::move(d.second));
    }
    result.seconds = timer.seconds();
    return result;
  }

 private:
  // The first file opened and the model built for its samples, on this rank's tile of them
  // under a split.
  void start() {
    open_next();
    FileJob& first = *m_jobs.front();
    const data::DatasetInfo& info = first.source->info();
    const nn::ModelSpec spec = fit_checkpoint_model(m_ck, m_cfg, "--data", first.input, *first.source, m_batch);
    place_tile(m_tiles, spec, info, "--data " + first.input);
    m_model = build_inference_model(m_ck, m_cfg, spec, info, m_batch, m_topo, &m_tiles);
    m_weights_version = nn::new_weights_version();
    m_built = info.sample;
    m_tile = m_tiles.window ? nn::Shape(1, m_built.c(), m_tiles.window->rows, m_tiles.window->cols) : m_built;
    m_classes = static_cast<int64_t>(info.class_names.size());
    const int64_t hw = m_tile.h() * m_tile.w();
    m_dev_pred = m_model.backend->allocate_labels(static_cast<size_t>(m_batch * hw), m_pred_buf);
    for (HostBatch& h : m_host) {
      h.images.assign(static_cast<size_t>(m_batch * m_tile.per_sample()), 0.0f);
      h.labels.assign(static_cast<size_t>(m_batch * hw), -1);
    }
  }

  // Opens inputs[m_next] as a job at the back of m_jobs: its source, its grid, room for its masks.
  void open_next() {
    auto job = std::make_unique<FileJob>();
    FileJob& j = *job;
    j.index = m_next;
    j.input = m_inputs[static_cast<size_t>(m_next++)];
    const bool nc = is_netcdf(j.input);
    if (nc) {
      j.nc_source = formats::open_netcdf_files({j.input}, "", m_open, m_netcdf);
      j.source = j.nc_source.get();
    } else {  // the grid too, from the same opening of the file
      j.h5_source = formats::open_deepcam_file_and_grid(j.input, m_open, j.out.lat, j.out.lon);
      j.source = j.h5_source.get();
    }
    // The grid rule (docs/inference.md, "Grids"), then the grid the model's stride divides.
    const data::DatasetInfo& own = j.source->info();
    std::vector<double> lat = own.lat, lon = own.lon;
    if (!nc) lat = j.out.lat, lon = j.out.lon;
    std::string unfit;  // why data.pad cannot make the grid the model's: said after the grid rule
    try {
      j.fit = config::grid_fit(m_cfg, own, "--data " + j.input);
    } catch (const UsageError& e) {
      unfit = std::string(e.what()) + " (for predict: --set data.pad=pad or --set data.pad=crop)";
      j.fit = input::GridFit{data::PadMode::none, 1, own.sample.h(), own.sample.w(), own.sample.h(), own.sample.w()};
    }
    check_grid(j, grid_spacing(own.sample.h(), own.sample.w(), lat, lon));
    if (!unfit.empty()) throw UsageError(unfit);
    if (j.fit.changes()) {
      j.fitted = input::fit_grid_view(*j.source, j.fit);
      j.source = j.fitted.get();
    }
    const data::DatasetInfo& info = j.source->info();
    if (!m_trained_size_noted.contains({info.sample.h(), info.sample.w()}) &&
        (info.sample.h() != m_ck.model.input.h() || info.sample.w() != m_ck.model.input.w())) {
      m_trained_size_noted.insert({info.sample.h(), info.sample.w()});
      const GridSpacing here = grid_spacing(own.sample.h(), own.sample.w(), lat, lon);
      std::string seen = j.fit.changes() ? ", which the model sees " + std::string(j.fit.mode == data::PadMode::pad ? "padded" : "cropped") +
                                               " to " + std::to_string(info.sample.h()) + " x " + std::to_string(info.sample.w())
                                         : "";
      j.notes.push_back(j.input + ": a grid of " + grid_text(here) + seen + ", where the model was trained on " +
                        grid_text(trained_grid()) + ": the same spacing, another size; the model runs on it as it is");
    }
    if (m_built.rank > 0) {
      if (info.sample.c() != m_built.c() || info.sample.h() != m_built.h() || info.sample.w() != m_built.w())
        throw UsageError(j.input + ": samples of " + info.sample.str() + ", but the files before it have " +
                         m_built.str() + (info.sample.c() == m_built.c()
                                              ? ": one predict runs the model at one size; predict files of this "
                                                "grid with another squall predict"
                                              : ""));
      if (static_cast<int64_t>(info.class_names.size()) != m_classes)
        throw UsageError(j.input + ": " + std::to_string(info.class_names.size()) +
                         " classes, but the files before it have " + std::to_string(m_classes));
    }
    formats::MaskOutput& out = j.out;
    // The masks lie on the input's own grid, whatever the model's.
    const int64_t hw = own.sample.h() * own.sample.w();
    out.times = j.source->size();
    out.h = own.sample.h();
    out.w = own.sample.w();
    out.class_names = info.class_names;
    // Under a split only the group's first rank holds and writes the masks.
    if (m_tiles.first()) out.mask.resize(static_cast<size_t>(out.times * hw));
    if (m_options.probabilities && m_tiles.first())
      out.probabilities.resize(static_cast<size_t>(out.times * static_cast<int64_t>(info.class_names.size()) * hw));
    if (nc) {
      for (int64_t t = 0; t < out.times; ++t) {
        const formats::NetcdfGrid grid = j.nc_source->sample_grid(t);
        if (t == 0) {
          out.lat = grid.lat;
          out.lon = grid.lon;
          out.time_units = grid.time_units;
          out.calendar = grid.calendar;
          j.input_grid = grid;
        }
        out.time.insert(out.time.end(), grid.time.begin(), grid.time.end());
      }
      if (static_cast<int64_t>(out.time.size()) != out.times) out.time.clear();
    }
    const data::Normalization& norm = m_ck.model.normalization;
    out.attributes = {{"model", m_ck.state.model},
                      {"checkpoint", m_ck.folder.string()},
                      {"step", std::to_string(m_ck.state.step)},
                      {"input", j.input},
                      {"normalisation", norm.kind + " (" + norm.source + ")"}};
    m_jobs.push_back(std::move(job));
  }

  // The next batch's samples, from the job being read and the files after it (reader thread):
  // under a split, this rank's window of each.
  void fill(HostBatch& b) {
    b.slots.clear();
    const int64_t per = m_tile.per_sample(), hw = m_tile.h() * m_tile.w();
    while (static_cast<int64_t>(b.slots.size()) < m_batch) {
      FileJob* j = m_jobs.empty() ? nullptr : m_jobs.back().get();
      if (j == nullptr || j->read == j->out.times) {
        if (m_next >= m_last) break;
        open_next();
        j = m_jobs.back().get();
        if (j->out.times == 0) {  // nothing to predict: its (empty) masks are written now
          finish(*j);
          continue;
        }
      }
      const auto at = static_cast<int64_t>(b.slots.size());
      const int64_t take = std::min(m_batch - at, j->out.times - j->read);
      std::vector<int64_t> idx(static_cast<size_t>(take));
      std::iota(idx.begin(), idx.end(), j->read);
      // Predict needs no labels: the DeepCAM reader skips them (netCDF's reads them with the fields).
      int32_t* labels = j->h5_source ? nullptr : b.labels.data() + at * hw;
      if (m_tiles.window) j->source->read_window(idx, *m_tiles.window, b.images.data() + at * per, labels);
      else j->source->read(idx, b.images.data() + at * per, labels);
      const float* images = b.images.data() + at * per;
      // The statistics check: sums over the values just read, while they are in the cache.
      j->sums.add(images, take, m_built.c(), hw);
      for (int64_t t = j->read; t < j->read + take; ++t) b.slots.push_back({j, t});
      j->read += take;
      // A split rank has its tile's sums: the group's are summed once the file is predicted (compute).
      if (j->read == j->out.times && !m_tiles.split_sample()) statistics_warnings(*j);
    }
  }

  // The statistics check of a file whose sums are complete.
  void statistics_warnings(FileJob& j) {
    for (std::string& w : input_statistics_warnings(j.sums, m_ck.model.normalization, channel_names(j),
                                                    m_ck.model.channel_units, j.input)) {
      log::warn(w);
      j.warnings.push_back(std::move(w));
    }
  }

  // The names of the channels for messages: the checkpoint's, else the input's own.
  const std::vector<std::string>& channel_names(const FileJob& j) const {
    if (!m_ck.model.channel_names.empty()) return m_ck.model.channel_names;
    return j.source->info().channel_names;
  }

  // The grid the model was trained on, as its checkpoint records it.
  GridSpacing trained_grid() const {
    return grid_spacing(m_ck.model.input.h(), m_ck.model.input.w(), m_ck.model.lat, m_ck.model.lon);
  }

  // The grid rule: a file of the training spacing is taken at any size; one of another spacing
  // is refused (exit 2), or with --any-grid taken with a warning.
  void check_grid(FileJob& j, const GridSpacing& here) const {
    const GridSpacing trained = trained_grid();
    if (same_spacing(here, trained, m_trained_pad, nn::input_multiple(m_ck.model.spec))) return;
    const std::string both = j.input + ": a grid of " + grid_text(here) + ", but the model of checkpoint " +
                             m_ck.folder.string() + " was trained on " + grid_text(trained) +
                             ": at another spacing the same weather spans another number of pixels, and the network "
                             "sees it at a scale it never learned";
    if (!m_options.any_grid)
      throw UsageError(both + "; regrid the file to the training spacing (within 5% in each direction), or pass "
                              "--any-grid to predict on it anyway, with a warning");
    j.warnings.push_back(both + "; predicting on it all the same, as --any-grid asks: check its masks");
    if (m_tiles.first()) log::warn(j.warnings.back());  // once per group
  }

  // The model on one batch; its classes (and softmax) into the jobs' masks. Returns the jobs
  // whose last time step this was (model thread).
  std::vector<FileJob*> compute(HostBatch& b) {
    nn::Graph& g = *m_model.graph;
    nn::Backend& be = *m_model.backend;
    nn::Stream& s = *m_model.stream;
    const int64_t hw = m_built.h() * m_built.w(), classes = m_classes;
    const int64_t tile_hw = m_tile.h() * m_tile.w();
    be.copy_from_host(s, g.input().f32(), b.images.data(), b.images.size());
    nn::RunMode mode;
    mode.train = false;
    mode.weights_version = m_weights_version;  // the checkpoint's weights, loaded once
    g.forward(s, mode);
    const auto shape = g.output_shape();  // this rank's tile under a split
    m_pred.resize(static_cast<size_t>(m_batch * tile_hw));
    be.argmax_channels(s, g.dtype(), g.output().data, m_dev_pred, shape.n(), shape.c(), shape.h() * shape.w());
    be.copy_labels_to_host(s, m_pred.data(), m_dev_pred, m_pred.size());
    if (m_options.probabilities) {
      const auto count = static_cast<size_t>(shape.n() * shape.c() * shape.h() * shape.w());
      m_logits.resize(count);
      if (g.dtype() == nn::DType::f32) {
        be.copy_to_host(s, m_logits.data(), g.output().f32(), count);
      } else {
        if (!m_wide) m_wide = be.allocate(count);
        be.convert(s, g.output().data, g.dtype(), m_wide.data(), nn::DType::f32, count);
        be.copy_to_host(s, m_logits.data(), m_wide.data(), count);
      }
    }
    be.synchronize(s);
    std::vector<FileJob*> finished;
    if (m_tiles.split_sample()) {
      gather_tiles();
      for (const HostBatch::Slot& slot : b.slots)
        if (slot.t == slot.file->out.times - 1) sum_statistics(*slot.file);
      if (!m_tiles.first()) {  // the first rank writes the masks: here only what is done
        for (const HostBatch::Slot& slot : b.slots)
          if (++slot.file->done == slot.file->out.times) finished.push_back(slot.file);
        return finished;
      }
    }
    std::vector<double> e(static_cast<size_t>(classes));  // one pixel's exp(z - max)
    for (size_t k = 0; k < b.slots.size(); ++k) {
      FileJob& j = *b.slots[k].file;
      const int64_t t = b.slots[k].t;
      const bool fitted = j.fit.changes();
      const int64_t own_hw = j.out.h * j.out.w;  // the input's grid, where the masks go
      const int32_t* pred = m_pred.data() + static_cast<int64_t>(k) * hw;
      // On the model's grid, then back onto the input's (padding cut off, cropped pixels filled).
      m_mask.resize(static_cast<size_t>(hw));
      uint8_t* dst = fitted ? m_mask.data() : j.out.mask.data() + t * own_hw;
      for (int64_t p = 0; p < hw; ++p) dst[p] = static_cast<uint8_t>(pred[p]);
      if (fitted) input::unfit_plane(m_mask.data(), j.out.mask.data() + t * own_hw, j.fit, formats::k_mask_fill);
      if (m_options.probabilities) {
        const float* z = m_logits.data() + static_cast<int64_t>(k) * classes * hw;
        m_prob.resize(static_cast<size_t>(classes * hw));
        float* prob = fitted ? m_prob.data() : j.out.probabilities.data() + t * classes * own_hw;
        for (int64_t p = 0; p < hw; ++p) {  // softmax over the classes, in double
          double top = z[p];
          for (int64_t c = 1; c < classes; ++c) top = std::max(top, static_cast<double>(z[c * hw + p]));
          double sum = 0;
          for (int64_t c = 0; c < classes; ++c) sum += (e[static_cast<size_t>(c)] = std::exp(z[c * hw + p] - top));
          for (int64_t c = 0; c < classes; ++c) prob[c * hw + p] = static_cast<float>(e[static_cast<size_t>(c)] / sum);
        }
        if (fitted)
          for (int64_t c = 0; c < classes; ++c)
            input::unfit_plane(prob + c * hw, j.out.probabilities.data() + (t * classes + c) * own_hw, j.fit,
                               std::numeric_limits<float>::quiet_NaN());
      }
      if (++j.done == j.out.times) finished.push_back(&j);
    }
    return finished;
  }

  // The tiles of this batch's classes (and logits), gathered onto the group's first rank and put
  // together there into whole samples in m_pred (and m_logits), as an unsplit model leaves them.
  // Gathered rather than written collectively: a mask file is written whole by one rank,
  // through the same writer (write-then-rename) as an unsplit predict's, so it has the same
  // layout and metadata and is never seen half written (a collective netCDF-4 write would need
  // parallel HDF5, and each rank would hold its own copy of the file's metadata to keep in step);
  // and the masks of a file of many time steps are held by one rank only, as an unsplit
  // predict holds them (model thread; the group has finished the batch's halos).
  void gather_tiles() {
    const nn::SpatialPlace& place = *m_tiles.place;
    const int64_t tile_hw = m_tile.h() * m_tile.w(), classes = m_classes;
    const bool logits = m_options.probabilities;
    // This rank's tile: its classes as bytes (fewer than 256 classes: the masks are bytes), then its logits.
    std::string mine(static_cast<size_t>(m_batch * tile_hw), '\0');
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>(static_cast<uint8_t>(m_pred[i]));
    if (logits) mine.append(reinterpret_cast<const char*>(m_logits.data()), m_logits.size() * sizeof(float));
    const std::vector<std::string> tiles = m_tiles.groups->group.gather_strings(mine);
    if (!m_tiles.first()) return;
    const int64_t h = m_built.h(), w = m_built.w(), hw = h * w;
    m_pred.assign(static_cast<size_t>(m_batch * hw), 0);
    if (logits) m_logits.assign(static_cast<size_t>(m_batch * classes * hw), 0.0f);
    for (size_t r = 0; r < tiles.size(); ++r) {
      const nn::Span rows = place.row_spans[r / static_cast<size_t>(place.split.cols)];
      const nn::Span cols = place.col_spans[r % static_cast<size_t>(place.split.cols)];
      const int64_t th = rows.size(), tw = cols.size();
      const std::string& t = tiles[r];
      const size_t want = static_cast<size_t>(m_batch * th * tw) * (1 + (logits ? classes * sizeof(float) : 0));
      SQUALL_CHECK(t.size() == want, "predict: group rank " + std::to_string(r) + " sent " + std::to_string(t.size()) +
                                         " bytes of its tile, not " + std::to_string(want));
      const auto* classes_of = reinterpret_cast<const uint8_t*>(t.data());
      for (int64_t n = 0; n < m_batch; ++n)
        for (int64_t y = 0; y < th; ++y) {
          int32_t* dst = m_pred.data() + n * hw + (rows.begin + y) * w + cols.begin;
          const uint8_t* src = classes_of + (n * th + y) * tw;
          for (int64_t x = 0; x < tw; ++x) dst[x] = src[x];
        }
      if (!logits) continue;
      const char* z = t.data() + m_batch * th * tw;
      for (int64_t p = 0; p < m_batch * classes; ++p)  // (sample, class) planes
        for (int64_t y = 0; y < th; ++y)
          std::memcpy(m_logits.data() + p * hw + (rows.begin + y) * w + cols.begin,
                      z + static_cast<size_t>((p * th + y) * tw) * sizeof(float), static_cast<size_t>(tw) * sizeof(float));
    }
  }

  // A split file's input statistics: its tiles' sums added over the group, then checked on the
  // group's first rank, which reports the file (model thread, in the same order on every rank
  // of the group: its files finish at the same batches).
  void sum_statistics(FileJob& j) {
    ChannelSums& c = j.sums;
    std::vector<double> all(c.sum);
    all.insert(all.end(), c.sum_sq.begin(), c.sum_sq.end());
    all.push_back(static_cast<double>(c.count));
    m_tiles.groups->group.allreduce_sum(std::span<double>(all));
    const size_t n = c.sum.size();
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), c.sum.begin());
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(n), all.begin() + static_cast<std::ptrdiff_t>(2 * n),
              c.sum_sq.begin());
    c.count = static_cast<int64_t>(all.back());
    if (m_tiles.first()) statistics_warnings(j);
  }

  // A predicted job's counts and files; the job is then let go (reader thread). Under a split,
  // the group's first rank writes; the others only let it go.
  void finish(FileJob& j) {
    if (!m_tiles.first()) {
      const auto it = std::find_if(m_jobs.begin(), m_jobs.end(), [&](const auto& p) { return p.get() == &j; });
      if (it != m_jobs.end()) m_jobs.erase(it);
      return;
    }
    formats::MaskOutput& out = j.out;
    const int64_t h = out.h, w = out.w, hw = h * w;
    const auto classes = static_cast<int64_t>(out.class_names.size());
    PredictedFile r;
    r.input = j.input;
    r.samples = out.times;
    r.class_names = out.class_names;
    r.output = (fs::path(m_options.out) / (fs::path(j.input).stem().string() + "-mask." + m_options.format)).string();
    r.pixels.assign(static_cast<size_t>(classes), 0);
    r.regions.assign(static_cast<size_t>(classes), 0);
    for (uint8_t v : out.mask)
      if (v != formats::k_mask_fill) ++r.pixels[std::min<size_t>(v, r.pixels.size() - 1)];
    r.notes = std::move(j.notes);
    r.warnings = std::move(j.warnings);
    for (int64_t t = 0; t < out.times; ++t) {
      const std::vector<int64_t> counts = count_event_regions(out.mask.data() + t * hw, h, w, classes);
      for (int64_t c = 1; c < classes; ++c) r.regions[static_cast<size_t>(c)] += counts[static_cast<size_t>(c)];
    }
    if (m_options.format == "h5") {
      formats::write_mask_h5(r.output, out);
    } else {
      if (out.lat.empty() || out.lon.empty())
        throw UsageError(j.input + ": no latitudes and longitudes (/climate/lat, /climate/lon): a netCDF mask needs "
                                   "its grid; write --format h5");
      if (out.time.empty())  // DeepCAM files carry no time: the time steps are numbered
        for (int64_t t = 0; t < out.times; ++t) out.time.push_back(static_cast<double>(t));
      formats::MaskAttributes attrs;
      attrs.source = "squall " + m_ck.state.model;
      attrs.checkpoint = m_ck.folder.string() + " (step " + std::to_string(m_ck.state.step) + ")";
      attrs.history = "squall predict on " + j.input;
      // The input's dimension names and latitude order, so that the mask overlays it.
      const formats::MaskGrid grid{out.lat,           out.lon,           out.time,
                                   out.time_units,    out.calendar,      j.input_grid.lat_dim,
                                   j.input_grid.lon_dim, j.input_grid.time_dim, j.input_grid.lat_descending};
      formats::write_netcdf_masks(r.output, grid, out.mask, out.probabilities, out.class_names, attrs);
    }
    if (m_options.png) {
      // A picture per time step. Its input is read again, a step at a time, rather than kept
      // from the batches: a file of many steps is not held twice in memory.
      // The sample is on the model's grid (data.pad): its first channel goes back to the
      // input's, where the mask is, cropped-away pixels NaN.
      std::vector<float> sample(static_cast<size_t>(m_built.per_sample()));
      std::vector<int32_t> labels(static_cast<size_t>(m_built.per_sample() / m_built.c()));
      std::vector<float> first(static_cast<size_t>(hw));
      for (int64_t t = 0; t < out.times; ++t) {
        const int64_t step[] = {t};
        j.source->read(step, sample.data(), j.h5_source ? nullptr : labels.data());
        input::unfit_plane(sample.data(), first.data(), j.fit, std::numeric_limits<float>::quiet_NaN());
        const std::string name = pictures::mask_picture_name(fs::path(j.input).stem().string(), t, out.times);
        pictures::write_png((fs::path(m_options.out) / name).string(),
                            mask_picture(first.data(), out.mask.data() + t * hw, h, w));
      }
    }
    m_done.emplace_back(j.index, std::move(r));
    const auto it = std::find_if(m_jobs.begin(), m_jobs.end(), [&](const auto& p) { return p.get() == &j; });
    if (it != m_jobs.end()) m_jobs.erase(it);
  }

  const checkpoint::CheckpointModel& m_ck;
  const config::Config& m_cfg;
  data::PadMode m_trained_pad;  // the run's own data.pad (m_cfg's may be overridden)
  const PredictOptions& m_options;
  const std::vector<std::string>& m_inputs;
  int64_t m_next, m_last;  // this rank's files not yet opened: [m_next, m_last)
  const mpi::Topology& m_topo;
  TileGroups& m_tiles;  // parallel.spatial: this rank's group and tile (none: whole samples)
  formats::OpenOptions m_open;
  formats::NetcdfOptions m_netcdf;
  int64_t m_batch = 0;
  InferenceModel m_model;
  uint64_t m_weights_version = 0;  // RunMode::weights_version of every forward
  nn::Shape m_built;  // the sample shape the model was built for
  nn::Shape m_tile;   // this rank's tile of it (m_built without a split): what the reads and the graph hold
  int64_t m_classes = 0;
  nn::Buffer m_pred_buf, m_wide;
  int32_t* m_dev_pred = nullptr;
  std::vector<int32_t> m_pred;
  std::vector<float> m_logits;
  std::vector<uint8_t> m_mask;  // one time step's classes on the model's grid, when data.pad changes it
  std::vector<float> m_prob;    // and its softmax
  std::set<std::pair<int64_t, int64_t>> m_trained_size_noted;  // model grids other than training's, noted once
  std::deque<std::unique_ptr<FileJob>> m_jobs;  // opened, not yet written, in input order (reader thread)
  HostBatch m_host[2];
  std::vector<std::pair<int64_t, PredictedFile>> m_done;  // written, with their input's index
};

}  // namespace

Predictions predict_files(const checkpoint::CheckpointModel& ck, const PredictOptions& options,
                          const mpi::Topology& topo) {
  const mpi::Communicator& world = topo.world();
  if (options.format != "h5" && options.format != "nc")
    throw CollectiveError("--format " + options.format + ": not a mask format squall writes (nc or h5)", k_exit_usage);
  config::Config cfg;
  data::PadMode trained_pad = data::PadMode::none;
  std::vector<std::string> inputs;
  TileGroups tiles;  // before the Predictor: its communicator outlives the graph
  mpi::run_agreed(world, [&] {
    cfg = checkpoint_config(ck, options.overrides);
    tiles = inference_split(cfg, options.spatial, world);
    trained_pad = checkpoint_config(ck, {}).data.pad;  // what made the grid the checkpoint records
    // A classifier's answer is one class per sample: there is no mask to write.
    if (!nn::per_pixel_model(cfg.model.name)) {
      std::string segmenters;
      for (const std::string& m : nn::model_names())
        if (nn::per_pixel_model(m)) segmenters += (segmenters.empty() ? "" : ", ") + m;
      throw UsageError((ck.folder / checkpoint::CheckpointStore::k_model_file).string() + " holds " +
                       cfg.model.name + ", a classifier (one class per sample): it cannot write masks, which need " +
                       "a class per pixel from a segmentation model (" + segmenters +
                       "); squall eval measures a classifier");
    }
    inputs = predict_inputs(options.data);
    if (world.rank() == 0) fs::create_directories(options.out);
  });
  make_tile_groups(tiles, world);
  // Group g (rank g without a split) takes files [n g / G, n (g + 1) / G); every rank of a group
  // runs the same files, each its tile of them.
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t first = n * tiles.index / tiles.count, last = n * (tiles.index + 1) / tiles.count;
  Predictions done;
  mpi::run_agreed(world,
                  [&] { done = Predictor(ck, cfg, trained_pad, options, inputs, first, last, topo, tiles).run(); });
  return done;
}

}  // namespace squall::eval
