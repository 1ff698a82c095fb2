#include "ckpt/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "ckpt/hdf5_tensors.h"
#include "runtime/errors.h"
#include "runtime/metrics.h"
#include "runtime/regular_file.h"
#include "runtime/replace_file.h"
#include "runtime/utc_time.h"
#include "runtime/version.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

constexpr const char* kManifestMagic = "trainer-checkpoint 1";

// The checkpoint's fsyncs fail the save.
void fsync_or_throw(const std::string& path, bool directory) {
  if (!fsync_path(path, directory)) throw CheckpointError(path + ": fsync failed: " + std::strerror(errno));
}

uint32_t file_crc32(const std::string& path, size_t* bytes) {
  if (const std::string why = not_regular_file(path); !why.empty()) throw CheckpointError(path + ": " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw CheckpointError(path + ": cannot read");
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  *bytes = 0;
  while (f) {
    f.read(buf.data(), buf.size());
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), (uInt)n);
    *bytes += (size_t)n;
  }
  return (uint32_t)crc;
}

// Writes a small text file durably: temporary name, fsync, rename, fsync dir.
void write_atomically(const std::string& path, const std::string& text) {
  if (const std::string err = replace_file(path, text, true); !err.empty()) throw CheckpointError(err);
}

std::string step_name(long step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%08ld", step);
  return b;
}

std::vector<int> local_shape(const TensorPiece& p) {
  std::vector<int> s = p.global_shape;
  if (p.shard_dim >= 0) {
    size_t other = 1;
    for (size_t i = 0; i < s.size(); i++)
      if ((int)i != p.shard_dim) other *= s[i];
    s[p.shard_dim] = (int)(p.numel / other);
  }
  return s;
}

struct FileEntry {
  std::string name;
  size_t bytes = 0;
  uint32_t crc = 0;
};

struct Manifest {
  TrainingState state;
  std::vector<FileEntry> files;  // tensor shards
  std::vector<FileEntry> meta;   // recipe.toml
  std::string version;
};

// A name a manifest or `latest` gives: one plain file name inside the
// checkpoint's directory, nothing that leads out of it.
bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

// Points `latest` at a step directory of dir (the file replaced whole: a
// reader never sees half a name). "" when written, else why not.
std::string point_latest(const std::string& dir, const std::string& name) {
  return replace_file(dir + "/latest", name + "\n", true);
}

// A name read from a file, quoted for a message with its control bytes (a
// NUL, a terminal escape) escaped, so nothing is cut off or acted on.
std::string shown(const std::string& n) { return "\"" + json_escape(n) + "\""; }

// The manifest's own checksum: "crc XXXXXXXX", the CRC-32 of every byte
// before that line (manifests of earlier releases have none).
std::string manifest_crc_line(const std::string& text_before) {
  char l[32];
  std::snprintf(l, sizeof l, "crc %08lx", crc32(0L, reinterpret_cast<const Bytef*>(text_before.data()), (uInt)text_before.size()));
  return l;
}

Manifest parse_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/manifest";
  if (const std::string why = not_regular_file(path); !why.empty()) throw CheckpointError(path + ": " + why);
  std::ifstream f(path);
  if (!f) throw CheckpointError(path + ": missing (the checkpoint was not committed)");
  std::string line, before;
  if (!std::getline(f, line) || line != kManifestMagic)
    throw CheckpointError(path + ": not a trainer checkpoint manifest");
  before = line + "\n";
  Manifest m;
  bool stepped = false, checked = false, ended = false;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string key;
    is >> key;
    if (ended) throw CheckpointError(path + ": a line after its end: " + shown(line));
    if (checked && key != "end")
      throw CheckpointError(path + ": a line after its checksum: " + shown(line) + " (the manifest was changed)");
    if (key == "crc") {
      if (line != manifest_crc_line(before))
        throw CheckpointError(path + ": its checksum does not match its contents (the manifest was changed)");
      before += line + "\n";
      checked = true;
      continue;
    }
    ended = key == "end";
    before += line + "\n";
    stepped |= key == "step";
    if (key == "step") is >> m.state.step;
    else if (key == "samples") is >> m.state.samples;
    else if (key == "adam_steps") is >> m.state.adam_steps;
    else if (key == "layout") is >> m.state.dp >> m.state.pp >> m.state.tp;
    else if (key == "trainer_version") is >> m.version;
    else if (key == "file" || key == "meta") {
      FileEntry e;
      is >> e.name >> e.bytes >> std::hex >> e.crc;
      (key == "file" ? m.files : m.meta).push_back(e);
    }
    if (!is && key != "end") throw CheckpointError(path + ": malformed line: " + line);
    if ((key == "file" || key == "meta") && !plain_name((key == "file" ? m.files : m.meta).back().name))
      throw CheckpointError(path + ": names " + shown((key == "file" ? m.files : m.meta).back().name) +
                            ", which is not a file of this checkpoint's directory");
  }
  if (m.files.empty()) throw CheckpointError(path + ": lists no shard files");
  const long dir_step = checkpoint_step(step_dir);
  if (!stepped || m.state.step < 0 || (dir_step >= 0 && m.state.step != dir_step))
    throw CheckpointError(path + ": says step " + std::to_string(m.state.step) + " but its directory is " +
                          fs::path(step_dir).filename().string() + " (the manifest was changed or moved)");
  return m;
}

}  // namespace

