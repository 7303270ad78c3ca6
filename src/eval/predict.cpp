// `squall predict`: the checkpoint's model on new files (src/eval/predict.hpp).
#include "src/config/setup.hpp"
#include "src/eval/predict.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "io/formats/dataset.hpp"
#include "io/formats/mask.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "io/pictures/png.hpp"
#include "mpi/agreement.hpp"
#include "src/core/error.hpp"
#include "src/eval/eval_run.hpp"
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
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && is_data_file(e.path())) files.push_back(e.path().string());
      if (files.empty())
        throw UsageError("--data " + p + ": a folder with no data files (*.nc, or *.h5 other than stats.h5)");
      std::sort(files.begin(), files.end());
      out.insert(out.end(), files.begin(), files.end());
    } else if (fs::exists(p, ec)) {
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

std::vector<PredictedFile> predict_files(const checkpoint::CheckpointModel& ck, const PredictOptions& options,
                                         const mpi::Topology& topo) {
  const mpi::Communicator& world = topo.world();
  if (options.format != "h5" && options.format != "nc")
    throw CollectiveError("--format " + options.format + ": not a mask format squall writes (nc or h5)", k_exit_usage);
  config::Config cfg;
  std::vector<std::string> inputs;
  mpi::run_agreed(world, [&] {
    cfg = checkpoint_config(ck, options.overrides);
    inputs = predict_inputs(options.data);
    if (world.rank() == 0) fs::create_directories(options.out);
  });
  // The inputs normalised as training normalised its samples: with the statistics the
  // checkpoint holds (the training set's).
  const data::Normalization& norm = ck.model.normalization;
  formats::OpenOptions open;
  open.normalize = norm.kind != "none";
  open.fixed = norm;  // its kind, not open.normalization, says how
  open.labels_optional = true;
  open.cache_bytes = 0;
  const formats::NetcdfOptions netcdf{formats::netcdf_variable_map(cfg.data.netcdf_variables), cfg.data.netcdf_labels};
  // Rank r takes files [n r / R, n (r + 1) / R).
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t first = n * world.rank() / world.size(), last = n * (world.rank() + 1) / world.size();
  const int64_t batch = config::eval_batch(cfg);

  std::vector<PredictedFile> done;
  InferenceModel m;
  nn::Buffer pred_buf;
  int32_t* dev_pred = nullptr;
  nn::Shape built;  // the sample shape the model was built for
  mpi::run_agreed(world, [&] {
    for (int64_t f = first; f < last; ++f) {
      const std::string& input = inputs[static_cast<size_t>(f)];
      const bool nc = is_netcdf(input);
      std::unique_ptr<formats::NetcdfSource> nc_source;
      std::unique_ptr<data::DataSource> h5_source;
      if (nc) {
        nc_source = formats::open_netcdf_files({input}, "", open, netcdf);
      } else {
        h5_source = formats::open_deepcam_files({input}, "", open);
      }
      const data::DataSource* source = nc ? static_cast<const data::DataSource*>(nc_source.get()) : h5_source.get();
      const data::DatasetInfo& info = source->info();
      if (!m.graph) {
        const nn::ModelSpec spec = fit_checkpoint_model(ck, cfg, "--data", input, *source, batch);
        m = build_inference_model(ck, cfg, spec, info, batch, topo);
        built = info.sample;
        const int64_t hw = info.sample.h() * info.sample.w();
        dev_pred = m.backend->allocate_labels(static_cast<size_t>(batch * hw), pred_buf);
      } else if (info.sample.c() != built.c() || info.sample.h() != built.h() || info.sample.w() != built.w()) {
        throw UsageError(input + ": samples of " + info.sample.str() + ", but the files before it have " + built.str());
      }
      nn::Graph& g = *m.graph;
      nn::Backend& be = *m.backend;
      nn::Stream& s = *m.stream;
      const int64_t h = info.sample.h(), w = info.sample.w(), hw = h * w, per = info.sample.per_sample();
      const int64_t classes = static_cast<int64_t>(info.class_names.size());
      formats::MaskOutput out;
      out.times = source->size();
      out.h = h;
      out.w = w;
      out.class_names = info.class_names;
      out.mask.resize(static_cast<size_t>(out.times * hw));
      if (options.probabilities) out.probabilities.resize(static_cast<size_t>(out.times * classes * hw));
      formats::NetcdfGrid input_grid;  // for a DeepCAM input: lat, lon, time, south first
      if (nc) {
        for (int64_t t = 0; t < out.times; ++t) {
          const formats::NetcdfGrid grid = nc_source->sample_grid(t);
          if (t == 0) {
            out.lat = grid.lat;
            out.lon = grid.lon;
            out.time_units = grid.time_units;
            out.calendar = grid.calendar;
            input_grid = grid;
          }
          out.time.insert(out.time.end(), grid.time.begin(), grid.time.end());
        }
        if (static_cast<int64_t>(out.time.size()) != out.times) out.time.clear();
      } else {
        formats::read_deepcam_grid(input, out.lat, out.lon);
      }
      out.attributes = {{"model", ck.state.model},
                        {"checkpoint", ck.folder.string()},
                        {"step", std::to_string(ck.state.step)},
                        {"input", input},
                        {"normalisation", norm.kind + " (" + norm.source + ")"}};
      std::vector<float> images(static_cast<size_t>(batch * per)), logits;
      std::vector<int32_t> labels(static_cast<size_t>(batch * hw)), pred(static_cast<size_t>(batch * hw));
      std::vector<float> first_channel;
      std::vector<double> e(static_cast<size_t>(classes));  // one pixel's exp(z - max)
      nn::Buffer wide;
      nn::RunMode mode;
      mode.train = false;
      std::vector<int64_t> idx;
      for (int64_t start = 0; start < out.times; start += batch) {
        const int64_t valid = std::min(batch, out.times - start);
        idx.resize(static_cast<size_t>(batch));
        for (int64_t i = 0; i < batch; ++i) idx[static_cast<size_t>(i)] = start + std::min(i, valid - 1);
        source->read(idx, images.data(), labels.data());
        if (start == 0) first_channel.assign(images.begin(), images.begin() + hw);
        be.copy_from_host(s, g.input().f32(), images.data(), images.size());
        g.forward(s, mode);
        const auto shape = g.output_shape();
        be.argmax_channels(s, g.dtype(), g.output().data, dev_pred, shape.n(), shape.c(), shape.h() * shape.w());
        be.copy_labels_to_host(s, pred.data(), dev_pred, pred.size());
        if (options.probabilities) {
          const auto count = static_cast<size_t>(shape.n() * shape.c() * shape.h() * shape.w());
          logits.resize(count);
          if (g.dtype() == nn::DType::f32) {
            be.copy_to_host(s, logits.data(), g.output().f32(), count);
          } else {
            if (!wide) wide = be.allocate(count);
            be.convert(s, g.output().data, g.dtype(), wide.data(), nn::DType::f32, count);
            be.copy_to_host(s, logits.data(), wide.data(), count);
          }
        }
        be.synchronize(s);
        for (int64_t k = 0; k < valid; ++k) {
          uint8_t* dst = out.mask.data() + (start + k) * hw;
          for (int64_t p = 0; p < hw; ++p) dst[p] = static_cast<uint8_t>(pred[static_cast<size_t>(k * hw + p)]);
          if (!options.probabilities) continue;
          const float* z = logits.data() + k * classes * hw;
          float* prob = out.probabilities.data() + (start + k) * classes * hw;
          for (int64_t p = 0; p < hw; ++p) {  // softmax over the classes, in double
            double top = z[p];
            for (int64_t c = 1; c < classes; ++c) top = std::max(top, static_cast<double>(z[c * hw + p]));
            double sum = 0;
            for (int64_t c = 0; c < classes; ++c) sum += (e[static_cast<size_t>(c)] = std::exp(z[c * hw + p] - top));
            for (int64_t c = 0; c < classes; ++c) prob[c * hw + p] = static_cast<float>(e[static_cast<size_t>(c)] / sum);
          }
        }
      }
      PredictedFile r;
      r.input = input;
      r.samples = out.times;
      r.class_names = out.class_names;
      r.output = (fs::path(options.out) / (fs::path(input).stem().string() + "-mask." + options.format)).string();
      r.pixels.assign(static_cast<size_t>(classes), 0);
      r.regions.assign(static_cast<size_t>(classes), 0);
      for (uint8_t v : out.mask) ++r.pixels[std::min<size_t>(v, r.pixels.size() - 1)];
      for (int64_t t = 0; t < out.times; ++t)
        for (int64_t c = 1; c < classes; ++c)
          r.regions[static_cast<size_t>(c)] += count_regions(out.mask.data() + t * hw, h, w, static_cast<uint8_t>(c));
      if (options.format == "h5") {
        formats::write_mask_h5(r.output, out);
      } else {
        if (out.lat.empty() || out.lon.empty())
          throw UsageError(input + ": no latitudes and longitudes (/climate/lat, /climate/lon): a netCDF mask needs "
                                   "its grid; write --format h5");
        if (out.time.empty())  // DeepCAM files carry no time: the time steps are numbered
          for (int64_t t = 0; t < out.times; ++t) out.time.push_back(static_cast<double>(t));
        formats::MaskAttributes attrs;
        attrs.source = "squall " + ck.state.model;
        attrs.checkpoint = ck.folder.string() + " (step " + std::to_string(ck.state.step) + ")";
        attrs.history = "squall predict on " + input;
        // The input's dimension names and latitude order, so that the mask overlays it.
        const formats::MaskGrid grid{out.lat, out.lon, out.time, out.time_units, out.calendar,
                                     input_grid.lat_dim, input_grid.lon_dim, input_grid.time_dim,
                                     input_grid.lat_descending};
        formats::write_netcdf_masks(r.output, grid, out.mask, out.probabilities, out.class_names, attrs);
      }
      if (options.png)
        pictures::write_png((fs::path(options.out) / (fs::path(input).stem().string() + "-mask.png")).string(),
                      mask_picture(first_channel.data(), out.mask.data(), h, w));
      done.push_back(std::move(r));
    }
  });
  return done;
}

}  // namespace squall::eval
