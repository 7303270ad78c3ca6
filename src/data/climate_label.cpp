// The labeler's algorithms (climate_label.hpp): TC centres and masks, AR plumes, the
// combined labels. Distances are great-circle angles on the sphere (climate_sphere.hpp);
// thresholds and their origins are documented in docs/data.md.
#include "src/data/climate_label.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numbers>

#include "src/core/error.hpp"
#include "src/data/climate_sphere.hpp"

namespace squall::data {
namespace {

constexpr double k_deg = std::numbers::pi / 180.0;

void check_fields(const ClimateFields& f) {
  if (f.h < 3 || f.w < 3)
    throw Error("climate fields of " + std::to_string(f.h) + " x " + std::to_string(f.w) +
                " pixels: the labeler needs at least 3 x 3");
  if (f.hwc.size() != static_cast<size_t>(f.h * f.w * k_climate_channels))
    throw Error("climate fields: " + std::to_string(f.hwc.size()) + " values for " + std::to_string(f.h) + " x " +
                std::to_string(f.w) + " pixels of " + std::to_string(k_climate_channels) + " channels");
}

size_t index(const ClimateFields& f, int64_t i, int64_t j) { return static_cast<size_t>(i * f.w + j); }

// Mean of `value(i, j)` over the ring at `radius` (radians) around (i0, j0); NaN if empty.
template <typename Value>
double ring_mean(const Sphere& s, int64_t i0, int64_t j0, double radius, Value&& value) {
  const double half = s.ring_half_width(i0);
  double sum = 0;
  int64_t n = 0;
  s.for_each_within(i0, j0, radius + half, [&](int64_t i, int64_t j, double d) {
    if (d < radius - half) return;
    sum += value(i, j);
    ++n;
  });
  return n > 0 ? sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
}

template <typename Value>
double ring_min(const Sphere& s, int64_t i0, int64_t j0, double radius, Value&& value) {
  const double half = s.ring_half_width(i0);
  double low = std::numeric_limits<double>::infinity();
  s.for_each_within(i0, j0, radius + half, [&](int64_t i, int64_t j, double d) {
    if (d >= radius - half) low = std::min(low, static_cast<double>(value(i, j)));
  });
  return low;
}

// Visits the 8 neighbours of (i, j), wrapping in longitude, stopping at the first and last rows.
template <typename Fn>
void for_each_neighbour(const Sphere& s, int64_t i, int64_t j, Fn&& fn) {
  for (int64_t di = -1; di <= 1; ++di) {
    const int64_t ni = i + di;
    if (ni < 0 || ni >= s.h()) continue;
    for (int64_t dj = -1; dj <= 1; ++dj)
      if (di != 0 || dj != 0) fn(ni, s.wrap(j + dj));
  }
}

}  // namespace

double row_latitude(int64_t i, int64_t h) { return -90.0 + (static_cast<double>(i) + 0.5) * 180.0 / static_cast<double>(h); }
double column_longitude(int64_t j, int64_t w) { return (static_cast<double>(j) + 0.5) * 360.0 / static_cast<double>(w); }

std::vector<float> vorticity_850(const ClimateFields& f, bool cyclonic) {
  check_fields(f);
  const Sphere s(f.h, f.w);
  const double radius_m = k_earth_radius_km * 1e3;
  std::vector<float> zeta(static_cast<size_t>(f.h * f.w), 0.0f);
  for (int64_t i = 1; i + 1 < f.h; ++i) {
    const double sign = cyclonic && s.lat(i) < 0 ? -1.0 : 1.0;
    for (int64_t j = 0; j < f.w; ++j) {
      const double dv_dlon = (f.at(i, s.wrap(j + 1), k_v850) - f.at(i, s.wrap(j - 1), k_v850)) / (2 * s.dlon());
      // Rows run south to north, so row i+1 is at the larger latitude.
      const double ducos_dlat = (f.at(i + 1, j, k_u850) * s.cos_lat(i + 1) - f.at(i - 1, j, k_u850) * s.cos_lat(i - 1)) /
                                (2 * s.dlat());
      zeta[index(f, i, j)] = static_cast<float>(sign * (dv_dlon - ducos_dlat) / (radius_m * s.cos_lat(i)));
    }
  }
  return zeta;
}

std::vector<TcCentre> find_tc_centres(const ClimateFields& f, const LabelParams& p) {
  const std::vector<float> zeta = vorticity_850(f, true);
  const Sphere s(f.h, f.w);
  const auto core_t = [&](int64_t i, int64_t j) { return 0.5 * (f.at(i, j, k_t200) + f.at(i, j, k_t500)); };
  const auto psl = [&](int64_t i, int64_t j) { return f.at(i, j, k_psl); };
  std::vector<TcCentre> centres;
  for (int64_t i = 0; i < f.h; ++i) {
    if (std::abs(row_latitude(i, f.h)) > p.tc_max_lat) continue;
    for (int64_t j = 0; j < f.w; ++j) {
      const float z = zeta[index(f, i, j)];
      if (!(z >= p.tc_vorticity)) continue;
      // The largest within the window; ties go to the first pixel in row-major order. The
      // 8 neighbours first: most pixels fail there, cheaply.
      const auto beats = [&](int64_t ni, int64_t nj) {
        const float other = zeta[index(f, ni, nj)];
        return other > z || (other == z && index(f, ni, nj) < index(f, i, j));
      };
      bool is_max = true;
      for_each_neighbour(s, i, j, [&](int64_t ni, int64_t nj) { is_max = is_max && !beats(ni, nj); });
      if (!is_max) continue;
      if (s.any_within(i, j, p.tc_vorticity_window * k_deg, beats)) continue;

      TcCentre c{i, j, z, 0, 0};
      float low = psl(i, j);
      s.for_each_within(i, j, p.tc_core_radius * k_deg, [&](int64_t ni, int64_t nj, double) {
        if (psl(ni, nj) < low) {
          low = psl(ni, nj);
          c.row = ni;
          c.col = nj;
        }
      });
      if (std::abs(row_latitude(c.row, f.h)) > p.tc_max_lat) continue;

      c.pressure_rise = ring_min(s, c.row, c.col, p.tc_pressure_radius * k_deg, psl) - low;
      if (!(c.pressure_rise >= p.tc_pressure_delta)) continue;

      double core = -std::numeric_limits<double>::infinity();
      s.for_each_within(c.row, c.col, p.tc_core_radius * k_deg,
                        [&](int64_t ni, int64_t nj, double) { core = std::max(core, core_t(ni, nj)); });
      c.warm_core = core - ring_mean(s, c.row, c.col, p.tc_warm_core_radius * k_deg, core_t);
      if (!(c.warm_core >= p.tc_warm_core_delta)) continue;

      const bool seen = std::any_of(centres.begin(), centres.end(),
                                    [&](const TcCentre& o) { return o.row == c.row && o.col == c.col; });
      if (!seen) centres.push_back(c);
    }
  }
  return centres;
}

std::vector<uint8_t> tc_mask(const ClimateFields& f, const std::vector<TcCentre>& centres, const LabelParams& p) {
  check_fields(f);
  const Sphere s(f.h, f.w);
  const double radius = p.tc_radius_km / k_earth_radius_km, eye = p.tc_eye_km / k_earth_radius_km;
  std::vector<uint8_t> mask(static_cast<size_t>(f.h * f.w), 0);
  std::vector<int64_t> stamp(mask.size(), -1);  // which centre's fill has visited a pixel
  for (size_t k = 0; k < centres.size(); ++k) {
    const TcCentre& c = centres[k];
    const double background =
        ring_mean(s, c.row, c.col, radius, [&](int64_t i, int64_t j) { return f.at(i, j, k_tmq); });
    const auto member = [&](int64_t i, int64_t j) {
      const double d = s.angle(c.row, c.col, i, j);
      if (d > radius) return false;
      if (d <= eye) return true;
      const double u = f.at(i, j, k_ubot), v = f.at(i, j, k_vbot);
      const bool moist = f.at(i, j, k_tmq) - background >= p.tc_tmq_anomaly;
      return moist && (std::sqrt(u * u + v * v) >= p.tc_wind || f.at(i, j, k_prect) >= p.tc_prect);
    };
    std::deque<std::pair<int64_t, int64_t>> todo{{c.row, c.col}};
    stamp[index(f, c.row, c.col)] = static_cast<int64_t>(k);
    while (!todo.empty()) {
      const auto [i, j] = todo.front();
      todo.pop_front();
      mask[index(f, i, j)] = 1;
      for_each_neighbour(s, i, j, [&](int64_t ni, int64_t nj) {
        int64_t& st = stamp[index(f, ni, nj)];
        if (st == static_cast<int64_t>(k) || !member(ni, nj)) return;
        st = static_cast<int64_t>(k);
        todo.emplace_back(ni, nj);
      });
    }
  }
  return mask;
}

std::vector<uint8_t> ar_mask(const ClimateFields& f, const LabelParams& p, std::vector<ArBlob>* blobs) {
  check_fields(f);
  const Sphere s(f.h, f.w);
  const size_t n = static_cast<size_t>(f.h * f.w);

  // Candidates: damped TMQ over the absolute threshold and TMQ over its row's median.
  std::vector<uint8_t> candidate(n, 0);
  std::vector<float> row(static_cast<size_t>(f.w));
  for (int64_t i = 0; i < f.h; ++i) {
    for (int64_t j = 0; j < f.w; ++j) row[static_cast<size_t>(j)] = f.at(i, j, k_tmq);
    std::nth_element(row.begin(), row.begin() + f.w / 2, row.end());
    const double median = row[static_cast<size_t>(f.w / 2)];
    const double x = row_latitude(i, f.h) / p.ar_damp_hwhm;
    const double damp = p.ar_damp_hwhm > 0 ? 1.0 - std::exp2(-x * x) : 1.0;
    for (int64_t j = 0; j < f.w; ++j) {
      const double tmq = f.at(i, j, k_tmq);
      candidate[index(f, i, j)] = damp * tmq >= p.ar_tmq && tmq - median >= p.ar_anomaly;
    }
  }

  std::vector<uint8_t> mask(n, 0);
  std::vector<int64_t> blob_of(n, -1);
  std::vector<std::pair<int64_t, int64_t>> members;
  for (int64_t i0 = 0; i0 < f.h; ++i0)
    for (int64_t j0 = 0; j0 < f.w; ++j0) {
      if (!candidate[index(f, i0, j0)] || blob_of[index(f, i0, j0)] >= 0) continue;
      const int64_t id = blobs ? static_cast<int64_t>(blobs->size()) : 0;
      members.assign(1, {i0, j0});
      blob_of[index(f, i0, j0)] = id;
      for (size_t k = 0; k < members.size(); ++k)
        for_each_neighbour(s, members[k].first, members[k].second, [&](int64_t ni, int64_t nj) {
          if (!candidate[index(f, ni, nj)] || blob_of[index(f, ni, nj)] >= 0) return;
          blob_of[index(f, ni, nj)] = id;
          members.emplace_back(ni, nj);
        });

      ArBlob b;
      b.pixels = static_cast<int64_t>(members.size());
      for (const auto& [i, j] : members) {
        b.area_km2 += s.cell_area_km2(i, k_earth_radius_km);
        b.max_abs_lat = std::max(b.max_abs_lat, std::abs(row_latitude(i, f.h)));
      }
      // Length by repeated farthest-point sweeps: at least half the true diameter, and exact
      // for the elongated shapes that matter here.
      std::pair<int64_t, int64_t> from = members[0];
      double longest = 0;
      for (int sweep = 0; sweep < 3; ++sweep) {
        std::pair<int64_t, int64_t> far = from;
        double best = -1;
        for (const auto& [i, j] : members)
          if (const double d = s.angle(from.first, from.second, i, j); d > best) {
            best = d;
            far = {i, j};
          }
        longest = std::max(longest, best);
        from = far;
      }
      b.length_km = longest * k_earth_radius_km;
      b.width_km = b.length_km > 0 ? b.area_km2 / b.length_km : std::numeric_limits<double>::infinity();
      // The reach excludes what the tropical damping leaves of the subtropical moisture belt:
      // long, narrow, but zonal bands that never leave the subtropics.
      b.kept = b.length_km >= p.ar_min_length_km && b.length_km >= p.ar_min_aspect * b.width_km &&
               b.max_abs_lat >= p.ar_min_reach_lat;
      if (b.kept)
        for (const auto& [i, j] : members) mask[index(f, i, j)] = 1;
      if (blobs) blobs->push_back(b);
    }
  return mask;
}

std::vector<int32_t> label_climate(const ClimateFields& f, const LabelParams& p) {
  const std::vector<uint8_t> ar = ar_mask(f, p);
  const std::vector<uint8_t> tc = tc_mask(f, find_tc_centres(f, p), p);
  std::vector<int32_t> labels(ar.size(), k_background);
  for (size_t k = 0; k < labels.size(); ++k)
    labels[k] = tc[k] ? k_tropical_cyclone : ar[k] ? k_atmospheric_river : k_background;
  return labels;
}

}  // namespace squall::data