namespace {

// Renames step_dir to step_dir + tag + <UTC time> (a number when taken) and
// returns the new name; CheckpointError saying `what` when it cannot.
std::string move_aside(const std::string& step_dir, const char* tag, const char* what) {
  std::error_code ec;
  std::string to = step_dir + tag + utc_time("%Y%m%dT%H%M%SZ");
  for (int k = 1; fs::exists(to, ec); k++) to = step_dir + tag + std::to_string(k);
  fs::rename(step_dir, to, ec);
  if (ec) throw CheckpointError(step_dir + ": " + what + " and cannot be moved aside: " + ec.message());
  return to;
}

// A step directory about to be written again: one whose manifest verifies
// (the same step saved twice) is replaced; one whose manifest does not (a
// tampered or foreign one) is never deleted but moved aside as
// step_N.broken_<UTC time>, where retention does not reach. Shards are not
// re-read here: rank 0 commits while the other ranks wait.
void set_aside_or_remove(const std::string& final_dir) {
  std::error_code ec;
  if (!fs::exists(final_dir, ec)) return;
  try {
    read_manifest(final_dir, false);  // its manifest: the shards' checksums are not read inside the commit
    fs::remove_all(final_dir, ec);
    return;
  } catch (const CheckpointError& e) {
    const std::string to = move_aside(final_dir, ".broken_", "does not verify");
    std::fprintf(stderr, "warning: %s did not verify (%s); moved aside to %s instead of being overwritten\n",
                 final_dir.c_str(), e.what(), to.c_str());
  }
}

// Phase 1 (collective): rank 0 makes a fresh step_N.tmp directory.
std::string prepare_dir(const std::string& dir, long step, ControlComm& world) {
  const int rank = world.rank();
  const std::string tmp_dir = dir + "/" + step_name(step) + ".tmp";
  int ok = 1;
  std::string err;
  if (rank == 0) {
    std::error_code ec;
    // The checkpoint directory itself, never its parents: a run directory
    // renamed or removed under a live run is not made again by its save.
    if (!fs::is_directory(dir, ec)) fs::create_directory(dir, ec);
    fs::remove_all(tmp_dir, ec);  // a save that crashed before
    ec.clear();
    fs::create_directory(tmp_dir, ec);
    if (ec) ok = 0, err = tmp_dir + ": cannot create: " + ec.message();
  }
  world.broadcast(&ok, sizeof ok, 0);
  if (!ok) throw CheckpointError(rank == 0 ? err : "checkpoint directory could not be created");
  return tmp_dir;
}

}  // namespace

size_t shard_bytes(const SaveGroups& groups) {
  size_t bytes = 0;
  for (const auto& g : groups)
    for (const TensorPiece& p : g.second) bytes += p.held() * sizeof(float) + 512;  // + HDF5's headers
  return bytes + 4096;
}

