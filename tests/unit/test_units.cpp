// UDUNITS-2 behind io/formats/units.hpp: the conversions the netCDF reader makes of ERA5's and
// CMIP's variables, and the ones it refuses.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "io/formats/units.hpp"
#include "src/core/error.hpp"

namespace formats = squall::formats;

TEST_CASE("units: hPa to Pa is a factor of exactly 100", "[io][units]") {
  const formats::UnitConversion c = formats::unit_conversion("hPa", "Pa");
  CHECK_FALSE(c.identity());
  CHECK(c.apply(1.0) == 100.0);
  CHECK(c.apply(1013.25) == 101325.0);
  CHECK(c.formula() == "100*x");
  // Floats: computed in double and rounded once, so 850 hPa is 85000 Pa exactly.
  std::vector<float> v = {850.0f, 1000.0f, std::numeric_limits<float>::quiet_NaN()};
  c.apply(v.data(), v.size());
  CHECK(v[0] == 85000.0f);
  CHECK(v[1] == 100000.0f);
  CHECK(std::isnan(v[2]));  // a fill value stays missing
  CHECK(formats::unit_conversion("millibars", "Pa").apply(1.0) == 100.0);
}

TEST_CASE("units: degC to K is an offset, g/kg to kg/kg and mm/s to m/s a factor", "[io][units]") {
  const formats::UnitConversion c = formats::unit_conversion("degC", "K");
  CHECK(c.apply(0.0) == Approx(273.15).epsilon(1e-15));
  CHECK(c.apply(-273.15) == Approx(0.0).margin(1e-12));
  CHECK(c.apply(26.85) == Approx(300.0).epsilon(1e-15));
  CHECK(formats::unit_conversion("g/kg", "kg kg-1").apply(12.0) == Approx(0.012).epsilon(1e-15));
  CHECK(formats::unit_conversion("g kg-1", "1").apply(5.0) == Approx(0.005).epsilon(1e-15));
  CHECK(formats::unit_conversion("mm/s", "m s-1").apply(2.0) == Approx(0.002).epsilon(1e-15));
  CHECK(formats::unit_conversion("km", "m").apply(1.5) == 1500.0);
}

TEST_CASE("units: one unit written differently is the same, with no conversion", "[io][units]") {
  CHECK(formats::same_units("m s-1", "m/s"));
  CHECK(formats::same_units("m s**-1", "m s-1"));
  CHECK(formats::same_units("kg m**-2", "kg m-2"));
  CHECK(formats::same_units("kg kg-1", "1"));
  CHECK_FALSE(formats::same_units("hPa", "Pa"));
  CHECK(formats::unit_conversion("m s-1", "m/s").identity());
  CHECK(formats::unit_conversion("kg m**-2", "kg m-2").identity());
  // Text UDUNITS-2 cannot parse is the same as itself (and nothing else).
  CHECK(formats::same_units("m of water equivalent", "m of water equivalent"));
  CHECK(formats::unit_conversion("(0 - 1)", "(0 - 1)").identity());
  CHECK(formats::units_known("hPa"));
  CHECK_FALSE(formats::units_known(""));
  CHECK_FALSE(formats::units_known("gpm"));
}

TEST_CASE("units: different quantities and unknown names are refused, naming both units", "[io][units]") {
  CHECK_FALSE(formats::units_convertible("K", "Pa"));
  CHECK_THROWS_AS(formats::unit_conversion("K", "Pa"), squall::Error);
  CHECK_THROWS_WITH(formats::unit_conversion("K", "Pa"),
                    Catch::Contains("'K'") && Catch::Contains("'Pa'") && Catch::Contains("different quantities"));
  // A mass flux is not a rate of depth without the density of water.
  CHECK_THROWS_WITH(formats::unit_conversion("kg m-2 s-1", "m s-1"), Catch::Contains("'kg m-2 s-1'"));
  CHECK_THROWS_WITH(formats::unit_conversion("m of water equivalent", "m"),
                    Catch::Contains("cannot parse 'm of water equivalent'") && Catch::Contains("'m'"));
  // "mb" is the millibarn (an area) to UDUNITS-2, not the millibar.
  CHECK_FALSE(formats::units_convertible("mb", "Pa"));
}

TEST_CASE("units: conversions made on several threads at once agree", "[io][units]") {
  std::vector<double> got(8, 0.0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&got, i] {
      for (int k = 0; k < 50; ++k) got[i] = formats::unit_conversion(i % 2 ? "hPa" : "degC", i % 2 ? "Pa" : "K").apply(1.0);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(i % 2 ? 100.0 : 274.15).epsilon(1e-15));
}
