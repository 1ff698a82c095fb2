#pragma once
// The per-rank batch loader. Optimizer step s consumes global stream
// positions [cursor + s*G, cursor + (s+1)*G) with G = global_batch(); DP rank r
// takes the r-th of dp equal slices and cuts it into micro-batches. A
// background thread keeps up to `prefetch` micro-batches ready in a bounded
// queue; prefetch = 0 loads on the caller's thread. Either way the batches,
// and their order, are the same.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/blend.h"
#include "data/dataset.h"
#include "data/sample_order.h"

namespace trainer {

struct LoaderConfig {
  int micro_batch = 1;    // sequences per forward/backward
  int micro_batches = 1;  // micro-batches per rank and optimizer step (the recipe's accumulation)
  int dp_rank = 0, dp_size = 1;
  // Sequences per optimizer step, all DP ranks together.
  uint64_t global_batch() const { return (uint64_t)micro_batch * micro_batches * dp_size; }
  int prefetch = 2;
  uint64_t seed = 0;
  bool shuffle = true;
  uint64_t start_position = 0;  // global stream position of the first step
};

struct Batch {
  std::vector<int32_t> inputs, targets;  // [micro_batch * seq_len]
  uint64_t first_position = 0;           // stream position of its first sequence
};

class Loader {
 public:
  Loader(const TokenDataset& ds, const LoaderConfig& cfg) : Loader(Blend::single(ds), cfg) {}
  // A blend's sources each keep their own epochs and permutations; a single
  // source reads exactly as a plain dataset does.
  Loader(const Blend& data, const LoaderConfig& cfg);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Next micro-batch of this rank; rethrows a DataError from the worker.
  Batch next();
  // Stream position where the next unconsumed optimizer step starts: the
  // cursor a checkpoint saves.
  uint64_t cursor() const;

 private:
  Batch load(uint64_t index);  // index: micro-batch number since start
  void worker();

  void read(uint64_t position, int32_t* inputs, int32_t* targets);

  Blend data_;
  LoaderConfig cfg_;
  std::vector<SampleOrder> orders_;  // one per source
  BlendOrder blend_;
  uint64_t consumed_ = 0;  // micro-batches handed out

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace trainer
