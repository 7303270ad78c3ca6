#pragma once
// SQUALL_H5_CHECK(call): HDF5 calls return a negative value on failure. This names the
// call, file, line, rank and host and takes the job down. It is for calls that must not
// fail; reading a user's file validates with explicit checks that throw squall::Error
// naming the file and dataset instead.
#include <cstdint>

namespace squall::formats {
[[noreturn]] void h5_check_failed(const char* call, const char* file, int line);
}

#define SQUALL_H5_CHECK(call)                                                        \
  do {                                                                               \
    if (static_cast<int64_t>(call) < 0)                                              \
      ::squall::formats::h5_check_failed(#call, __FILE__, __LINE__);                      \
  } while (0)
