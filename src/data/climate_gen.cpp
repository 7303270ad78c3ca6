// generate_climate_sample: CAM5-like fields built from a latitude-dependent background, a
// seasonal shift, smooth random weather (a few low-wavenumber modes for temperature and
// moisture, and geostrophic eddies whose winds and pressure come from one streamfunction),
// orography fixed per seed, atmospheric rivers and tropical cyclones. Every random number
// of sample i comes from one generator seeded with (seed, i); the orography from (seed).
#include "src/data/climate_gen.hpp"
#include "src/core/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "src/core/error.hpp"

namespace squall::data {
namespace {

constexpr double k_pi = std::numbers::pi;
constexpr double k_earth_km = 6371.0;
constexpr double k_km_per_deg = k_pi * k_earth_km / 180.0;
constexpr double k_omega = 7.292e-5;  // Earth's rotation, 1/s
constexpr double k_g = 9.80665;
constexpr double k_rd = 287.05;       // gas constant of dry air, J/(kg K)
constexpr double k_rho = 1.2;         // near-surface air density, kg/m^3

double rad(double deg) { return deg * k_pi / 180.0; }
double sq(double v) { return v * v; }
double gauss(double r, double s) { return std::exp(-0.5 * sq(r / s)); }
double wrap180(double dlon) { return dlon - 360.0 * std::floor((dlon + 180.0) / 360.0); }

// splitmix64: small, fast, and the same on every platform (the std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : m_state(seed) {}
  uint64_t next() { return splitmix64_next(m_state); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int integer(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  double sign() { return (next() & 1) ? 1.0 : -1.0; }

 private:
  uint64_t m_state;
};

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x2545f4914f6cdd1dULL ^ (b + 0x632be59bd9b4e019ULL));
  r.next();
  return r.next();
}

// Offset of (lat, lon) from (lat0, lon0) in km on the local tangent plane: east, north.
void offset_km(double lat0, double lon0, double lat, double lon, double& dx, double& dy) {
  dy = (lat - lat0) * k_km_per_deg;
  dx = wrap180(lon - lon0) * k_km_per_deg * std::cos(rad(0.5 * (lat + lat0)));
}

// A smooth anomaly: the sum of a few low-wavenumber sinusoids on the sphere.
struct Mode {
  int m = 1;              // zonal wavenumber
  double n = 1;           // meridional wavenumber (per 180 degrees)
  double phase_lon = 0, phase_lat = 0, amplitude = 0;
};

std::vector<Mode> random_modes(Rng& rng, int count, double amplitude) {
  std::vector<Mode> modes(static_cast<size_t>(count));
  for (Mode& m : modes) {
    m.m = rng.integer(1, 6);
    m.n = rng.integer(1, 4);
    m.phase_lon = rng.uniform(0, 2 * k_pi);
    m.phase_lat = rng.uniform(0, 2 * k_pi);
    m.amplitude = amplitude * rng.uniform(0.4, 1.0);
  }
  return modes;
}

double eval_modes(const std::vector<Mode>& modes, double lat, double lon) {
  double v = 0;
  for (const Mode& m : modes)
    v += m.amplitude * std::cos(m.m * rad(lon) + m.phase_lon) * std::sin(m.n * rad(lat + 90.0) + m.phase_lat);
  return v;
}

// A geostrophic eddy: streamfunction psi = a exp(-r^2 / 2 s^2); winds u = -dpsi/dy,
// v = dpsi/dx and pressure anomaly rho f psi (a high turns clockwise in the north).
struct Eddy {
  double lat, lon, sigma_km, psi;  // psi in m^2/s
};

struct Mountain {
  double lat, lon, radius_km, height_m;
};

// Orography, the same for every sample of a seed: a few compact bumps.
std::vector<Mountain> mountains_of(uint64_t seed) {
  Rng rng(mix(seed, 0xffffffffffffffffULL));
  std::vector<Mountain> out(5);
  for (Mountain& m : out)
    m = {rng.uniform(-55, 65), rng.uniform(0, 360), rng.uniform(700, 2000), rng.uniform(400, 3000)};
  return out;
}

double orography(const std::vector<Mountain>& mountains, double lat, double lon) {
  double z = 0;
  for (const Mountain& m : mountains) {
    const double r = great_circle_km(lat, lon, m.lat, m.lon);
    if (r < m.radius_km) z += m.height_m * sq(1.0 - sq(r / m.radius_km));
  }
  return z;
}

// Bezier point of a river at t in [0, 1].
std::pair<double, double> river_point(const PlacedRiver& r, double t) {
  const double a = sq(1 - t), b = 2 * t * (1 - t), c = t * t;
  return {a * r.lat0 + b * r.latm + c * r.lat1, a * r.lon0 + b * r.lonm + c * r.lon1};
}

PlacedRiver random_river(Rng& rng, double cell_km) {
  const double h = rng.sign();
  PlacedRiver r;
  const double start = rng.uniform(18, 28), reach = rng.uniform(25, 35);
  r.lat0 = h * start;
  r.lat1 = h * (start + reach);
  r.lon0 = rng.uniform(0, 360);
  r.lon1 = r.lon0 + rng.uniform(15, 40);  // rivers run poleward and eastward
  r.latm = 0.5 * (r.lat0 + r.lat1) + rng.uniform(-4, 4);
  r.lonm = 0.5 * (r.lon0 + r.lon1) + rng.uniform(-8, 8);
  r.half_width_km = std::max(rng.uniform(150, 250), 0.6 * cell_km);
  r.tmq_add = rng.uniform(22, 32);
  const auto axis = river_axis(r, 25.0);
  for (size_t i = 1; i < axis.size(); ++i)
    r.length_km += great_circle_km(axis[i - 1].first, axis[i - 1].second, axis[i].first, axis[i].second);
  return r;
}

// The fields before rivers and cyclones are added, at one grid point.
struct Point {
  double lat, lon;
  double ts_sl, t500, t200, q, psl, u, v, zs;
};

}  // namespace

