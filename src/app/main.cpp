// squall: one binary, subcommands in src/app/cmd_*.cpp. `mpirun -np N squall ...` is the
// normal launch; a plain `squall ...` is a job of one rank.
#include "mpi/runtime.hpp"
#include "src/app/cli.hpp"

int main(int argc, char** argv) {
  squall::mpi::Runtime mpi(argc, argv);
  return squall::app::run(argc, argv, mpi);
}
