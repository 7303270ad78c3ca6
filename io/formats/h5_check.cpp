#include "io/formats/h5_check.hpp"

#include <hdf5.h>

#include <string>

#include "src/core/error.hpp"

namespace squall::formats {
namespace {

herr_t take_top_message(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err != nullptr && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

}  // namespace

void h5_check_failed(const char* call, const char* file, int line) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, take_top_message, &detail);
  fatal(std::string(call) + " failed" + (detail.empty() ? "" : ": " + detail), file, line);
}

}  // namespace squall::formats
