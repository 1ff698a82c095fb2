#pragma once
// Replacing a small file so that readers see the old contents or the new,
// never half: write a temporary file, rename it over the path. Checkpoints
// (the manifest, `latest`) want it durable too; a heartbeat rewritten every
// step or a watchdog's dump do not pay for fsync.
#include <string>

namespace trainer {

// fsync a file or directory; false (errno set) on failure.
bool fsync_path(const std::string& path, bool directory);

// Returns "" on success, else what failed: "cannot write PATH (through
// PATH.tmp): REASON" (or replace, fsync), a sentence a warning can print.
std::string replace_file(const std::string& path, const std::string& text, bool durable);

// When path was last replaced (seconds since the epoch; 0: it does not
// exist): how readers tell a heartbeat's or a dump's age.
double mtime_seconds(const std::string& path);

}  // namespace trainer
