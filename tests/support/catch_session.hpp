#pragma once
// Catch2's session behind three calls, so that each test binary's main (catch_main.cpp,
// mpi_main.cpp, gpu/gpu_main.cpp) is a small file and Catch2's implementation, the slowest file
// of the suite to compile, is compiled once for all of them (catch_session.cpp).
#include <string>

namespace squall::test {

// Reads Catch2's command line; 0, or the status to exit with (a bad option, or --help).
int catch_parse(int argc, char** argv);

// Reports with Catch2's reporter `name` ("compact") instead of the one on the command line.
void catch_use_reporter(const std::string& name);

// Runs the cases the command line chose: the number of failed assertions, capped as Catch caps it.
int catch_run();

// Whether the command line asks for a listing (of tests, their names, tags or reporters) or
// the help rather than a run: CTest's discovery reads the names from stdout, which must hold
// nothing else.
bool catch_lists();

}  // namespace squall::test
