// UDUNITS-2 behind a small interface (see units.hpp).
#include "io/formats/units.hpp"

#include <udunits2.h>

#include <mutex>

#include "src/core/error.hpp"

namespace squall::formats {
namespace {

std::mutex& units_mutex() {
  static std::mutex m;
  return m;
}

std::string unit_text_trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\n\r") - a + 1);
}

// The system database, read on first use (units_mutex held). Kept for the life of the
// process: the converters handed out do not refer to it, but units parsed later do.
ut_system* unit_system() {
  static ut_system* system = [] {
    // UDUNITS-2 prints its parse and database warnings to stderr by default; squall says what
    // went wrong in its own errors instead.
    ut_set_error_message_handler(ut_ignore);
    return ut_read_xml(nullptr);
  }();
  if (system == nullptr)
    throw Error("UDUNITS-2 cannot read its units database (install libudunits2-data, or point the UDUNITS2_XML_PATH "
                "environment variable at its udunits2.xml)");
  return system;
}

struct UnitFree {
  void operator()(ut_unit* u) const { ut_free(u); }
};
using Unit = std::unique_ptr<ut_unit, UnitFree>;

// `text` parsed (units_mutex held); null when UDUNITS-2 cannot. CF says the attribute is
// UDUNITS text: UTF-8 first (ASCII is part of it), then Latin-1 for older files' degree sign.
Unit parse(const std::string& text) {
  const std::string t = unit_text_trimmed(text);
  if (t.empty()) return nullptr;
  ut_system* system = unit_system();
  ut_unit* u = ut_parse(system, t.c_str(), UT_UTF8);
  if (u == nullptr) u = ut_parse(system, t.c_str(), UT_LATIN1);
  return Unit(u);
}

}  // namespace

double UnitConversion::apply(double value) const {
  if (!m_converter) return value;
  return cv_convert_double(static_cast<const cv_converter*>(m_converter.get()), value);
}

void UnitConversion::apply(float* values, size_t n) const {
  if (!m_converter || n == 0) return;
  cv_convert_floats(static_cast<const cv_converter*>(m_converter.get()), values, n, values);
}

bool units_known(const std::string& text) {
  std::lock_guard lock(units_mutex());
  return parse(text) != nullptr;
}

bool same_units(const std::string& a, const std::string& b) {
  if (unit_text_trimmed(a) == unit_text_trimmed(b)) return true;
  std::lock_guard lock(units_mutex());
  const Unit ua = parse(a), ub = parse(b);
  return ua && ub && ut_compare(ua.get(), ub.get()) == 0;
}

bool units_convertible(const std::string& from, const std::string& to) {
  if (unit_text_trimmed(from) == unit_text_trimmed(to) && !unit_text_trimmed(from).empty()) return true;
  std::lock_guard lock(units_mutex());
  const Unit a = parse(from), b = parse(to);
  return a && b && ut_are_convertible(a.get(), b.get()) != 0;
}

UnitConversion unit_conversion(const std::string& from, const std::string& to) {
  UnitConversion out;
  out.m_from = from;
  out.m_to = to;
  if (unit_text_trimmed(from) == unit_text_trimmed(to)) return out;
  std::lock_guard lock(units_mutex());
  const Unit a = parse(from), b = parse(to);
  for (const auto& [unit, text] : {std::pair{a.get(), &from}, {b.get(), &to}})
    if (unit == nullptr)
      throw Error("units '" + from + "' cannot be converted to '" + to + "': UDUNITS-2 cannot parse '" + *text + "'" +
                  (ut_get_status() == UT_UNKNOWN ? " (an unknown unit name)" : ""));
  if (ut_compare(a.get(), b.get()) == 0) return out;
  if (!ut_are_convertible(a.get(), b.get()))
    throw Error("units '" + from + "' cannot be converted to '" + to + "': they measure different quantities");
  cv_converter* cv = ut_get_converter(a.get(), b.get());
  if (cv == nullptr)
    throw Error("units '" + from + "' cannot be converted to '" + to + "': UDUNITS-2 made no converter");
  out.m_converter = std::shared_ptr<void>(cv, [](void* p) { cv_free(static_cast<cv_converter*>(p)); });
  char formula[128] = {0};
  if (cv_get_expression(cv, formula, sizeof formula, "x") > 0) out.m_formula = formula;
  return out;
}

}  // namespace squall::formats
