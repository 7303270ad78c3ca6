// Grids fitted to the model's stride by padding or cropping (io/input/pad_source.hpp).
#include "io/input/pad_source.hpp"

#include <algorithm>
#include <cmath>

#include "src/core/error.hpp"

namespace squall::input {
namespace {

std::string str(int64_t v) { return std::to_string(v); }
std::string size_text(int64_t h, int64_t w) { return str(h) + " x " + str(w); }

// The source's index along a side of n for the model's index i shifted by `before`: the
// edge's when outside, or the far side's when periodic.
int64_t source_index(int64_t i, int64_t before, int64_t n, bool periodic) {
  const int64_t s = i - before;
  if (periodic) return ((s % n) + n) % n;
  return std::clamp<int64_t>(s, 0, n - 1);
}

// Coordinates `c` of a side of n on the model's side of m: sliced (crop) or extended past
// each edge by the spacing next to it (pad; whole turns of 360 degrees when periodic).
std::vector<double> fit_coordinates(const std::vector<double>& c, data::PadMode mode, int64_t before, int64_t m,
                                    bool periodic) {
  const auto n = static_cast<int64_t>(c.size());
  if (n == 0) return {};
  std::vector<double> out(static_cast<size_t>(m));
  if (mode == data::PadMode::crop) {
    for (int64_t i = 0; i < m; ++i) out[static_cast<size_t>(i)] = c[static_cast<size_t>(i + before)];
    return out;
  }
  const double first_step = n > 1 ? c[1] - c[0] : 0.0, last_step = n > 1 ? c[n - 1] - c[n - 2] : 0.0;
  const double turn = n > 1 && c[n - 1] < c[0] ? -360.0 : 360.0;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t s = i - before;
    double v;
    if (s >= 0 && s < n) v = c[static_cast<size_t>(s)];
    else if (periodic) v = c[static_cast<size_t>(((s % n) + n) % n)] + turn * std::floor(static_cast<double>(s) / static_cast<double>(n));
    else if (s < 0) v = c[0] + static_cast<double>(s) * first_step;
    else v = c[static_cast<size_t>(n - 1)] + static_cast<double>(s - (n - 1)) * last_step;
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

}  // namespace

bool global_longitudes(const std::vector<double>& lon) {
  const auto n = static_cast<int64_t>(lon.size());
  if (n < 2) return false;
  const double step = std::abs(lon.back() - lon.front()) / static_cast<double>(n - 1);
  return step > 0 && std::abs(static_cast<double>(n) * step - 360.0) <= 0.5 * step;
}

GridFit plan_grid_fit(const data::DatasetInfo& info, data::PadMode mode, int64_t multiple, const std::string& what,
                      const std::string& model) {
  GridFit f;
  f.mode = mode;
  f.multiple = std::max<int64_t>(multiple, 1);
  f.in_h = f.out_h = info.sample.h();
  f.in_w = f.out_w = info.sample.w();
  const int64_t m = f.multiple;
  if (f.in_h % m == 0 && f.in_w % m == 0) {
    f.mode = data::PadMode::none;  // nothing to do: the data passes as it is
    return f;
  }
  const int64_t up_h = (f.in_h + m - 1) / m * m, up_w = (f.in_w + m - 1) / m * m;
  const int64_t down_h = f.in_h / m * m, down_w = f.in_w / m * m;
  const std::string grid = "a grid of " + size_text(f.in_h, f.in_w) + " (rows x columns)";
  if (mode == data::PadMode::none)
    throw UsageError(what + ": " + grid + " that " + model + " cannot take: it needs sides that are multiples of " +
                     str(m) + "; set data.pad = \"pad\" to pad every sample to " + size_text(up_h, up_w) +
                     " (the padded pixels carry no label) or data.pad = \"crop\" to crop it to " +
                     size_text(down_h, down_w) + ", centred");
  if (mode == data::PadMode::pad) {
    f.out_h = up_h, f.out_w = up_w;
    f.top = (up_h - f.in_h) / 2, f.left = (up_w - f.in_w) / 2;
    f.periodic = global_longitudes(info.lon) && static_cast<int64_t>(info.lon.size()) == f.in_w;
  } else {
    if (down_h == 0 || down_w == 0)
      throw UsageError(what + ": " + grid + " that " + model + " cannot take: it needs sides that are multiples of " +
                       str(m) + ", and data.pad = \"crop\" would leave nothing of a side shorter than that; set "
                       "data.pad = \"pad\" to pad every sample to " + size_text(up_h, up_w));
    f.out_h = down_h, f.out_w = down_w;
    f.top = (f.in_h - down_h) / 2, f.left = (f.in_w - down_w) / 2;
  }
  return f;
}

void fit_plane(const float* in, float* out, const GridFit& f) {
  if (f.mode == data::PadMode::crop) {
    for (int64_t y = 0; y < f.out_h; ++y)
      std::copy_n(in + (y + f.top) * f.in_w + f.left, f.out_w, out + y * f.out_w);
    return;
  }
  for (int64_t y = 0; y < f.out_h; ++y) {
    const float* row = in + source_index(y, f.top, f.in_h, false) * f.in_w;
    float* dst = out + y * f.out_w;
    for (int64_t x = 0; x < f.out_w; ++x) dst[x] = row[source_index(x, f.left, f.in_w, f.periodic)];
  }
}

void fit_labels(const int32_t* in, int32_t* out, const GridFit& f) {
  if (f.mode == data::PadMode::crop) {
    for (int64_t y = 0; y < f.out_h; ++y)
      std::copy_n(in + (y + f.top) * f.in_w + f.left, f.out_w, out + y * f.out_w);
    return;
  }
  for (int64_t y = 0; y < f.out_h; ++y) {
    const int64_t sy = y - f.top;
    int32_t* dst = out + y * f.out_w;
    for (int64_t x = 0; x < f.out_w; ++x) {
      const int64_t sx = x - f.left;
      dst[x] = sy >= 0 && sy < f.in_h && sx >= 0 && sx < f.in_w ? in[sy * f.in_w + sx] : -1;
    }
  }
}

std::vector<double> fit_lat(const std::vector<double>& lat, const GridFit& f) {
  return fit_coordinates(lat, f.mode, f.top, f.out_h, false);
}

std::vector<double> fit_lon(const std::vector<double>& lon, const GridFit& f) {
  return fit_coordinates(lon, f.mode, f.left, f.out_w, f.periodic);
}

GridFitSource::GridFitSource(std::unique_ptr<data::DataSource> owned, const data::DataSource& inner, const GridFit& fit)
    : m_owned(std::move(owned)), m_inner(inner), m_fit(fit), m_info(inner.info()) {
  const nn::Shape& s = m_info.sample;
  if (s.h() != fit.in_h || s.w() != fit.in_w)
    throw Error(m_info.description + ": samples of " + size_text(s.h(), s.w()) + " for a grid fit planned for " +
                size_text(fit.in_h, fit.in_w));
  m_info.sample = nn::Shape(1, s.c(), fit.out_h, fit.out_w);
  if (m_info.lat.size() == static_cast<size_t>(fit.in_h)) m_info.lat = fit_lat(m_info.lat, fit);
  else m_info.lat.clear();
  if (m_info.lon.size() == static_cast<size_t>(fit.in_w)) m_info.lon = fit_lon(m_info.lon, fit);
  else m_info.lon.clear();
  if (fit.changes())
    m_info.description += std::string(fit.mode == data::PadMode::pad ? ", padded" : ", cropped") + " from " +
                          size_text(fit.in_h, fit.in_w) + " to " + size_text(fit.out_h, fit.out_w) + " (data.pad)";
}

void GridFitSource::read(std::span<const int64_t> indices, float* images, int32_t* labels) const {
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t c = m_info.sample.c();
  const int64_t in_hw = m_fit.in_h * m_fit.in_w, out_hw = m_fit.out_h * m_fit.out_w;
  const bool per_pixel = m_info.per_pixel_labels;
  // Loader threads each keep their own scratch, grown once to the largest batch they read.
  thread_local std::vector<float> scratch_images;
  thread_local std::vector<int32_t> scratch_labels;
  scratch_images.resize(static_cast<size_t>(n * c * in_hw));
  int32_t* inner_labels = labels;
  if (labels != nullptr && per_pixel) {
    scratch_labels.resize(static_cast<size_t>(n * in_hw));
    inner_labels = scratch_labels.data();
  }
  m_inner.read(indices, scratch_images.data(), inner_labels);
  for (int64_t p = 0; p < n * c; ++p) fit_plane(scratch_images.data() + p * in_hw, images + p * out_hw, m_fit);
  if (labels != nullptr && per_pixel)
    for (int64_t s = 0; s < n; ++s) fit_labels(scratch_labels.data() + s * in_hw, labels + s * out_hw, m_fit);
}

void GridFitSource::read_window(std::span<const int64_t> indices, const data::Window& w, float* images,
                                int32_t* labels) const {
  data::check_window(*this, w);
  if (m_fit.mode != data::PadMode::pad) {  // crop (or nothing): the same window, shifted
    m_inner.read_window(indices, {w.row0 + m_fit.top, w.rows, w.col0 + m_fit.left, w.cols}, images, labels);
    return;
  }
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t c = m_info.sample.c(), in_h = m_fit.in_h, in_w = m_fit.in_w;
  const bool per_pixel = m_info.per_pixel_labels;
  // The source's rows under the window: those of its rows inside the grid, and the edge row
  // that padded rows repeat; contiguous.
  const int64_t r_lo = source_index(w.row0, m_fit.top, in_h, false);
  const int64_t rows = source_index(w.row0 + w.rows - 1, m_fit.top, in_h, false) - r_lo + 1;
  // The source's columns under it, as one or two runs [col0, col0 + cols).
  struct Run {
    int64_t col0, cols;
  };
  std::vector<Run> runs;
  if (!m_fit.periodic) {
    const int64_t c_lo = source_index(w.col0, m_fit.left, in_w, false);
    runs.push_back({c_lo, source_index(w.col0 + w.cols - 1, m_fit.left, in_w, false) - c_lo + 1});
  } else if (w.cols >= in_w) {
    runs.push_back({0, in_w});  // the window goes all the way round
  } else {
    const int64_t first = source_index(w.col0, m_fit.left, in_w, true);
    if (first + w.cols <= in_w) {
      runs.push_back({first, w.cols});
    } else {  // over the edge: the east end of the grid, then its west end
      runs.push_back({first, in_w - first});
      runs.push_back({0, first + w.cols - in_w});
    }
  }
  // Each run read into its own scratch (loader threads keep theirs, grown once).
  thread_local std::vector<float> run_images[2];
  thread_local std::vector<int32_t> run_labels[2];
  for (size_t r = 0; r < runs.size(); ++r) {
    const int64_t run_plane = rows * runs[r].cols;
    run_images[r].resize(static_cast<size_t>(n * c * run_plane));
    int32_t* out_labels = nullptr;
    if (labels != nullptr) {
      // Class labels (one per sample) land in place from the first run.
      run_labels[r].resize(static_cast<size_t>(per_pixel ? n * run_plane : n));
      out_labels = per_pixel || r > 0 ? run_labels[r].data() : labels;
    }
    m_inner.read_window(indices, {r_lo, rows, runs[r].col0, runs[r].cols}, run_images[r].data(), out_labels);
  }
  // Where each column of the window comes from: its run and the column within it.
  std::vector<size_t> col_run(static_cast<size_t>(w.cols));
  std::vector<int64_t> col_at(static_cast<size_t>(w.cols));
  for (int64_t x = 0; x < w.cols; ++x) {
    const int64_t s = source_index(w.col0 + x, m_fit.left, in_w, m_fit.periodic);
    const size_t r = runs.size() > 1 && s < runs[0].col0 ? 1 : 0;
    col_run[static_cast<size_t>(x)] = r;
    col_at[static_cast<size_t>(x)] = s - runs[r].col0;
  }
  const int64_t plane = w.rows * w.cols;
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t y = 0; y < w.rows; ++y) {
      const int64_t sy = source_index(w.row0 + y, m_fit.top, in_h, false) - r_lo;
      float* dst = images + p * plane + y * w.cols;
      for (int64_t x = 0; x < w.cols; ++x) {
        const size_t r = col_run[static_cast<size_t>(x)];
        dst[x] = run_images[r][static_cast<size_t>((p * rows + sy) * runs[r].cols + col_at[static_cast<size_t>(x)])];
      }
    }
  if (labels == nullptr || !per_pixel) return;
  // As fit_labels: a padded pixel (outside the source's grid, periodic or not) has no class.
  for (int64_t s = 0; s < n; ++s)
    for (int64_t y = 0; y < w.rows; ++y) {
      const int64_t gy = w.row0 + y - m_fit.top;
      int32_t* dst = labels + s * plane + y * w.cols;
      for (int64_t x = 0; x < w.cols; ++x) {
        const int64_t gx = w.col0 + x - m_fit.left;
        if (gy < 0 || gy >= in_h || gx < 0 || gx >= in_w) {
          dst[x] = -1;
          continue;
        }
        const size_t r = col_run[static_cast<size_t>(x)];
        dst[x] = run_labels[r][static_cast<size_t>((s * rows + gy - r_lo) * runs[r].cols + col_at[static_cast<size_t>(x)])];
      }
    }
}

std::unique_ptr<data::DataSource> fit_grid(std::unique_ptr<data::DataSource> inner, const GridFit& fit) {
  if (!fit.changes()) return inner;
  const data::DataSource& ref = *inner;
  return std::make_unique<GridFitSource>(std::move(inner), ref, fit);
}

std::unique_ptr<data::DataSource> fit_grid_view(const data::DataSource& inner, const GridFit& fit) {
  return std::make_unique<GridFitSource>(nullptr, inner, fit);
}

}  // namespace squall::input
