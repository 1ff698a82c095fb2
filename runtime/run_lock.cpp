#include "runtime/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "runtime/host_name.h"
#include "runtime/utc_time.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace {
std::string new_token() {
  std::random_device rd;
  char b[40];
  std::snprintf(b, sizeof b, "%08x%08x%08x", rd(), rd(), rd());
  return b;
}

// "key value" lines of a lock file.
std::string field(const std::string& text, const std::string& key) {
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line))
    if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
  return "";
}
}  // namespace

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock; the file stays as a record
}

std::string RunLock::acquire(const std::string& dir, const std::string& token) {
  token_ = token.empty() ? new_token() : token;
  const std::string path = dir + "/.lock";
  if (const std::string why = not_regular_file(path); !why.empty()) return path + ": the lock file " + why;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return path + ": cannot open the lock file: " + std::strerror(errno);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string held = ss.str();
    close(fd);
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {  // e.g. Lustre mounted without flock
      warning_ = path + ": this file system cannot lock (" + std::strerror(err) +
                 "): a second run on the same directory will not be detected";
      return "";
    }
    if (err != EWOULDBLOCK) return path + ": cannot lock: " + std::strerror(err);
    if (field(held, "token") == token_) {  // shared with our supervisor: its file is ours to watch
      struct stat st;
      if (stat(path.c_str(), &st) == 0) remember(path, st);
      return "";
    }
    return dir + " is in use by another run: host " + field(held, "host") + ", pid " + field(held, "pid") +
           ", since " + field(held, "started") + " (" + path +
           "). Two runs writing one directory corrupt each other's checkpoints and metrics: wait for it, "
           "stop it, or give this run another [run] dir / [checkpoint] dir. The lock is released when that "
           "process exits; if it hangs, kill it (a lock never outlives its process, so deleting " +
           path + " is not needed and does not help while it runs).";
  }
  const std::string started = utc_time("%Y-%m-%dT%H:%M:%SZ");
  const std::string text = "host " + host_name() + "\npid " + std::to_string(getpid()) + "\nstarted " +
                           started + "\ntoken " + token_ + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != (ssize_t)text.size()) {
    const int err = errno;
    close(fd);
    return path + ": cannot write the lock file: " + std::strerror(err);
  }
  fd_ = fd;
  struct stat st;
  if (fstat(fd, &st) == 0) remember(path, st);
  return "";
}

void RunLock::remember(const std::string& path, const struct stat& st) {
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

std::string RunLock::lost() const {
  if (path_.empty()) return "";
  struct stat st;
  std::string what;
  if (stat(path_.c_str(), &st) != 0)
    what = std::string("is gone (") + std::strerror(errno) + "): it was deleted, or its directory removed or renamed,";
  else if (st.st_dev != dev_ || st.st_ino != ino_)
    what = "was replaced by another file";
  else
    return "";
  return "the run's lock " + path_ + " " + what +
         " while this run held it, so a second run may now take the directory and the two would overwrite "
         "each other's checkpoints and metrics. Stopping before writing again: make sure no other run uses it "
         "(a live run's .lock names its host and pid), then run the same command to resume from the newest "
         "checkpoint. Never delete .lock under a live run: a lock is released when its process exits";
}

}  // namespace trainer
