#include "io/formats/h5_info.hpp"

#include <hdf5.h>

#include "io/formats/h5_check.hpp"

namespace squall::formats {

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  SQUALL_H5_CHECK(H5get_libversion(&major, &minor, &release));
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

bool hdf5_parallel() {
#ifdef H5_HAVE_PARALLEL
  return true;
#else
  return false;
#endif
}

}  // namespace squall::formats
