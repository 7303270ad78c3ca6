#pragma once
// "Did you mean ...?" for a name that is not one of the known ones: a config section, key or
// value, a subcommand. One rule for all of them, so that every near miss is answered alike.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace squall {

// Edits (insert, delete, substitute, swap two neighbours) that turn a into b, ignoring case:
// "trian" is one edit from "train", "SGD" none from "sgd".
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `wrong`, or "" when none is near (at most two edits). A suggestion
// that is far off confuses more than it helps; ties go to the earlier candidate.
std::string nearest(std::string_view wrong, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" for the nearest candidate, or "" when none is near.
std::string did_you_mean(std::string_view wrong, const std::vector<std::string>& candidates);

// "a | b | c" (or with another separator): how messages list the names to choose from.
std::string join_names(const std::vector<std::string>& names, std::string_view separator = " | ");

}  // namespace squall
