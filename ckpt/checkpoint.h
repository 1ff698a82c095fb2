#pragma once
// Sharded checkpoints. A step directory holds one HDF5 file per (pipeline
// stage, tensor-parallel rank), written by that position's first DP rank, and
// a manifest with the layout, the training state and a CRC-32 per file. Each
// tensor is stored as the slice this rank holds, with its global shape and
// the slice's place in it, so a checkpoint loads under any layout: every
// rank reads the overlapping parts of the pieces it needs. Under ZeRO-1
// every data-parallel rank writes a file of its own (pp0_tp1_dp2.h5) with
// the flat part of each slice whose optimizer state it keeps (attribute
// "flat": first element, count, and the slice's element count).
//
//   <dir>/step_00000010/manifest       text, written last
//   <dir>/step_00000010/pp0_tp1.h5     datasets param/<name>, adam_m/<name>, adam_v/<name>
//   <dir>/latest                       name of the newest committed step
//
// Commit protocol: files go to step_N.tmp/, are fsynced, the ranks agree
// every file is complete, rank 0 writes the manifest, renames the directory,
// fsyncs the parent and replaces `latest` by write + rename. A crash leaves
// either the old or the new checkpoint as `latest`, never a broken one.

#include <cstdint>
#include <atomic>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace trainer {

// One tensor piece this rank holds: a slice of the tensor (shard_dim < 0:
// the whole tensor), or part of one. 1-D tensors are sliced along dim 0.
struct TensorPiece {
  std::string name;
  std::vector<int> global_shape;
  int shard_dim = -1;
  int start = 0;  // first index along shard_dim
  size_t numel = 0;  // elements of the slice
  // The part held: elements [flat_lo, flat_lo + flat_n) of the slice in
  // row-major order (ZeRO-1 cuts the flat buffer anywhere); flat_n = 0: all.
  size_t flat_lo = 0, flat_n = 0;
  float* data = nullptr;  // the part held, row-major
  size_t held() const { return flat_n ? flat_n : numel; }
};

struct TrainingState {
  long step = 0;              // optimizer steps completed
  uint64_t samples = 0;       // global data cursor: samples consumed
  long adam_steps = 0;
  int dp = 1, pp = 1, tp = 1;  // layout it was written under
};

// Collective over `world` (the recorded world communicator in a job, so a
// rank stuck in a save shows in the flight recorders). `writer`: this rank writes its file (first DP rank
// of its (pp, tp) position); `file_name` names it. The groups (param, m, v)
// are written under their prefixes. Returns the committed step directory.
// Throws CheckpointError on any failure, leaving the previous checkpoint.
// recipe_text: the resolved recipe, stored beside the manifest (recipe.toml).
// at_point, if set, is called at each stage: "writing" (every rank, before its
// file is written), then the commit's "shards_written", "manifest_written",
// "renamed", "latest_written" - the hook fault injection uses.
using SaveGroups = std::vector<std::pair<std::string, std::vector<TensorPiece>>>;
std::string save_checkpoint(const std::string& dir, const TrainingState& st, bool writer,
                            const std::string& file_name, const SaveGroups& groups, int keep,
                            ControlComm& world, const std::string& recipe_text = "",
                            const std::function<void(const char*)>& at_point = {});

// Bytes a writer's shard of these pieces takes on disk (a little above the
// data, for HDF5's headers); saves check it against free_bytes first.
size_t shard_bytes(const SaveGroups& groups);

// Asynchronous save: start() takes host copies of the pieces (the caller's
// snapshot, owned here; before_write, if set, runs first on the writer thread:
// a device backend's wait for its snapshot copies) and writes this rank's file on a background thread
// while training goes on; poll() - collective, once per step - commits when
// every rank's file is written (or waits for it with wait = true) and returns
// the step directory, else "". A failed write surfaces as CheckpointError
// from poll(), leaving the previous checkpoint.
class AsyncSaver {
 public:
  AsyncSaver() = default;
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;
  void start(const std::string& dir, const TrainingState& st, bool writer,
             const std::string& file_name, SaveGroups groups,
             std::vector<std::vector<float>> storage, int keep, const std::string& recipe_text,
             ControlComm& world, std::function<void()> before_write = {});
  std::string poll(ControlComm& world, bool wait);
  bool pending() const { return pending_; }

 private:
  std::thread thread_;
  std::atomic<bool> done_{false};
  bool pending_ = false;
  std::string dir_, tmp_dir_, recipe_, err_, line_;
  TrainingState st_;
  int keep_ = 0, ok_ = 1;
  SaveGroups groups_;
  std::vector<std::vector<float>> storage_;
};

// What a manifest lists, for `trainer ckpt inspect`.
struct ManifestFile {
  std::string name;
  size_t bytes = 0;
  uint32_t crc = 0;
};
std::vector<ManifestFile> manifest_files(const std::string& step_dir);
std::string manifest_version(const std::string& step_dir);

// The committed checkpoint `latest` names in dir, or "" if there is none.
std::string latest_checkpoint(const std::string& dir);

// Committed step directories in dir (step_N, not step_N.tmp), oldest first;
// none when dir does not exist.
std::vector<std::string> committed_checkpoints(const std::string& dir);
// The step a step directory's name carries (step_00000010 -> 10), or -1.
long checkpoint_step(const std::string& step_dir);
// What a user may give as a checkpoint: a step directory, a checkpoint
// directory (its `latest`, else its newest step directory) or a `latest`
// file. Returns the step directory; throws CheckpointError saying what the
// path is instead ("not a checkpoint: no manifest in X; checkpoints there: ...").
std::string find_checkpoint(const std::string& path);
// The resolved recipe a checkpoint recorded (recipe.toml), or "" if none.
std::string checkpoint_recipe(const std::string& step_dir);

// Reads and checks the manifest (and, with verify_files, every file's size
// and CRC-32). Throws CheckpointError naming the problem.
TrainingState read_manifest(const std::string& step_dir, bool verify_files);

// Fills each piece from the checkpoint's global tensors (any layout).
// Throws CheckpointError listing tensors that are missing or shaped otherwise.
void load_pieces(const std::string& step_dir, const std::string& prefix,
                 const std::vector<TensorPiece>& pieces);

// The newest checkpoint in dir that verifies, or "" (on_nan / on_spike =
// "rollback" uses it as it is: nothing is compared or moved). broken gets the
// newer ones that did not verify, why a line for each.
std::string newest_valid_checkpoint(const std::string& dir, std::vector<std::string>* broken = nullptr,
                                    std::string* why = nullptr);

// Moves a committed step directory aside as STEP.unusable_<UTC time>, where
// no resume, rollback or retention reaches it (its files are kept: nothing
// is deleted), and points `latest` at the newest committed one left (or
// removes it). Returns the new path; throws CheckpointError.
std::string set_aside_checkpoint(const std::string& step_dir);

}  // namespace trainer
