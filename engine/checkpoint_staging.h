#pragma once
// What a checkpoint holds of one rank and how it gets there: this rank's
// pieces of the fp32 master weights and of AdamW's m and v (ckpt/checkpoint.h
// names and slices them), written by the first data-parallel rank of each
// (pipeline stage, tensor-parallel rank) position; and the way back when
// resuming.
//
// One path for both kinds of save: the pieces are copied from the backend
// into a host staging buffer (pinned memory on a GPU), then written from
// there, on this thread (blocking save) or on a background thread
// (checkpoint.async). ckpt/ only ever sees host memory. For an async save
// the copies are queued on the backend's side (communication) stream: the
// compute stream only waits for them before it next changes the weights,
// and the writer thread waits for them before it writes (on the CPU they
// are done at once).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_export.h"
#include "engine/grad_reduce.h"
#include "model/adamw.h"
#include "runtime/backend.h"

namespace trainer {

class CheckpointStaging {
 public:
  // writer: this rank writes its position's file; saves_planned: allocate
  // the host snapshot now (touching 1.5 GB of new pages costs seconds in a
  // VM: a blocking 124M save measured 10.6 s instead of 8.1 s when it happened
  // during the first save); else at the first save (a preemption's).
  // zero_dp: under ZeRO-1, the data-parallel group AdamW's state is sharded
  // over (null: every rank holds all of it). A save then first gathers the
  // whole state (and a bf16 run's fp32 master weights) on every rank of the
  // group, so the files stay those of an unsharded run; a load keeps this
  // rank's ranges of the whole tensors. Either way a checkpoint resumes
  // under any dp size and zero_stage.
  CheckpointStaging(Backend& be, Chunks& chunks, std::vector<std::unique_ptr<AdamW>>& opts, int stage,
                    int tp_rank, bool writer, bool saves_planned, DataComm* zero_dp = nullptr);

  // Blocking save, collective over world; returns the committed step directory.
  std::string save(const std::string& dir, const TrainingState& st, int keep, ControlComm& world,
                   const std::string& recipe_text, const std::function<void(const char*)>& at_point);
  // Snapshot now, write in the background (the previous async save must be
  // committed); poll once per step to commit.
  void start_async(const std::string& dir, const TrainingState& st, int keep, ControlComm& world,
                   const std::string& recipe_text);
  std::string poll_async(ControlComm& world, bool wait) { return async_.poll(world, wait); }
  bool async_pending() const { return async_.pending(); }
  // Bytes this rank's file takes (0 on ranks that write none).
  size_t file_bytes();
  // Master weights and AdamW state from a checkpoint of any layout (the
  // caller refreshes the compute copies).
  void load(const std::string& step_dir);
  // Parameters only, from whole tensors by name (a Hugging Face import): each
  // rank copies its slice. Every missing or misshapen tensor is listed in
  // one CheckpointError naming `source`.
  void load_params(const std::map<std::string, GlobalTensor>& t, const std::string& source);

 private:
  // One tensor piece: where it lives in the backend, and how the checkpoint
  // names and slices it (its host pointer set when staged).
  struct Piece {
    TensorPiece t;
    Ref dev;
    size_t chunk = 0, offset = 0;  // where in which chunk's flat buffer
  };
  // This rank's pieces of params (0), AdamW m (1) or v (2); tied copies of
  // the embedding only when loading.
  std::vector<Piece> pieces(int which, bool loading);
  SaveGroups saved_groups(std::vector<Piece> (&all)[3]);
  // Copies the saved pieces to the host snapshot; returns them pointing
  // there. side_stream: queued on the side stream, complete at snapshot_done_.
  SaveGroups stage(bool side_stream = false);
  std::string shard_file() const;
  static size_t shard_elems(const SaveGroups& gs);
  void ensure_snapshot(size_t n);
  // ZeRO-1: whole m, v and fp32 weights on every rank of the group (collective).
  void gather_sharded();
  // ZeRO-1: this rank's ranges of a whole m or v (host, as the pieces lie).
  void keep_owned(int which, const std::vector<Piece>& ps);

  Backend::Event snapshot_done_;
  Backend& be_;
  Chunks& chunks_;
  std::vector<std::unique_ptr<AdamW>>& opts_;
  int stage_, tp_rank_;
  bool writer_;
  AsyncSaver async_;
  Buffer snapshot_;  // host staging, fp32: what a save writes from
  DataComm* zero_dp_;
  std::vector<Buffer> whole_[2];  // ZeRO-1: gathered m and v per chunk, for saves
};

}  // namespace trainer
