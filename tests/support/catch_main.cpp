// Catch2's main for single-process test binaries, compiled once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