const std::vector<std::string>& climate_channel_names() {
  static const std::vector<std::string> names = {"TMQ",  "U850", "V850", "UBOT",   "VBOT",  "QREFHT", "PS",    "PSL",
                                                 "T200", "T500", "PRECT", "TS",    "TREFHT", "Z1000", "Z200", "ZBOT"};
  return names;
}

double grid_lat(int64_t height, int64_t y) { return -90.0 + (static_cast<double>(y) + 0.5) * 180.0 / height; }
double grid_lon(int64_t width, int64_t x) { return (static_cast<double>(x) + 0.5) * 360.0 / width; }

double great_circle_km(double lat0, double lon0, double lat1, double lon1) {
  const double a = sq(std::sin(rad(lat1 - lat0) / 2)) +
                   std::cos(rad(lat0)) * std::cos(rad(lat1)) * sq(std::sin(rad(lon1 - lon0) / 2));
  return 2 * k_earth_km * std::asin(std::min(1.0, std::sqrt(a)));
}

std::vector<std::pair<double, double>> river_axis(const PlacedRiver& river, double step_km) {
  // The chord bounds the curve from below; 2x the points keeps the spacing near step_km.
  const double chord = great_circle_km(river.lat0, river.lon0, river.lat1, river.lon1);
  const int n = std::max(2, static_cast<int>(2 * chord / std::max(1.0, step_km)) + 1);
  std::vector<std::pair<double, double>> out;
  for (int i = 0; i < n; ++i) out.push_back(river_point(river, static_cast<double>(i) / (n - 1)));
  return out;
}

