#pragma once
// DeepCAM's 16 climate channels, the last axis of /climate/data, in its order: one list for the
// generator (climate_gen.hpp), the labeler (climate_label.hpp) and whoever reads their fields.
namespace squall::data {

enum ClimateChannel : int {
  k_tmq = 0,     // total precipitable water, kg/m^2
  k_u850 = 1,    // zonal wind at 850 hPa, m/s (positive eastward)
  k_v850 = 2,    // meridional wind at 850 hPa, m/s (positive northward)
  k_ubot = 3,    // zonal wind at the lowest model level, m/s
  k_vbot = 4,    // meridional wind at the lowest model level, m/s
  k_qrefht = 5,  // specific humidity at 2 m, kg/kg
  k_ps = 6,      // surface pressure, Pa
  k_psl = 7,     // sea-level pressure, Pa
  k_t200 = 8,    // temperature at 200 hPa, K
  k_t500 = 9,    // temperature at 500 hPa, K
  k_prect = 10,  // precipitation rate, m/s (liquid water equivalent, as CAM5 writes it)
  k_ts = 11,     // surface temperature, K
  k_trefht = 12, // temperature at 2 m, K
  k_z1000 = 13,  // geopotential height of 1000 hPa, m
  k_z200 = 14,   // geopotential height of 200 hPa, m
  k_zbot = 15,   // height of the lowest model level, m
  k_climate_channels = 16
};

}  // namespace squall::data
