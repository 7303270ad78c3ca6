#pragma once
#include <string>

namespace squall::cpu {

std::string dnn_library();   // "oneDNN 2.6.3 (cpu runtime: OMP)"
int hardware_threads();      // cores this process may run on (its affinity mask)

}  // namespace squall::cpu
