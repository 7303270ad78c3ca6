#pragma once
// Grids that the model's stride does not divide (data.pad; docs/training.md, "Grids the
// model's stride does not divide"). A U-Net of depth d halves the grid d times and a
// DeepLabv3+ encoder reaches output stride 8 or 16, so each needs sides that are multiples of
// that number; ERA5's 721 latitudes, or 181 at one degree, are none. GridFitSource wraps any
// DataSource and hands out its samples padded to the next multiple or cropped to the previous
// one, centred, with the grid's coordinates to match; training, `squall eval`, `export` and
// `predict` open their data through it, and predict maps the model's masks back onto the
// input's own grid with unfit_plane.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/data_source.hpp"
#include "src/data/pad_mode.hpp"

namespace squall::input {

// How one grid becomes the model's: the rows and columns as read (in_*) and as the model
// sees them (out_*). pad: `top` rows and `left` columns are added before the source's first
// (south, west) and the rest after; crop: `top` rows and `left` columns are removed before the
// first kept one and the rest after. Nothing changes when out equals in.
struct GridFit {
  data::PadMode mode = data::PadMode::none;
  int64_t multiple = 1;
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t top = 0, left = 0;
  // pad: the longitudes go all the way round (global_longitudes), so columns are padded with
  // those from the other side of the grid; otherwise, and for rows always, the edge repeats.
  bool periodic = false;
  bool changes() const { return out_h != in_h || out_w != in_w; }
};

// Whether the longitudes `lon` (degrees, evenly spaced) cover the whole circle: their count
// times their mean spacing is 360 degrees, within half a spacing. False for fewer than 2.
bool global_longitudes(const std::vector<double>& lon);

// The fit of `info`'s grid to sides that are multiples of `multiple` under `mode` (nothing
// changes for a grid that already fits, or a multiple of 1). Under none, a grid that does not
// fit throws UsageError naming `what` (the data: "data.train = PATH"), the grid, `model` (the
// model and its requirement, "unet of depth 4"), the multiple, the padded and cropped sizes
// and data.pad; so does crop on a side shorter than one multiple.
GridFit plan_grid_fit(const data::DatasetInfo& info, data::PadMode mode, int64_t multiple, const std::string& what,
                      const std::string& model);

// One plane (a channel of a sample) from the source's grid [in_h, in_w] to the model's
// [out_h, out_w]: padded (the edge row; the edge column, or the far side's when periodic) or
// cropped. Labels are padded with -1, which the loss and the metrics ignore.
void fit_plane(const float* in, float* out, const GridFit& fit);
void fit_labels(const int32_t* in, int32_t* out, const GridFit& fit);

// One plane back from the model's grid to the source's: under pad the padding is cut off;
// under crop the rows and columns that were cropped away get `fill`.
template <typename T>
void unfit_plane(const T* model, T* out, const GridFit& fit, T fill) {
  for (int64_t y = 0; y < fit.in_h; ++y)
    for (int64_t x = 0; x < fit.in_w; ++x) {
      int64_t my = y, mx = x;
      if (fit.mode == data::PadMode::pad) my += fit.top, mx += fit.left;
      else if (fit.mode == data::PadMode::crop) my -= fit.top, mx -= fit.left;
      const bool inside = my >= 0 && my < fit.out_h && mx >= 0 && mx < fit.out_w;
      out[y * fit.in_w + x] = inside ? model[my * fit.out_w + mx] : fill;
    }
}

// The coordinates of the model's rows and columns: the source's, cropped, or extended past
// its edges by the spacing next to each edge (longitudes of a periodic pad by whole turns of
// 360 degrees). Empty for empty coordinates.
std::vector<double> fit_lat(const std::vector<double>& lat, const GridFit& fit);
std::vector<double> fit_lon(const std::vector<double>& lon, const GridFit& fit);

// The source's samples on the model's grid. info() is the source's with the sample's height
// and width, lat and lon and the description changed; everything else (size, normalisation,
// files) is the source's. read() reads the source's samples and fits each plane; thread-safe
// as the source is.
class GridFitSource final : public data::DataSource {
 public:
  GridFitSource(std::unique_ptr<data::DataSource> owned, const data::DataSource& inner, const GridFit& fit);
  const data::DatasetInfo& info() const override { return m_info; }
  int64_t size() const override { return m_inner.size(); }
  const data::Normalization& normalization() const override { return m_inner.normalization(); }
  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override;
  // A window of the model's grid, read as the source's window(s) under it and fitted as read()
  // fits whole samples (the same values, and -1 labels on padded pixels): one window of the
  // source, or two where a periodic pad's window runs over the grid's east or west edge (the
  // columns there come from the far side). A source that reads windows cheaply stays cheap.
  void read_window(std::span<const int64_t> indices, const data::Window& w, float* images,
                   int32_t* labels) const override;
  std::vector<std::string> files() const override { return m_inner.files(); }
  std::vector<int64_t> file_offsets() const override { return m_inner.file_offsets(); }
  const GridFit& fit() const { return m_fit; }

 private:
  std::unique_ptr<data::DataSource> m_owned;  // null when the caller keeps the source
  const data::DataSource& m_inner;
  GridFit m_fit;
  data::DatasetInfo m_info;
};

// `inner` on the model's grid: `inner` itself when the fit changes nothing, else a
// GridFitSource that owns it.
std::unique_ptr<data::DataSource> fit_grid(std::unique_ptr<data::DataSource> inner, const GridFit& fit);
// The same over a source the caller keeps (alive as long as the result), always wrapped.
std::unique_ptr<data::DataSource> fit_grid_view(const data::DataSource& inner, const GridFit& fit);

}  // namespace squall::input