namespace {

// Phase 2 (a writer, no MPI; may run on a background thread): the file, its
// fsync and its manifest line "file NAME BYTES CRC".
std::string write_shard(const std::string& tmp_dir, const std::string& file_name, const SaveGroups& groups) {
  const std::string path = tmp_dir + "/" + file_name;
  // Only finite numbers are committed: weights or AdamW state that an update
  // overflowed would otherwise be resumed from, and rolled back to, as good.
  for (const auto& [prefix, pieces] : groups)
    for (const TensorPiece& p : pieces) {
      uint32_t top = 0;  // the largest exponent field, 255 only for NaN and inf (an integer max vectorizes)
      for (size_t i = 0; i < p.held(); i++) {
        uint32_t bits;
        std::memcpy(&bits, p.data + i, sizeof bits);
        top = std::max(top, (bits >> 23) & 0xffu);
      }
      if (top < 0xffu) continue;
      size_t at = 0;
      while (std::isfinite(p.data[at])) at++;
      throw CheckpointError(path + ": " + prefix + "/" + p.name + " holds " + (std::isnan(p.data[at]) ? "NaN" : "inf") +
                            " (element " + std::to_string(at) + "): a checkpoint of non-finite weights or optimizer "
                            "state is never committed; the newest committed checkpoint is the one to resume from");
    }
  {
    const size_t bytes = shard_bytes(groups);
    // A save that cannot fit fails before it builds anything.
    if (free_bytes(tmp_dir) < bytes)
      throw CheckpointError(path + ": not enough space on the device (" + free_space_text(path, bytes) + ")");
    H5File f(path, H5File::Create, bytes);
    for (const auto& [prefix, pieces] : groups)
      for (const TensorPiece& p : pieces) {
        const std::string name = prefix + "/" + p.name;
        f.write(name, p.data, p.flat_n ? std::vector<int>{(int)p.flat_n} : local_shape(p));
        f.set_attr(name, "global_shape", p.global_shape);
        f.set_attr(name, "shard", {p.shard_dim, p.start});
        if (p.flat_n) f.set_attr64(name, "flat", {(int64_t)p.flat_lo, (int64_t)p.flat_n, (int64_t)p.numel});
      }
    f.close();
  }
  fsync_or_throw(path, false);
  size_t bytes = 0;
  const uint32_t crc = file_crc32(path, &bytes);
  char line[512];
  std::snprintf(line, sizeof line, "file %s %zu %08x", file_name.c_str(), bytes, crc);
  return line;
}

// Phase 3 (collective): agree every file is complete, then rank 0 writes the
// manifest, renames the directory, replaces `latest` and applies retention.
std::string commit(const std::string& dir, const TrainingState& st, int keep, ControlComm& world,
                   const std::string& recipe_text, const std::function<void(const char*)>& at_point,
                   int ok, const std::string& my_err, const std::string& my_line) {
  auto point = [&](const char* p) {
    if (at_point) at_point(p);
  };
  const int rank = world.rank(), size = world.size();
  const std::string final_dir = dir + "/" + step_name(st.step);
  const std::string tmp_dir = final_dir + ".tmp";
  std::string err = my_err;
  char line[512] = {0};
  std::snprintf(line, sizeof line, "%s", my_line.c_str());
  double failed = ok ? 0 : 1;  // on any rank
  world.allreduce_max(&failed, 1);
  const bool all_ok = failed == 0;
  std::vector<char> lines((size_t)size * sizeof line);
  world.allgather_bytes(line, lines.data(), sizeof line);
  point("shards_written");
  if (!all_ok) {
    std::error_code ec;
    if (rank == 0) fs::remove_all(tmp_dir, ec);  // the partial save must not keep the disk full
    throw CheckpointError(err.empty() ? "the write failed on another rank (its message is on that rank's output)" : err);
  }
  // Rank 0 commits: manifest, rename, `latest`, retention.
  ok = 1;
  std::string recipe_line;
  if (rank == 0) {
    try {
      if (!recipe_text.empty()) {
        write_atomically(tmp_dir + "/recipe.toml", recipe_text);
        size_t bytes = 0;
        const uint32_t crc = file_crc32(tmp_dir + "/recipe.toml", &bytes);
        char l[128];
        std::snprintf(l, sizeof l, "meta recipe.toml %zu %08x", bytes, crc);
        recipe_line = l;
      }
      std::ostringstream m;
      m << kManifestMagic << "\n" << "trainer_version " << kTrainerVersion << "\n"
        << "step " << st.step << "\nsamples " << st.samples << "\nadam_steps " << st.adam_steps
        << "\nlayout " << st.dp << " " << st.pp << " " << st.tp << "\n";
      for (int r = 0; r < size; r++)
        if (lines[(size_t)r * sizeof line]) m << &lines[(size_t)r * sizeof line] << "\n";
      if (!recipe_line.empty()) m << recipe_line << "\n";
      m << manifest_crc_line(m.str()) << "\nend\n";
      write_atomically(tmp_dir + "/manifest", m.str());
      fsync_or_throw(tmp_dir, true);
      point("manifest_written");
      std::error_code ec;
      set_aside_or_remove(final_dir);  // the same step saved again
      if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0)
        throw CheckpointError(final_dir + ": cannot commit: " + std::strerror(errno));
      fsync_or_throw(dir, true);
      point("renamed");
      // The step is committed now. `latest` is a pointer a resume does not
      // need (it takes the newest step directory that verifies), so failing
      // to write it is a warning, once, not a failed save; retention goes on.
      if (const std::string e = point_latest(dir, step_name(st.step)); !e.empty()) {
        static bool warned = false;
        if (!warned)
          std::fprintf(stderr, "warning: checkpoint %s committed, but %s; a resume still finds it (the newest "
                               "step directory that verifies). Said once.\n", final_dir.c_str(), e.c_str());
        warned = true;
      }
      point("latest_written");
      if (keep > 0) {
        // Older committed checkpoints beyond `keep`, oldest first. Only steps
        // before this one: at start-up the run made sure every checkpoint in
        // dir is its own or one it continues (app/resume.cpp), so nothing
        // newer exists, and the one just written is never the one removed.
        std::vector<std::string> older;
        for (const std::string& s : committed_checkpoints(dir))
          if (checkpoint_step(s) < st.step) older.push_back(s);
        for (size_t i = 0; i + keep < older.size() + 1; i++) fs::remove_all(older[i], ec);
      }
    } catch (const std::exception& e) {
      ok = 0;
      err = e.what();
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);  // not committed: nothing of it stays
    }
  }
  world.broadcast(&ok, sizeof ok, 0);
  if (!ok) throw CheckpointError(rank == 0 ? err : "checkpoint commit failed on rank 0");
  return final_dir;
}


}  // namespace

