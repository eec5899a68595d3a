// "Did you mean …?" for misspelled keys, names and flags (ninja-style).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hetsim {

// Case-insensitive Levenshtein distance.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible misspelling (distance at most
// max(2, |word|/3)), or empty.
std::string NearestName(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" — ready to append to an error message.
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

// `s` with ASCII letters lower-cased (names compared without case).
std::string AsciiLower(std::string s);

// A name that is safe as one path component: letters, digits, '-', '_' and '.', not empty, "." or "..".
bool IsPlainName(std::string_view name);

}  // namespace hetsim