ClimateSample generate_climate_sample(int64_t height, int64_t width, uint64_t seed, int64_t index) {
  if (height < k_climate_min_height || width < k_climate_min_width)
    throw Error("climate grid " + std::to_string(height) + "x" + std::to_string(width) + " is below the minimum " +
                std::to_string(k_climate_min_height) + "x" + std::to_string(k_climate_min_width));
  Rng rng(mix(seed, static_cast<uint64_t>(index)));
  const std::vector<Mountain> mountains = mountains_of(seed);
  const double dlat_km = 180.0 / height * k_km_per_deg;
  const double dlon_km = 360.0 / width * k_km_per_deg * std::cos(rad(20.0));
  const double cell_km = std::max(dlat_km, dlon_km);

  // Weather of this sample.
  const double season = rng.uniform(-8, 8);  // degrees the thermal equator is shifted north
  const std::vector<Mode> temp_modes = random_modes(rng, 4, 1.5);   // K
  const std::vector<Mode> moist_modes = random_modes(rng, 4, 0.12); // relative
  ClimateSample s;
  s.height = height;
  s.width = width;
  s.hwc.assign(static_cast<size_t>(height * width * k_climate_channels), 0.0f);

  // Rivers first, then cyclones away from rivers, mountains and each other.
  const int n_rivers = rng.integer(1, 3), n_cyclones = rng.integer(1, 4);
  for (int i = 0; i < n_rivers; ++i) s.rivers.push_back(random_river(rng, cell_km));
  // Cyclone scales, km: at least about a grid cell, so that coarse grids still show them.
  const double p_scale = std::max(250.0, 0.9 * cell_km);
  const double wind_scale = std::max(60.0, 0.9 * cell_km);
  const double core_scale = std::max(300.0, cell_km);
  for (int attempt = 0; attempt < 200 && static_cast<int>(s.cyclones.size()) < n_cyclones; ++attempt) {
    PlacedCyclone c;
    const double lat = rng.sign() * rng.uniform(8, 30), lon = rng.uniform(0, 360);
    c.row = std::clamp<int64_t>(static_cast<int64_t>(std::floor((lat + 90.0) / 180.0 * height)), 0, height - 1);
    c.col = static_cast<int64_t>(std::llround(lon / 360.0 * width)) % width;
    c.lat = grid_lat(height, c.row);
    c.lon = grid_lon(width, c.col);
    c.radius_km = p_scale;
    c.wind_radius_km = wind_scale;
    c.core_radius_km = core_scale;
    c.depth_pa = rng.uniform(2000, 7000);
    c.max_wind = rng.uniform(25, 60);
    c.warm_core_k = rng.uniform(4, 10);
    bool ok = std::abs(c.lat) >= 6 && std::abs(c.lat) <= 32;
    for (const PlacedCyclone& o : s.cyclones)
      ok = ok && great_circle_km(c.lat, c.lon, o.lat, o.lon) >= std::max(2500.0, 7 * p_scale);
    for (const Mountain& m : mountains)
      ok = ok && great_circle_km(c.lat, c.lon, m.lat, m.lon) >= m.radius_km + 3 * p_scale;
    for (const PlacedRiver& r : s.rivers)
      for (const auto& [alat, alon] : river_axis(r, 100.0))
        ok = ok && great_circle_km(c.lat, c.lon, alat, alon) >= std::max(1200.0, 4 * r.half_width_km + 3 * p_scale);
    if (ok) s.cyclones.push_back(c);
  }

  // Eddies last, kept off the cyclones so that a cyclone's centre stays its own minimum.
  std::vector<Eddy> eddies;
  for (int attempt = 0; attempt < 200 && eddies.size() < 24; ++attempt) {
    Eddy e;
    e.lat = rng.sign() * rng.uniform(25, 75);
    e.lon = rng.uniform(0, 360);
    e.sigma_km = std::max(rng.uniform(500, 1200), 1.5 * cell_km);
    // psi such that the strongest wind (at r = sigma) is 5..15 m/s.
    e.psi = rng.sign() * rng.uniform(5, 15) * e.sigma_km * 1e3 / std::exp(-0.5);
    bool ok = true;
    for (const PlacedCyclone& c : s.cyclones)
      ok = ok && great_circle_km(c.lat, c.lon, e.lat, e.lon) >= 3 * e.sigma_km + 2 * p_scale;
    if (ok) eddies.push_back(e);
  }
  std::vector<std::vector<std::pair<double, double>>> axes;
  for (const PlacedRiver& r : s.rivers) axes.push_back(river_axis(r, std::min(50.0, 0.5 * r.half_width_km)));

  for (int64_t y = 0; y < height; ++y) {
    const double lat = grid_lat(height, y);
    const double le = lat - season;  // latitude relative to the thermal equator
    const double cl = sq(std::cos(rad(le))), sl = sq(std::sin(rad(le)));
    const double f = 2 * k_omega * std::sin(rad(lat));
    for (int64_t x = 0; x < width; ++x) {
      const double lon = grid_lon(width, x);
      const double tw = eval_modes(temp_modes, lat, lon);
      const double qw = eval_modes(moist_modes, lat, lon);
      Point p{lat, lon, 0, 0, 0, 0, 0, 0, 0, 0};
      p.zs = orography(mountains, lat, lon);
      p.ts_sl = 250.0 + 52.0 * cl + tw;
      p.t500 = 236.0 + 32.0 * cl + 0.8 * tw;
      p.t200 = 217.0 + 4.0 * sl + 0.3 * tw;
      p.q = qw;
      const double ale = std::abs(le);
      p.psl = 101300.0 - 400.0 * gauss(le, 8) + 900.0 * gauss(ale - 32, 8) - 1500.0 * gauss(ale - 62, 8) +
              500.0 * gauss(ale - 88, 6);
      p.u = -6.0 * gauss(le, 10) + 14.0 * gauss(ale - 45, 10) - 4.0 * gauss(ale - 75, 6);
      p.v = std::abs(lat) < 30 ? -3.0 * std::sin(rad(lat * 6.0)) : 0.0;  // Hadley inflow
      for (const Eddy& e : eddies) {
        double dx = 0, dy = 0;
        offset_km(e.lat, e.lon, lat, lon, dx, dy);
        if (std::abs(dy) > 4 * e.sigma_km || std::abs(dx) > 4 * e.sigma_km) continue;
        const double g = e.psi * gauss(std::hypot(dx, dy), e.sigma_km);
        p.u += g * dy / sq(e.sigma_km) * 1e-3;  // -dpsi/dy; km -> m
        p.v += -g * dx / sq(e.sigma_km) * 1e-3;
        p.psl += k_rho * f * g;
      }

      double tmq_add = 0, q_add = 0, prect_add = 0, u_add = 0, v_add = 0, ubot_add = 0, vbot_add = 0;
      double core = 0;
      for (size_t ri = 0; ri < s.rivers.size(); ++ri) {
        const PlacedRiver& r = s.rivers[ri];
        const double lo = std::min({r.lat0, r.latm, r.lat1}), hi = std::max({r.lat0, r.latm, r.lat1});
        const double margin = 4 * r.half_width_km / k_km_per_deg;
        if (lat < lo - margin || lat > hi + margin) continue;
        const double w0 = std::min({r.lon0, r.lonm, r.lon1}), w1 = std::max({r.lon0, r.lonm, r.lon1});
        const double lon_margin = margin / std::max(0.05, std::cos(rad(std::max(std::abs(lo), std::abs(hi)) + margin)));
        if (std::abs(wrap180(lon - 0.5 * (w0 + w1))) > 0.5 * (w1 - w0) + lon_margin) continue;
        const auto& axis = axes[ri];
        double best = 1e30;
        size_t k_best = 0;
        for (size_t k = 0; k < axis.size(); ++k) {
          double dx = 0, dy = 0;
          offset_km(axis[k].first, axis[k].second, lat, lon, dx, dy);
          if (const double d = dx * dx + dy * dy; d < best) best = d, k_best = k;
        }
        const double t = static_cast<double>(k_best) / static_cast<double>(axis.size() - 1);
        const double taper = std::min({1.0, t / 0.12, (1 - t) / 0.12});
        const double w = taper * gauss(std::sqrt(best), r.half_width_km);
        if (w < 1e-4) continue;
        const size_t k0 = k_best == 0 ? 0 : k_best - 1, k1 = std::min(axis.size() - 1, k_best + 1);
        double ex = 0, ey = 0;
        offset_km(axis[k0].first, axis[k0].second, axis[k1].first, axis[k1].second, ex, ey);
        const double norm = std::max(1e-9, std::hypot(ex, ey));
        tmq_add += r.tmq_add * w;
        q_add += 0.004 * w;
        prect_add += 2.5e-7 * w * (0.3 + t);  // rain where the river meets the mid-latitudes
        u_add += 14.0 * w * ex / norm;
        v_add += 14.0 * w * ey / norm;
        ubot_add += 8.0 * w * ex / norm;
        vbot_add += 8.0 * w * ey / norm;
      }
      for (const PlacedCyclone& c : s.cyclones) {
        double dx = 0, dy = 0;
        offset_km(c.lat, c.lon, lat, lon, dx, dy);
        const double r = std::hypot(dx, dy);
        if (r > 12 * std::max(c.radius_km, c.core_radius_km)) continue;
        const double hemi = c.lat >= 0 ? 1.0 : -1.0;  // counter-clockwise in the north
        const double vt = c.max_wind * (r / c.wind_radius_km) * std::exp(1.0 - r / c.wind_radius_km);
        const double ct = r > 0 ? vt / r : 0.0;
        u_add += -hemi * ct * dy;
        v_add += hemi * ct * dx;
        ubot_add += -0.8 * hemi * ct * dy;
        vbot_add += 0.8 * hemi * ct * dx;
        p.psl -= c.depth_pa * gauss(r, c.radius_km);
        core += c.warm_core_k * gauss(r, c.core_radius_km);
        const double wet = gauss(r, 1.5 * c.radius_km);
        tmq_add += 20.0 * wet;
        q_add += 0.004 * wet;
        prect_add += c.depth_pa * 1.5e-9 * gauss(r, c.radius_km);  // 11..38 mm/hour at the centre
      }

      float* out = s.hwc.data() + (y * width + x) * k_climate_channels;
      const double ts = p.ts_sl - 0.0065 * p.zs;
      const double trefht = ts - 1.2;
      const double t200 = p.t200 + core, t500 = p.t500 + 0.6 * core;
      const double ps = p.psl * std::exp(-k_g * p.zs / (k_rd * (ts + 0.00325 * p.zs)));
      const double column = ps / p.psl;  // less air, less water above mountains
      const double tmq_bg = std::clamp(55.0 * std::exp(0.065 * (p.ts_sl - 300.0)) * (1.0 + 1.5 * p.q), 0.5, 65.0);
      const double tmq = tmq_bg * column + tmq_add;
      const double qref = std::max(2e-5, 0.0185 * std::exp(0.065 * (trefht - 300.0)) * (1.0 + 1.5 * p.q)) + q_add;
      const double low = std::max(0.0, 101300.0 - p.psl) / 1000.0;
      const double prect = 3e-8 * sq(tmq / 40.0) * std::max(0.0, 1.0 + 4.0 * p.q) + 8e-8 * gauss(le, 6) +
                           4e-8 * std::min(low, 3.0) + prect_add;
      const double z1000 = k_rd * p.ts_sl / k_g * std::log(p.psl / 100000.0);
      const double tm = 0.25 * p.ts_sl + 0.5 * t500 + 0.25 * t200;
      out[k_tmq] = static_cast<float>(tmq);
      out[k_u850] = static_cast<float>(p.u + u_add);
      out[k_v850] = static_cast<float>(p.v + v_add);
      out[k_ubot] = static_cast<float>(0.6 * p.u + ubot_add);
      out[k_vbot] = static_cast<float>(0.6 * p.v + vbot_add);
      out[k_qrefht] = static_cast<float>(qref);
      out[k_ps] = static_cast<float>(ps);
      out[k_psl] = static_cast<float>(p.psl);
      out[k_t200] = static_cast<float>(t200);
      out[k_t500] = static_cast<float>(t500);
      out[k_prect] = static_cast<float>(prect);
      out[k_ts] = static_cast<float>(ts);
      out[k_trefht] = static_cast<float>(trefht);
      out[k_z1000] = static_cast<float>(z1000);
      out[k_z200] = static_cast<float>(z1000 + k_rd / k_g * tm * std::log(5.0));
      out[k_zbot] = static_cast<float>(62.0 * trefht / 288.0);
    }
  }
  return s;
}

}  // namespace squall::data