std::string save_checkpoint(const std::string& dir, const TrainingState& st, bool writer,
                            const std::string& file_name, const SaveGroups& groups, int keep,
                            ControlComm& world, const std::string& recipe_text,
                            const std::function<void(const char*)>& at_point) {
  const std::string tmp_dir = prepare_dir(dir, st.step, world);
  if (at_point) at_point("writing");
  int ok = 1;
  std::string err, line;
  if (writer) {
    try {
      line = write_shard(tmp_dir, file_name, groups);
    } catch (const std::exception& e) {
      ok = 0, err = e.what();
    }
  }
  return commit(dir, st, keep, world, recipe_text, at_point, ok, err, line);
}

AsyncSaver::~AsyncSaver() {
  if (thread_.joinable()) thread_.join();
}

void AsyncSaver::start(const std::string& dir, const TrainingState& st, bool writer,
                       const std::string& file_name, SaveGroups groups,
                       std::vector<std::vector<float>> storage, int keep,
                       const std::string& recipe_text, ControlComm& world, std::function<void()> before_write) {
  tmp_dir_ = prepare_dir(dir, st.step, world);
  dir_ = dir, st_ = st, keep_ = keep, recipe_ = recipe_text;
  groups_ = std::move(groups);
  storage_ = std::move(storage);
  ok_ = 1, err_.clear(), line_.clear();
  done_ = !writer;
  pending_ = true;
  if (writer)
    thread_ = std::thread([this, file_name, before_write] {
      try {
        if (before_write) before_write();
        line_ = write_shard(tmp_dir_, file_name, groups_);
      } catch (const std::exception& e) {
        ok_ = 0, err_ = e.what();
      }
      done_ = true;
    });
}

std::string AsyncSaver::poll(ControlComm& world, bool wait) {
  if (!pending_) return "";
  double writing = wait || done_ ? 0 : 1;  // on any rank
  world.allreduce_max(&writing, 1);
  if (writing > 0) return "";
  if (thread_.joinable()) thread_.join();
  pending_ = false;
  storage_.clear();
  groups_.clear();
  return commit(dir_, st_, keep_, world, recipe_, {}, ok_, err_, line_);
}

