// `squall predict`: the checkpoint's model on new files (src/eval/predict.hpp).
#include "src/config/setup.hpp"
#include "src/eval/predict.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <deque>
#include <memory>
#include <numeric>

#include "io/checkpoint/store.hpp"
#include "io/formats/dataset.hpp"
#include "io/formats/mask.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "io/pictures/png.hpp"
#include "mpi/agreement.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/eval/eval_run.hpp"
#include "src/eval/read_ahead.hpp"
#include "io/pictures/prediction_picture.hpp"

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
  const auto [lo, hi] = std::minmax_element(channel, channel + h * w);
  const float range = *hi > *lo ? *hi - *lo : 1.0f;
  for (int64_t y = 0; y < h; ++y) {
    const int64_t row = h - 1 - y;  // north at the top
    for (int64_t x = 0; x < w; ++x) {
      const auto i = row * w + x;
      const auto grey = static_cast<uint8_t>(std::clamp((channel[i] - *lo) / range, 0.0f, 1.0f) * 255.0f + 0.5f);
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

namespace {

// One input file on its way through predict: opened and read by the reader thread, its masks
// filled by the model's thread, and written by the reader once its last time step is done.
struct FileJob {
  int64_t index = 0;  // in the inputs
  std::string input;
  std::unique_ptr<formats::NetcdfSource> nc_source;
  std::unique_ptr<data::DataSource> h5_source;
  const data::DataSource* source = nullptr;
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

class Predictor {
 public:
  Predictor(const checkpoint::CheckpointModel& ck, const config::Config& cfg, const PredictOptions& options,
            const std::vector<std::string>& inputs, int64_t first, int64_t last, const mpi::Topology& topo)
      : m_ck(ck), m_cfg(cfg), m_options(options), m_inputs(inputs), m_next(first), m_last(last), m_topo(topo) {
    const data::Normalization& norm = ck.model.normalization;
    m_open.normalize = norm.kind != "none";
    m_open.fixed = norm;  // its kind, not open.normalization, says how
    m_open.labels_optional = true;
    m_open.cache_bytes = 0;
    m_netcdf = {formats::netcdf_variable_map(cfg.data.netcdf_variables), cfg.data.netcdf_labels};
    m_batch = config::eval_batch(cfg);
  }

  // Runs the files: the reader thread opens, reads and writes while the model computes the
  // batch before. Batches run across file boundaries, so files of one time step (DeepCAM's)
  // fill whole batches.
  Predictions run() {
    Predictions result;
    if (m_next >= m_last) return result;
    open_next();  // the first file, here: the model is built for its samples
    FileJob& first = *m_jobs.front();
    const data::DatasetInfo& info = first.source->info();
    const nn::ModelSpec spec = fit_checkpoint_model(m_ck, m_cfg, "--data", first.input, *first.source, m_batch);
    m_model = build_inference_model(m_ck, m_cfg, spec, info, m_batch, m_topo);
    m_weights_version = nn::new_weights_version();
    m_built = info.sample;
    m_classes = static_cast<int64_t>(info.class_names.size());
    const int64_t hw = m_built.h() * m_built.w();
    m_dev_pred = m_model.backend->allocate_labels(static_cast<size_t>(m_batch * hw), m_pred_buf);
    for (HostBatch& h : m_host) {
      h.images.assign(static_cast<size_t>(m_batch * m_built.per_sample()), 0.0f);
      h.labels.assign(static_cast<size_t>(m_batch * hw), -1);
    }
    ReadAhead next;  // the reader thread: it uses the jobs and the host batches
    const Stopwatch timer;
    fill(m_host[0]);
    std::vector<FileJob*> finished;  // predicted, not yet written
    for (int k = 0;; ++k) {
      next.wait();  // this batch's read (and the last writes); rethrows their error
      HostBatch& cur = m_host[k % 2];
      if (cur.slots.empty()) break;
      HostBatch& other = m_host[(k + 1) % 2];
      next.start([this, &other, done = std::move(finished)] {
        for (FileJob* f : done) finish(*f);
        fill(other);
      });
      finished = compute(cur);
      result.samples += static_cast<int64_t>(cur.slots.size());
    }
    for (FileJob* f : finished) finish(*f);
    // In input order (a file of no time steps was written when it was opened).
    std::stable_sort(m_done.begin(), m_done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& d : m_done) result.files.push_back(std::move(d.second));
    result.seconds = timer.seconds();
    return result;
  }

 private:
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
    const data::DatasetInfo& info = j.source->info();
    if (m_built.rank > 0) {
      if (info.sample.c() != m_built.c() || info.sample.h() != m_built.h() || info.sample.w() != m_built.w())
        throw UsageError(j.input + ": samples of " + info.sample.str() + ", but the files before it have " +
                         m_built.str());
      if (static_cast<int64_t>(info.class_names.size()) != m_classes)
        throw UsageError(j.input + ": " + std::to_string(info.class_names.size()) +
                         " classes, but the files before it have " + std::to_string(m_classes));
    }
    formats::MaskOutput& out = j.out;
    const int64_t hw = info.sample.h() * info.sample.w();
    out.times = j.source->size();
    out.h = info.sample.h();
    out.w = info.sample.w();
    out.class_names = info.class_names;
    out.mask.resize(static_cast<size_t>(out.times * hw));
    if (m_options.probabilities)
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

  // The next batch's samples, from the job being read and the files after it (reader thread).
  void fill(HostBatch& b) {
    b.slots.clear();
    const int64_t per = m_built.per_sample(), hw = m_built.h() * m_built.w();
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
      j->source->read(idx, b.images.data() + at * per, j->h5_source ? nullptr : b.labels.data() + at * hw);
      for (int64_t t = j->read; t < j->read + take; ++t) b.slots.push_back({j, t});
      j->read += take;
    }
  }

  // The model on one batch; its classes (and softmax) into the jobs' masks. Returns the jobs
  // whose last time step this was (model thread).
  std::vector<FileJob*> compute(HostBatch& b) {
    nn::Graph& g = *m_model.graph;
    nn::Backend& be = *m_model.backend;
    nn::Stream& s = *m_model.stream;
    const int64_t hw = m_built.h() * m_built.w(), classes = m_classes;
    be.copy_from_host(s, g.input().f32(), b.images.data(), b.images.size());
    nn::RunMode mode;
    mode.train = false;
    mode.weights_version = m_weights_version;  // the checkpoint's weights, loaded once
    g.forward(s, mode);
    const auto shape = g.output_shape();
    m_pred.resize(static_cast<size_t>(m_batch * hw));
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
    std::vector<double> e(static_cast<size_t>(classes));  // one pixel's exp(z - max)
    for (size_t k = 0; k < b.slots.size(); ++k) {
      FileJob& j = *b.slots[k].file;
      const int64_t t = b.slots[k].t;
      const int32_t* pred = m_pred.data() + static_cast<int64_t>(k) * hw;
      uint8_t* dst = j.out.mask.data() + t * hw;
      for (int64_t p = 0; p < hw; ++p) dst[p] = static_cast<uint8_t>(pred[p]);
      if (m_options.probabilities) {
        const float* z = m_logits.data() + static_cast<int64_t>(k) * classes * hw;
        float* prob = j.out.probabilities.data() + t * classes * hw;
        for (int64_t p = 0; p < hw; ++p) {  // softmax over the classes, in double
          double top = z[p];
          for (int64_t c = 1; c < classes; ++c) top = std::max(top, static_cast<double>(z[c * hw + p]));
          double sum = 0;
          for (int64_t c = 0; c < classes; ++c) sum += (e[static_cast<size_t>(c)] = std::exp(z[c * hw + p] - top));
          for (int64_t c = 0; c < classes; ++c) prob[c * hw + p] = static_cast<float>(e[static_cast<size_t>(c)] / sum);
        }
      }
      if (++j.done == j.out.times) finished.push_back(&j);
    }
    return finished;
  }

  // A predicted job's counts and files; the job is then let go (reader thread).
  void finish(FileJob& j) {
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
    for (uint8_t v : out.mask) ++r.pixels[std::min<size_t>(v, r.pixels.size() - 1)];
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
      std::vector<float> sample(static_cast<size_t>(m_built.per_sample()));
      std::vector<int32_t> labels(static_cast<size_t>(hw));
      for (int64_t t = 0; t < out.times; ++t) {
        const int64_t step[] = {t};
        j.source->read(step, sample.data(), j.h5_source ? nullptr : labels.data());
        const std::string name = pictures::mask_picture_name(fs::path(j.input).stem().string(), t, out.times);
        pictures::write_png((fs::path(m_options.out) / name).string(), mask_picture(sample.data(), out.mask.data() + t * hw, h, w));
      }
    }
    m_done.emplace_back(j.index, std::move(r));
    const auto it = std::find_if(m_jobs.begin(), m_jobs.end(), [&](const auto& p) { return p.get() == &j; });
    if (it != m_jobs.end()) m_jobs.erase(it);
  }

  const checkpoint::CheckpointModel& m_ck;
  const config::Config& m_cfg;
  const PredictOptions& m_options;
  const std::vector<std::string>& m_inputs;
  int64_t m_next, m_last;  // this rank's files not yet opened: [m_next, m_last)
  const mpi::Topology& m_topo;
  formats::OpenOptions m_open;
  formats::NetcdfOptions m_netcdf;
  int64_t m_batch = 0;
  InferenceModel m_model;
  uint64_t m_weights_version = 0;  // RunMode::weights_version of every forward
  nn::Shape m_built;  // the sample shape the model was built for
  int64_t m_classes = 0;
  nn::Buffer m_pred_buf, m_wide;
  int32_t* m_dev_pred = nullptr;
  std::vector<int32_t> m_pred;
  std::vector<float> m_logits;
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
  std::vector<std::string> inputs;
  mpi::run_agreed(world, [&] {
    cfg = checkpoint_config(ck, options.overrides);
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
  // Rank r takes files [n r / R, n (r + 1) / R).
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t first = n * world.rank() / world.size(), last = n * (world.rank() + 1) / world.size();
  Predictions done;
  mpi::run_agreed(world, [&] { done = Predictor(ck, cfg, options, inputs, first, last, topo).run(); });
  return done;
}

}  // namespace squall::eval
