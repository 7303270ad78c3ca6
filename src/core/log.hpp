#pragma once
// Rank-aware logging. info() prints on rank 0 only (the job's voice); warn() and
// rank_line() print on any rank, prefixed with the rank so that merged output stays
// readable. Each message is written with one call so lines from ranks do not mix.
#include <string_view>

namespace squall::log {

void info(std::string_view msg);       // rank 0 (or a job of one rank), stdout
void warn(std::string_view msg);       // any rank, stderr, "squall: warning: rank R: ..."
void error(std::string_view msg);      // any rank, stderr, "squall: error: ..." (rank named when > 0 ranks)

}  // namespace squall::log
