#pragma once
// TECA-style heuristic labels for DeepCAM-layout climate fields (docs/data.md, "squall data
// label"): tropical cyclones from 850 hPa vorticity maxima with a sea-level-pressure minimum
// and a warm core, atmospheric rivers from long, narrow plumes of integrated water vapour.
// Pure computation on one sample in memory; no files, no command line.
//
// Grid convention (docs/formats.md): a global latitude-longitude grid of H rows and W
// columns at cell centres; row 0 is the southernmost (latitude -90 + 90/H), the last row the
// northernmost (CAM5's ascending latitude); column 0 is at longitude 180/W, columns increase
// eastward and wrap around.
#include <cstdint>
#include <span>
#include <vector>

#include "src/data/climate_channels.hpp"

namespace squall::data {

enum ClimateLabel : int32_t { k_background = 0, k_tropical_cyclone = 1, k_atmospheric_river = 2 };

constexpr double k_earth_radius_km = 6371.0;

// One sample, channels last: value (row i, column j, channel c) = hwc[(i * w + j) * 16 + c].
struct ClimateFields {
  int64_t h = 0, w = 0;
  std::span<const float> hwc;  // h * w * 16 values
  float at(int64_t i, int64_t j, int c) const {
    return hwc[static_cast<size_t>((i * w + j) * k_climate_channels + c)];
  }
};

// Thresholds; defaults from TECA where it has the quantity (docs/data.md names each).
struct LabelParams {
  // Tropical cyclone centres (TECA's TC candidate stage).
  double tc_vorticity = 1.6e-4;      // 1/s, cyclonic 850 hPa relative vorticity at the maximum
  double tc_vorticity_window = 7.74446;  // deg, the maximum is the largest within this radius
  double tc_core_radius = 2.0;       // deg, the PSL minimum lies this close to the maximum
  double tc_pressure_delta = 400.0;  // Pa, PSL rises by this much ...
  double tc_pressure_radius = 5.0;   // deg, ... everywhere on the ring at this radius
  double tc_warm_core_delta = 0.8;   // K, (T200+T500)/2 at the core above its ring mean ...
  double tc_warm_core_radius = 5.0;  // deg, ... on the ring at this radius
  double tc_max_lat = 40.0;          // deg, centres only at |latitude| <= this
  // Tropical cyclone masks around each centre.
  double tc_radius_km = 500.0;       // no pixel farther from the centre
  double tc_eye_km = 100.0;          // every pixel this close belongs (calm, dry-ish eye)
  double tc_tmq_anomaly = 5.0;       // kg/m^2 above the TMQ mean on the ring at tc_radius_km
  double tc_wind = 17.0;             // m/s near-surface wind speed (UBOT, VBOT) ...
  double tc_prect = 1.4e-6;          // m/s precipitation (5 mm/h) ... either suffices
  // Atmospheric rivers.
  double ar_tmq = 20.0;              // kg/m^2, damped TMQ at or above this
  double ar_anomaly = 5.0;           // kg/m^2 above the median TMQ of the pixel's row
  double ar_damp_hwhm = 10.0;        // deg, tropical damping 1 - 2^-(lat/hwhm)^2
  double ar_min_length_km = 2000.0;  // great-circle length of a blob
  double ar_min_aspect = 2.0;        // length / width, width = area / length
  double ar_min_reach_lat = 30.0;    // deg: some pixel at |latitude| >= this (it reaches poleward)
};

// Latitude of row i and longitude of column j, in degrees, at cell centres.
double row_latitude(int64_t i, int64_t h);
double column_longitude(int64_t j, int64_t w);

// 850 hPa relative vorticity (1/s) from U850, V850 by centred differences on the sphere,
// zeta = (dv/dlambda - d(u cos phi)/dphi) / (R cos phi); longitude wraps, the first and
// last rows are 0. Multiplied by sign(latitude) when `cyclonic` (cyclones positive in both
// hemispheres).
std::vector<float> vorticity_850(const ClimateFields& f, bool cyclonic);

struct TcCentre {
  int64_t row = 0, col = 0;  // the PSL minimum
  double vorticity = 0;      // cyclonic vorticity at the maximum that found it (1/s)
  double pressure_rise = 0;  // Pa, lowest PSL on the ring minus the centre's
  double warm_core = 0;      // K, core temperature minus its ring mean
};

std::vector<TcCentre> find_tc_centres(const ClimateFields& f, const LabelParams& p);

// 1 where a pixel belongs to the storm of one of `centres`, else 0 (h * w values).
std::vector<uint8_t> tc_mask(const ClimateFields& f, const std::vector<TcCentre>& centres, const LabelParams& p);

// One connected plume of moist air (8-connected, wrapping in longitude).
struct ArBlob {
  int64_t pixels = 0;
  double area_km2 = 0;
  double length_km = 0;  // great-circle distance between its two farthest-apart pixels (double sweep)
  double width_km = 0;   // area / length
  double max_abs_lat = 0;  // degrees: how far poleward it reaches
  bool kept = false;     // long and narrow enough, and reaching poleward
};

// 1 where a pixel belongs to a kept blob, else 0; `blobs` (optional) receives every blob.
std::vector<uint8_t> ar_mask(const ClimateFields& f, const LabelParams& p, std::vector<ArBlob>* blobs = nullptr);

// The label of every pixel (h * w, row-major): 0 background, 1 tropical cyclone,
// 2 atmospheric river; a pixel in both is a tropical cyclone.
std::vector<int32_t> label_climate(const ClimateFields& f, const LabelParams& p);

}  // namespace squall::data
