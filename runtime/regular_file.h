#pragma once
// Inputs are regular files: opening a FIFO blocks until a writer comes (and
// a process waiting there ignores the SIGTERM it has a handler for), and a
// device or socket is no recipe, shard or model. Checked with stat(), which
// does not block, before anything opens the path.
#include <string>

namespace trainer {

// "" for a regular file (or a path that does not exist: the open that
// follows says so), else what it is ("is a FIFO, not a regular file").
std::string not_regular_file(const std::string& path);

// True for a FIFO: an output there would block its open until a reader comes.
// (A device such as /dev/null is a fine place to write.)
bool is_fifo(const std::string& path);

}  // namespace trainer
