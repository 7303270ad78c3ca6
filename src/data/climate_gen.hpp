#pragma once
// Synthetic CAM5-like climate fields in DeepCAM's layout (`squall data climate`, docs/data.md):
// 16 channels on a global latitude-longitude grid, in physical units, with a background that
// varies with latitude, smooth random weather, tropical cyclones and atmospheric rivers.
// Pure computation (no files, no MPI): sample i of seed s is a function of (s, i, grid) only,
// so any rank can generate any sample and the result never depends on how they are split.
#include <cstdint>
#include <string>
#include <vector>

#include "src/data/climate_channels.hpp"

namespace squall::data {

// "TMQ", "U850", ... in ClimateChannel's order.
const std::vector<std::string>& climate_channel_names();

// The grid: row y has its centre at latitude -90 + (y + 0.5) * 180 / height (row 0 is the
// southernmost), column x at longitude x * 360 / width (degrees east, from 0).
double grid_lat(int64_t height, int64_t y);
double grid_lon(int64_t width, int64_t x);
// Great-circle distance in km between two points given in degrees.
double great_circle_km(double lat0, double lon0, double lat1, double lon1);

// A tropical cyclone as placed by the generator (its centre sits on a grid point).
struct PlacedCyclone {
  int64_t row = 0, col = 0;      // grid point of the centre
  double lat = 0, lon = 0;       // degrees
  double radius_km = 0;          // Gaussian scale of the pressure deficit (and of the rain)
  double wind_radius_km = 0;     // radius of the strongest wind
  double core_radius_km = 0;     // Gaussian scale of the warm core
  double depth_pa = 0;           // central pressure deficit
  double max_wind = 0;           // m/s at 850 hPa
  double warm_core_k = 0;        // T200 anomaly at the centre (T500 gets 60% of it)
};

// An atmospheric river: a filament of water vapour along a curve from (lat0, lon0) in the
// subtropics through (latm, lonm) to (lat1, lon1) in mid-latitudes (a quadratic Bezier).
struct PlacedRiver {
  double lat0 = 0, lon0 = 0, latm = 0, lonm = 0, lat1 = 0, lon1 = 0;  // degrees (lon unwrapped)
  double half_width_km = 0;  // e-folding half width across the axis
  double tmq_add = 0;        // kg/m^2 added on the axis (tapered at the ends)
  double length_km = 0;      // along the axis
};

struct ClimateSample {
  int64_t height = 0, width = 0;
  std::vector<float> hwc;  // [height, width, 16], channels last as in /climate/data
  std::vector<PlacedCyclone> cyclones;
  std::vector<PlacedRiver> rivers;
  float at(int64_t y, int64_t x, int c) const {
    return hwc[static_cast<size_t>((y * width + x) * k_climate_channels + c)];
  }
};

// Smallest grid the generator accepts (a cyclone needs a few rows of tropics).
constexpr int64_t k_climate_min_height = 16, k_climate_min_width = 16;

// Sample `index` of the data set of `seed` on a height x width grid. Throws squall::Error for
// a grid below the minimum.
ClimateSample generate_climate_sample(int64_t height, int64_t width, uint64_t seed, int64_t index);

// Points of a river's axis, every ~step_km, as (lat, lon) pairs in degrees.
std::vector<std::pair<double, double>> river_axis(const PlacedRiver& river, double step_km);

}  // namespace squall::data
