#pragma once
// A few steps of `trainer train`'s own code in a scratch directory, inside
// the running process: what `trainer smoke` measures and the real step
// `trainer calibrate` anchors the cost model on. Nothing goes into the
// recipe's run or checkpoint directories.
#include <string>
#include <vector>

namespace trainer {

struct Scratch {
  std::string dir, data;  // data: the synthetic shard, or "" for the recipe's own
  std::string note;       // why the data is synthetic when it was not asked for
};

// Collective: rank 0 makes a directory under $TMPDIR (and random tokens for
// `steps` steps when `synthetic` or the recipe's data cannot be read);
// every rank gets it. Returns 0, or the exit code of what failed (rank 0
// printed why).
int shared_scratch(const std::string& recipe, const std::vector<std::string>& overrides, bool synthetic, int rank,
                   int size, long steps, Scratch& out);

// The arguments of the `trainer train` run inside: the recipe, the
// overrides, then what makes it a scratch run of `steps` steps that logs
// every step and writes no checkpoint.
std::vector<std::string> train_args(const std::string& recipe, const std::vector<std::string>& overrides,
                                    const Scratch& s, long steps);

// `trainer train` with these arguments, in this process (collective).
int run_inside(const std::vector<std::string>& args, int rank, int size);

}  // namespace trainer
