#pragma once
// Physical units of netCDF variables, as UDUNITS-2 understands them (the library CF names for
// its `units` attribute): whether two unit strings name the same unit ("m s-1" and "m/s"),
// and the conversion of values from one to another (hPa to Pa, degC to K, g/kg to kg/kg).
// The system's unit database is read once, on first use; UDUNITS-2's own messages to stderr
// are silenced (every failure here is a squall::Error instead).
//
// Thread-safe: UDUNITS-2's parser is not, so every call into it runs under one lock here; a
// UnitConversion, once made, is applied without it (a converter is read-only).
//
// Header free of udunits2.h: the netCDF reader and the tests include it.
#include <cstddef>
#include <memory>
#include <string>

namespace squall::formats {

// The conversion of values from one unit to another. Default: none (the identity).
class UnitConversion {
 public:
  UnitConversion() = default;
  bool identity() const { return m_converter == nullptr; }
  double apply(double value) const;
  // In place. NaN stays NaN. Computed in double, rounded once to float.
  void apply(float* values, size_t n) const;
  const std::string& from() const { return m_from; }
  const std::string& to() const { return m_to; }
  // The formula in terms of x, as UDUNITS-2 writes it ("100*x", "x + 273.15"); "x" for none.
  const std::string& formula() const { return m_formula; }

 private:
  friend UnitConversion unit_conversion(const std::string& from, const std::string& to);
  std::shared_ptr<void> m_converter;  // a cv_converter*, freed with cv_free
  std::string m_from, m_to, m_formula = "x";
};

// Whether UDUNITS-2 parses `text` as a unit (surrounding blanks ignored; "" is not a unit).
bool units_known(const std::string& text);

// Whether `a` and `b` are one unit however written ("m s-1", "m/s", "m.s-1"). Equal text counts
// as the same even when UDUNITS-2 cannot parse it.
bool same_units(const std::string& a, const std::string& b);

// Whether values in `from` can be converted to `to` (both parse, and are the same quantity).
bool units_convertible(const std::string& from, const std::string& to);

// The conversion from `from` to `to`: the identity when they are the same unit (same_units).
// Throws squall::Error naming both when either does not parse or they are not convertible
// ("units 'K' cannot be converted to 'Pa': ..."); callers add the file and the variable.
UnitConversion unit_conversion(const std::string& from, const std::string& to);

}  // namespace squall::formats
