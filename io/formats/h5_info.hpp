#pragma once
#include <string>

namespace squall::formats {

std::string hdf5_version();   // "1.10.8", of the library linked at run time
bool hdf5_parallel();         // built against a parallel (MPI-IO) HDF5

}  // namespace squall::formats