std::string latest_checkpoint(const std::string& dir) {
  if (const std::string why = not_regular_file(dir + "/latest"); !why.empty()) {
    std::fprintf(stderr, "warning: %s/latest %s; ignored\n", dir.c_str(), why.c_str());
    return "";
  }
  std::ifstream f(dir + "/latest");
  std::string name;
  if (!f || !(f >> name)) return "";
  if (!plain_name(name) || checkpoint_step(name) < 0) {  // a `latest` that leads out of dir is not followed
    std::fprintf(stderr, "warning: %s/latest names %s, not a step directory here; ignored\n", dir.c_str(),
                 shown(name).c_str());
    return "";
  }
  return dir + "/" + name;
}

long checkpoint_step(const std::string& step_dir) {
  const std::string n = fs::path(step_dir).lexically_normal().filename().string();
  if (n.rfind("step_", 0) != 0 || n.size() <= 5 || n.find(".tmp") != std::string::npos) return -1;
  char* end = nullptr;
  const long s = std::strtol(n.c_str() + 5, &end, 10);
  return end && *end == 0 ? s : -1;
}

std::vector<std::string> committed_checkpoints(const std::string& dir) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const long s = checkpoint_step(e.path().string());
    if (s >= 0 && e.is_directory(ec)) found.push_back({s, e.path().string()});
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string find_checkpoint(const std::string& path_in) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError("not a checkpoint: " + path + " does not exist");
  if (fs::is_regular_file(path, ec) && fs::path(path).filename() == "latest") {
    const std::string l = latest_checkpoint(fs::path(path).parent_path().string());
    if (l.empty()) throw CheckpointError("not a checkpoint: " + path + " names no step directory");
    return l;
  }
  if (!fs::is_directory(path, ec))
    throw CheckpointError("not a checkpoint: " + path + " is a file; give a step directory (step_N) or the "
                          "checkpoint directory that holds them");
  if (fs::exists(path + "/manifest", ec)) return path;
  if (const std::string l = latest_checkpoint(path); !l.empty()) return l;
  const std::vector<std::string> steps = committed_checkpoints(path);
  if (!steps.empty()) return steps.back();
  std::string there;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (there.size() > 200) { there += " ..."; break; }
    there += (there.empty() ? "" : ", ") + e.path().filename().string();
  }
  if (checkpoint_step(path) >= 0 || fs::exists(path + ".tmp", ec) ||
      fs::path(path).filename().string().find(".tmp") != std::string::npos)
    throw CheckpointError(path + ": no manifest: this checkpoint was never committed (a save that did not finish)");
  throw CheckpointError("not a checkpoint: no manifest in " + path + " and no step directories; " +
                        (there.empty() ? std::string("it is empty") : "it holds: " + there));
}

