#pragma once
// Text a user can paste back into a shell: a path with spaces or quotes in a
// message, a launch command in the event log.
#include <string>
#include <vector>

namespace trainer {

// One word, quoted only when the shell would split or expand it.
std::string shell_quote(const std::string& word);
// The words joined by spaces, each quoted as needed.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace trainer
