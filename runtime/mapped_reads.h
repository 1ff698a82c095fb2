#pragma once
// Files read through mmap (token shards) can shrink under a running job: a
// shard copied over in place or truncated. A read past the new
// end raises SIGBUS, which used to kill the rank (exit 135) with no word about
// the file. Each such mapping is watched here: a SIGBUS inside one maps zero
// pages over the rest of it, marks it lost and lets the read finish, and the
// reader, which asks lost() after it reads, stops with a data error naming
// the file (exit 3). The crash report's handler (runtime/crash_report.h)
// calls recover_mapped_read first, so a SIGBUS anywhere else is still a crash.
#include <cstddef>

namespace trainer {

// Watches [base, base + bytes); returns a handle for lost()/unwatch, or -1
// when every slot is taken (that mapping is then not covered).
int watch_mapping(const void* base, size_t bytes);
void unwatch_mapping(int handle);
// Whether a read of the mapping faulted because the file shrank (what was
// read there since is zeros).
bool mapping_lost(int handle);

// Async-signal-safe, for a SIGBUS handler: when `addr` lies in a watched
// mapping, replaces the rest of it with zero pages, marks it lost and returns
// true (the faulting read then completes).
bool recover_mapped_read(const void* addr);

}  // namespace trainer
