#pragma once
// What a checkpoint holds of one rank and how it gets there: this rank's
// pieces of the fp32 master weights and of AdamW's m and v (ckpt/checkpoint.h
// names and slices them), written by the first data-parallel rank of each
// (pipeline stage, tensor-parallel rank) position, or under ZeRO (any
// stage) by every rank (its part); and the way back when resuming.
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
#include "engine/unit_weights.h"
#include "model/adamw.h"
#include "runtime/backend.h"

namespace trainer {

class CheckpointStaging {
 public:
  // writer: this rank writes a file (its position's first data-parallel
  // rank; under ZeRO every rank, for its part); saves_planned: allocate
  // the host snapshot now (touching 1.5 GB of new pages costs seconds in a
  // VM: a blocking 124M save measured 10.6 s instead of 8.1 s when it happened
  // during the first save); else at the first save (a preemption's).
  // zero_dp: under ZeRO, the data-parallel group AdamW's state is sharded
  // over (null: every rank holds all of it). Every rank of the group then
  // writes a file of its own: the flat parts of the fp32 weights, m and v it
  // updates (AdamW::owned: ZeRO-1's block, the last rank also the tail
  // every rank keeps; ZeRO-2's slice of each unit), so nothing is gathered
  // for a save. A load reads whole weights and this
  // rank's ranges of m and v, from a checkpoint of any dp size and zero stage.
  // weights: under ZeRO-3, where the master weights are (only the owned
  // ranges, loaded as m and v are), else null (whole, in each chunk).
  // expert_part: under expert parallelism, the part of each layer's experts
  // this rank holds; a writer of part p > 0 writes its experts only (the
  // part-0 writer the rest), in a file of its own. Experts keep their
  // global names: a load finds them at any ep.
  CheckpointStaging(Backend& be, Chunks& chunks, std::vector<std::unique_ptr<AdamW>>& opts, int stage,
                    int tp_rank, bool writer, bool saves_planned, DataComm* zero_dp = nullptr,
                    UnitWeights* weights = nullptr, int expert_part = 0);

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
  };
  // A stretch [lo, hi) of a chunk's flat parameter layout, held in buf from
  // buf_at on.
  struct Span {
    size_t lo, hi;
    Buffer* buf;
    size_t buf_at;
  };
  // This rank's pieces of params (0), AdamW m (1) or v (2); tied copies of
  // the embedding only when loading.
  std::vector<Piece> pieces(int which, bool loading);
  // ZeRO: the stretches of chunk c that pieces() cuts tensors to.
  std::vector<Span> spans(int which, bool loading, size_t c);
  bool sharded() const { return zero_dp_ != nullptr; }
  SaveGroups saved_groups(std::vector<Piece> (&all)[3]);
  // Copies the saved pieces to the host snapshot; returns them pointing
  // there. side_stream: queued on the side stream, complete at snapshot_done_.
  SaveGroups stage(bool side_stream = false);
  std::string shard_file() const;
  static size_t shard_elems(const SaveGroups& gs);
  void ensure_snapshot(size_t n);

  Backend::Event snapshot_done_;
  Backend& be_;
  Chunks& chunks_;
  std::vector<std::unique_ptr<AdamW>>& opts_;
  int stage_, tp_rank_;
  bool writer_;
  int expert_part_;
  AsyncSaver async_;
  Buffer snapshot_;  // host staging, fp32: what a save writes from
  DataComm* zero_dp_;
  UnitWeights* weights_;
};

}  // namespace trainer
