#pragma once
// Ownership of a run directory (and a checkpoint directory) for a job's
// lifetime: an exclusive flock(2) on DIR/.lock, whose contents name the
// holder (host, pid, start time, a token). The kernel drops the lock when the
// holding process dies, so a crashed, killed or requeued job never leaves a
// lock that blocks its restart; the file's contents only say who held it.
//
// Who holds it: rank 0 of `trainer train`, or `trainer supervise` for all its
// launches. A supervisor passes its token to the job (TRAINER_LOCK_TOKEN), and
// rank 0 of that job accepts a lock whose file carries the same token: the
// supervisor's launches are the same run.
#include <sys/stat.h>

#include <string>

namespace trainer {

class RunLock {
 public:
  RunLock() = default;
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes DIR/.lock (DIR must exist) for the owner `token` (a new one when
  // empty). Returns "" on success, or a message naming the holder and how to
  // clear the lock. A lock held under the same token is shared, not taken:
  // our own supervisor, or the run's other directory.
  std::string acquire(const std::string& dir, const std::string& token = "");
  const std::string& token() const { return token_; }
  // Set when the file system cannot lock (no flock support): the run goes on
  // unprotected, and this says so.
  const std::string& warning() const { return warning_; }
  // "" while DIR/.lock still names the file this run locked (or shares);
  // else why not: the file was deleted, replaced, or the directory removed or
  // renamed. A lock lives on an inode, not a path: once the path names
  // another file (or none) a second run can take the directory while this one
  // writes it, so the holder checks before it writes again (each heartbeat).
  std::string lost() const;

 private:
  int fd_ = -1;
  std::string token_, warning_, path_;
  void remember(const std::string& path, const struct stat& st);
  // path_ is set once we hold (or share) the lock; dev_/ino_: its file's identity.
  unsigned long dev_ = 0, ino_ = 0;
};

}  // namespace trainer
