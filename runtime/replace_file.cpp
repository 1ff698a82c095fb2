#include "runtime/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace trainer {

bool fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  errno = err;
  return ok;
}

std::string replace_file(const std::string& path, const std::string& text, bool durable) {
  // Failures name the file the caller asked for (the one a user looks for),
  // the temporary copy it is written through in parentheses.
  const std::string tmp = path + ".tmp";
  // Nothing is left behind on failure: the temporary copy goes too.
  auto failed = [&](const char* verb) {
    const std::string why = std::string(verb) + " " + path + " (through " + tmp + "): " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  };
  ::unlink(tmp.c_str());  // a stale copy, or a FIFO someone left there, would be opened (and block)
  FILE* f = std::fopen(tmp.c_str(), "wx");
  if (!f) return failed("cannot write");
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) return failed("cannot write");
  if (durable && !fsync_path(tmp, false)) return failed("cannot fsync");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return failed("cannot replace");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (durable && !fsync_path(dir.empty() ? "." : dir, true))
    return "cannot fsync the directory " + dir + ": " + std::strerror(errno);
  return "";
}

double mtime_seconds(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
}

}  // namespace trainer