std::string checkpoint_recipe(const std::string& step_dir) {
  if (!not_regular_file(step_dir + "/recipe.toml").empty()) return "";
  std::ifstream f(step_dir + "/recipe.toml");
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TrainingState read_manifest(const std::string& step_dir, bool verify_files) {
  const Manifest m = parse_manifest(step_dir);
  std::vector<FileEntry> all = m.files;
  all.insert(all.end(), m.meta.begin(), m.meta.end());
  if (verify_files)
    for (const FileEntry& e : all) {
      const std::string path = step_dir + "/" + e.name;
      size_t bytes = 0;
      const uint32_t crc = file_crc32(path, &bytes);
      if (bytes != e.bytes)
        throw CheckpointError(path + ": " + std::to_string(bytes) + " bytes, the manifest says " +
                              std::to_string(e.bytes) + " (incomplete or truncated)");
      if (crc != e.crc) throw CheckpointError(path + ": checksum mismatch (the file is corrupted)");
    }
  return m.state;
}

std::vector<ManifestFile> manifest_files(const std::string& step_dir) {
  const Manifest m = parse_manifest(step_dir);
  std::vector<ManifestFile> out;
  for (const FileEntry& e : m.files) out.push_back({e.name, e.bytes, e.crc});
  for (const FileEntry& e : m.meta) out.push_back({e.name, e.bytes, e.crc});
  return out;
}

std::string manifest_version(const std::string& step_dir) { return parse_manifest(step_dir).version; }

namespace {

// A piece as a region of its tensor seen as a matrix (a 1-D tensor as one
// column): rows [r0, r0 + rn) and columns [c0, c0 + cn), and of that
// rectangle the elements [f0, f1) in row-major order.
struct Region {
  size_t r0, rn, c0, cn, f0, f1;
};

Region region_of(const std::vector<int>& global_shape, int shard_dim, size_t start, size_t numel, size_t flat_lo,
                 size_t flat_n) {
  const size_t R = global_shape.empty() ? 1 : (size_t)global_shape[0];
  const size_t C = global_shape.size() == 2 ? (size_t)global_shape[1] : 1;
  Region g{0, R, 0, C, 0, 0};
  if (shard_dim == 0) g.r0 = start, g.rn = numel / C;
  if (shard_dim == 1) g.c0 = start, g.cn = numel / R;
  g.f0 = flat_lo;
  g.f1 = flat_n ? flat_lo + flat_n : g.rn * g.cn;
  return g;
}

// Copies what stored region s (its elements in src) has of needed region n
// (into dst) and appends the parts of n it filled to `filled`.
void copy_overlap(const Region& s, const float* src, const Region& n, float* dst,
                  std::vector<std::pair<size_t, size_t>>& filled) {
  const size_t r_lo = std::max({s.r0, n.r0, s.r0 + s.f0 / s.cn, n.r0 + n.f0 / n.cn});
  const size_t r_hi = std::min({s.r0 + s.rn, n.r0 + n.rn, s.r0 + (s.f1 + s.cn - 1) / s.cn, n.r0 + (n.f1 + n.cn - 1) / n.cn});
  for (size_t g = r_lo; g < r_hi; g++) {
    // Columns of row g inside both rectangles and both flat ranges.
    const size_t s_row = (g - s.r0) * s.cn, n_row = (g - n.r0) * n.cn;
    long lo = (long)std::max(s.c0, n.c0), hi = (long)std::min(s.c0 + s.cn, n.c0 + n.cn);
    lo = std::max({lo, (long)s.c0 + (long)s.f0 - (long)s_row, (long)n.c0 + (long)n.f0 - (long)n_row});
    hi = std::min({hi, (long)s.c0 + (long)s.f1 - (long)s_row, (long)n.c0 + (long)n.f1 - (long)n_row});
    if (lo >= hi) continue;
    const size_t ks = s_row + (size_t)lo - s.c0, kn = n_row + (size_t)lo - n.c0;
    std::memcpy(dst + (kn - n.f0), src + (ks - s.f0), (size_t)(hi - lo) * sizeof(float));
    filled.push_back({kn - n.f0, kn - n.f0 + (size_t)(hi - lo)});
  }
}

// Elements in the union of the intervals.
size_t union_size(std::vector<std::pair<size_t, size_t>> v) {
  std::sort(v.begin(), v.end());
  size_t total = 0, end = 0;
  for (const auto& [lo, hi] : v) {
    if (hi <= end) continue;
    total += hi - std::max(lo, end);
    end = hi;
  }
  return total;
}

// Reads the part of stored dataset `name` (region s) that can overlap n, as
// a region of its own, into buf.
Region read_overlap(H5File& f, const std::string& name, const Region& s, const Region& n, bool flat,
                    std::vector<float>& buf) {
  const size_t r_lo = std::max(s.r0, n.r0), r_hi = std::min(s.r0 + s.rn, n.r0 + n.rn);
  const size_t c_lo = std::max(s.c0, n.c0), c_hi = std::min(s.c0 + s.cn, n.c0 + n.cn);
  if (r_lo >= r_hi || c_lo >= c_hi) return Region{0, 0, 0, 1, 0, 0};
  if (!flat) {  // a rectangle: just the block both share
    Region b{r_lo, r_hi - r_lo, c_lo, c_hi - c_lo, 0, (r_hi - r_lo) * (c_hi - c_lo)};
    buf.resize(b.f1);
    f.read_block(name, r_lo - s.r0, b.rn, c_lo - s.c0, b.cn, buf.data());
    return b;
  }
  // A flat part: the stretch of it covering the shared rows.
  Region b = s;
  b.f0 = std::max(s.f0, (r_lo - s.r0) * s.cn);
  b.f1 = std::min(s.f1, (r_hi - s.r0) * s.cn);
  if (b.f0 >= b.f1) return Region{0, 0, 0, 1, 0, 0};
  buf.resize(b.f1 - b.f0);
  f.read_block(name, b.f0 - s.f0, b.f1 - b.f0, 0, 1, buf.data());
  return b;
}

std::string shape_text(const std::vector<int>& v) {
  std::string t;
  for (int x : v) {
    if (!t.empty()) t += "x";
    t += std::to_string(x);
  }
  return t;
}

}  // namespace

void load_pieces(const std::string& step_dir, const std::string& prefix,
                 const std::vector<TensorPiece>& pieces) {
  const Manifest m = parse_manifest(step_dir);
  std::vector<std::unique_ptr<H5File>> files;
  for (const FileEntry& e : m.files) files.push_back(std::make_unique<H5File>(step_dir + "/" + e.name, H5File::Read));
  std::vector<std::string> problems;
  std::vector<float> buf;
  for (const TensorPiece& p : pieces) {
    const std::string name = prefix + "/" + p.name;
    const Region want = region_of(p.global_shape, p.shard_dim, p.start, p.numel, p.flat_lo, p.flat_n);
    std::vector<std::pair<size_t, size_t>> filled;
    size_t copied = 0;
    bool found = false, bad = false;
    for (auto& f : files) {
      if (!f->has(name)) continue;
      found = true;
      const std::vector<int> gshape = f->get_attr(name, "global_shape");
      if (gshape != p.global_shape) {
        problems.push_back(p.name + " (checkpoint " + shape_text(gshape) + ", model " + shape_text(p.global_shape) + ")");
        bad = true;
        break;
      }
      const std::vector<int> shard = f->get_attr(name, "shard");  // {dim or -1, start}
      const bool flat = f->has_attr(name, "flat");
      size_t slice = 1, lo = 0, count = 0;
      if (flat) {
        const std::vector<int64_t> fl = f->get_attr64(name, "flat");  // {first, count, slice elements}
        lo = (size_t)fl[0], count = (size_t)fl[1], slice = (size_t)fl[2];
      } else {
        for (int x : f->shape(name)) slice *= (size_t)x;
      }
      const Region stored = region_of(gshape, shard[0], (size_t)shard[1], slice, lo, count);
      const Region part = read_overlap(*f, name, stored, want, flat, buf);
      const size_t before = filled.size();
      if (part.f1 > part.f0) copy_overlap(part, buf.data(), want, p.data, filled);
      for (size_t i = before; i < filled.size(); i++) copied += filled[i].second - filled[i].first;
      // Replicated tensors are stored by every tensor-parallel position: stop
      // once every element is there.
      if (copied >= p.held() && union_size(filled) == p.held()) break;
    }
    if (bad) continue;
    const size_t covered = union_size(filled);
    if (!found) problems.push_back(p.name + " (not in the checkpoint)");
    else if (covered != p.held())
      problems.push_back(p.name + " (only " + std::to_string(covered) + " of " + std::to_string(p.held()) +
                         " values found)");
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& t : problems) list += "\n  " + t;
    throw CheckpointError(step_dir + ": the checkpoint does not match the model (" + prefix + "):" + list);
  }
}

std::string set_aside_checkpoint(const std::string& step_dir) {
  const std::string to = move_aside(step_dir, ".unusable_", "is unusable");
  const std::string dir = fs::path(step_dir).parent_path().string();
  const std::vector<std::string> left = committed_checkpoints(dir);
  std::error_code ec;
  if (left.empty()) fs::remove(dir + "/latest", ec);
  else if (const std::string e = point_latest(dir, fs::path(left.back()).filename().string()); !e.empty())
    std::fprintf(stderr, "warning: %s; `latest` may name %s, now moved aside\n", e.c_str(), step_dir.c_str());
  return to;
}

std::string newest_valid_checkpoint(const std::string& dir, std::vector<std::string>* broken, std::string* why) {
  std::vector<std::string> steps = committed_checkpoints(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    try {
      read_manifest(*it, true);
      return *it;
    } catch (const CheckpointError& e) {
      if (broken) broken->push_back(*it);
      if (why) *why += "\n  " + fs::path(*it).filename().string() + ": " + e.what();
    }
  }
  return "";
}

}  // namespace trainer
