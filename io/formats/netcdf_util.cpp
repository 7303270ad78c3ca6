// Helpers for the netCDF code (see netcdf_util.hpp).
#include "io/formats/netcdf_util.hpp"

#include "src/core/error.hpp"

namespace squall::formats {

std::unique_lock<std::recursive_mutex> nc_lock() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

void nc_check(int status, const std::string& path, const std::string& what) {
  if (status != NC_NOERR) throw Error(path + ": " + what + ": " + nc_strerror(status));
}

std::string nc_type_text(int ncid, nc_type type) {
  switch (type) {
    case NC_BYTE: return "byte";
    case NC_CHAR: return "char";
    case NC_SHORT: return "short";
    case NC_INT: return "int";
    case NC_FLOAT: return "float";
    case NC_DOUBLE: return "double";
    case NC_UBYTE: return "ubyte";
    case NC_USHORT: return "ushort";
    case NC_UINT: return "uint";
    case NC_INT64: return "int64";
    case NC_UINT64: return "uint64";
    case NC_STRING: return "string";
    default: {
      char name[NC_MAX_NAME + 1] = {0};
      if (nc_inq_type(ncid, type, name, nullptr) == NC_NOERR) return std::string("user type ") + name;
      return "type " + std::to_string(type);
    }
  }
}

std::string nc_text_att(int ncid, int varid, const char* name) {
  nc_type type;
  size_t len = 0;
  if (nc_inq_att(ncid, varid, name, &type, &len) != NC_NOERR || type != NC_CHAR) return "";
  std::string out(len, '\0');
  if (len && nc_get_att_text(ncid, varid, name, out.data()) != NC_NOERR) return "";
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

}  // namespace squall::formats
