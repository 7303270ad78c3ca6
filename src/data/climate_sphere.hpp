#pragma once
// Geometry of squall's global latitude-longitude grid (cell centres, row 0 southernmost,
// longitude wrapping; see climate_label.hpp): great-circle distances between pixels, cell
// areas and a walk over the pixels within a radius. Internal to the climate labeler.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace squall::data {

class Sphere {
 public:
  Sphere(int64_t h, int64_t w) : m_h(h), m_w(w) {
    m_dlat = std::numbers::pi / static_cast<double>(h);
    m_dlon = 2 * std::numbers::pi / static_cast<double>(w);
    for (int64_t i = 0; i < h; ++i) {
      const double lat = -std::numbers::pi / 2 + (static_cast<double>(i) + 0.5) * m_dlat;
      m_lat.push_back(lat);
      m_cos.push_back(std::cos(lat));
    }
    for (int64_t dj = 0; dj < w; ++dj) {
      const double s = std::sin(0.5 * m_dlon * static_cast<double>(dj));
      m_sin2_half_dlon.push_back(s * s);
    }
  }

  int64_t h() const { return m_h; }
  int64_t w() const { return m_w; }
  double dlat() const { return m_dlat; }  // radians between rows
  double dlon() const { return m_dlon; }  // radians between columns
  double lat(int64_t i) const { return m_lat[static_cast<size_t>(i)]; }  // radians
  double cos_lat(int64_t i) const { return m_cos[static_cast<size_t>(i)]; }
  int64_t wrap(int64_t j) const { return ((j % m_w) + m_w) % m_w; }

  // Central angle (radians) between pixels (i1, j1) and (i2, j2), by the haversine formula.
  double angle(int64_t i1, int64_t j1, int64_t i2, int64_t j2) const {
    const double s_lat = std::sin(0.5 * (m_lat[static_cast<size_t>(i1)] - m_lat[static_cast<size_t>(i2)]));
    const double a = s_lat * s_lat + m_cos[static_cast<size_t>(i1)] * m_cos[static_cast<size_t>(i2)] *
                                         m_sin2_half_dlon[static_cast<size_t>(wrap(j1 - j2))];
    return 2 * std::asin(std::sqrt(std::min(1.0, a)));
  }

  // Area of a cell of row i in km^2 (exact for a latitude band slice).
  double cell_area_km2(int64_t i, double radius_km) const {
    const double top = m_lat[static_cast<size_t>(i)] + 0.5 * m_dlat, bottom = top - m_dlat;
    return radius_km * radius_km * m_dlon * (std::sin(top) - std::sin(bottom));
  }

  // Half-width (radians) of the ring "at radius r" around row i: wide enough to hold pixels
  // all the way round whatever the row and column spacing there.
  double ring_half_width(int64_t i) const {
    return 0.75 * std::max(m_dlat, m_dlon * m_cos[static_cast<size_t>(i)]);
  }

  // Calls fn(i, j, angle) for every pixel within `radius` (radians) of (i0, j0), itself included.
  template <typename Fn>
  void for_each_within(int64_t i0, int64_t j0, double radius, Fn&& fn) const {
    walk(i0, j0, radius, [](int64_t, int64_t) { return true; }, [&](int64_t i, int64_t j, double d) {
      fn(i, j, d);
      return false;
    });
  }

  // Whether some pixel within `radius` of (i0, j0) has pred(i, j) true; the cheap `pred`
  // is asked before the distance is computed, and the walk stops at the first hit.
  template <typename Pred>
  bool any_within(int64_t i0, int64_t j0, double radius, Pred&& pred) const {
    return walk(i0, j0, radius, pred, [](int64_t, int64_t, double) { return true; });
  }

 private:
  // The walk behind both: for pixels with pred(i, j) inside the radius, stops when hit(i, j, d).
  template <typename Pred, typename Hit>
  bool walk(int64_t i0, int64_t j0, double radius, Pred&& pred, Hit&& hit) const {
    const auto row_span = static_cast<int64_t>(std::ceil(radius / m_dlat)) + 1;
    const int64_t i_lo = std::max<int64_t>(0, i0 - row_span), i_hi = std::min(m_h - 1, i0 + row_span);
    const double cos_min = std::min(m_cos[static_cast<size_t>(i_lo)], m_cos[static_cast<size_t>(i_hi)]);
    const double x = cos_min > 0 ? std::sin(std::min(radius, std::numbers::pi / 2)) / cos_min : 2.0;
    int64_t col_span = m_w;  // the whole row near a pole or for large radii
    if (radius < std::numbers::pi / 2 && x < 1.0)
      col_span = static_cast<int64_t>(std::ceil(std::asin(x) / m_dlon)) + 1;
    const bool all = 2 * col_span + 1 >= m_w;
    for (int64_t i = i_lo; i <= i_hi; ++i) {
      const int64_t j_lo = all ? 0 : j0 - col_span, j_hi = all ? m_w - 1 : j0 + col_span;
      for (int64_t jj = j_lo; jj <= j_hi; ++jj) {
        const int64_t j = wrap(jj);
        if (!pred(i, j)) continue;
        const double d = angle(i0, j0, i, j);
        if (d <= radius && hit(i, j, d)) return true;
      }
    }
    return false;
  }

  int64_t m_h, m_w;
  double m_dlat = 0, m_dlon = 0;
  std::vector<double> m_lat, m_cos, m_sin2_half_dlon;
};

}  // namespace squall::data
