#pragma once
// Helpers shared by the netCDF reader and mask writer (io/ internal; includes netcdf.h).
#include <netcdf.h>

#include <mutex>
#include <string>

namespace squall::formats {

// The netCDF C library is not thread-safe: every netCDF call in squall runs under this lock.
std::unique_lock<std::recursive_mutex> nc_lock();

// Throws squall::Error "PATH: WHAT: <netCDF's message>" when status is not NC_NOERR.
void nc_check(int status, const std::string& path, const std::string& what);

// "float", "short", ... for a netCDF type.
std::string nc_type_text(int ncid, nc_type type);

// A text attribute of a variable (or NC_GLOBAL); "" when absent or not text.
std::string nc_text_att(int ncid, int varid, const char* name);

}  // namespace squall::formats
