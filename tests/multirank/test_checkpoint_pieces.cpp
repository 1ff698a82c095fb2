// Checkpoint pieces under mpirun -np 4, seen as tensor-parallel 2 x data-
// parallel 2: each rank writes the flat part of its tensor-parallel slices
// that ZeRO-1 would give it (cut at arbitrary elements), and every rank reads
// back whole tensors, slices along the other dimension, finer slices and flat
// parts of those. Each value read is compared with the formula that made it
// (a plain loop over global indices), not with what the writer held.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "parallel/mpi_communicator.h"
#include "runtime/errors.h"
#include "tests/multirank/mpi_test_main.h"

using namespace trainer;

namespace {

std::string g_data;  // a file in the test's shared temporary directory

// Value of element (i, j) of tensor t (1-D tensors: j = 0); exact in fp32.
float value(int t, size_t i, size_t j, size_t cols) { return (float)(t * 1000 + i * cols + j); }

struct Tensor {
  std::string name;
  std::vector<int> shape;
  int id;
};
const Tensor kA{"a", {6, 10}, 1}, kB{"b", {7}, 2}, kC{"c", {4, 6}, 3}, kD{"d", {5, 3}, 4};

size_t cols_of(const Tensor& t) { return t.shape.size() == 2 ? (size_t)t.shape[1] : 1; }

struct Held {
  TensorPiece piece;
  std::vector<float> data;
};

// Global (row, col) of element k of a piece's held part.
std::pair<size_t, size_t> global_of(const TensorPiece& p, size_t k, const Tensor& t) {
  const size_t R = (size_t)t.shape[0], C = cols_of(t);
  size_t cn = C, r0 = 0, c0 = 0;
  if (p.shard_dim == 0) r0 = p.start;
  if (p.shard_dim == 1) c0 = p.start, cn = p.numel / R;
  const size_t f = p.flat_lo + k;
  return {r0 + f / cn, c0 + f % cn};
}

// A piece of t: slice `start` of length `len` along dim (-1: whole), part
// [lo, lo + n) of it (n = 0: all), filled with the formula when fill.
Held make(const Tensor& t, int dim, int start, int len, size_t lo, size_t n, bool fill) {
  Held h;
  TensorPiece& p = h.piece;
  p.name = t.name, p.global_shape = t.shape, p.shard_dim = dim, p.start = dim >= 0 ? start : 0;
  const size_t R = (size_t)t.shape[0], C = cols_of(t);
  p.numel = dim < 0 ? R * C : dim == 0 ? (size_t)len * C : R * (size_t)len;
  p.flat_lo = lo, p.flat_n = n;
  h.data.assign(p.held(), fill ? 0.f : -1.f);
  for (size_t k = 0; fill && k < p.held(); k++) {
    const auto [i, j] = global_of(p, k, t);
    h.data[k] = value(t.id, i, j, C);
  }
  p.data = h.data.data();
  return h;
}

// Loads the pieces and counts values that differ from the formula.
int wrong_values(const std::string& step, std::vector<std::pair<Held, Tensor>> want) {
  std::vector<TensorPiece> ps;
  for (auto& [h, t] : want) {
    h.piece.data = h.data.data();  // copied into `want`
    ps.push_back(h.piece);
  }
  load_pieces(step, "param", ps);
  int wrong = 0;
  for (auto& [h, t] : want)
    for (size_t k = 0; k < h.piece.held(); k++) {
      const auto [i, j] = global_of(h.piece, k, t);
      wrong += h.data[k] != value(t.id, i, j, cols_of(t));
    }
  return wrong;
}

std::string save(const std::string& dir, MpiControlComm& world, bool drop_last_a) {
  const int r = world.rank(), tp = r % 2, dp = r / 2;
  std::vector<Held> held;
  // a: columns of tp, its 30 elements cut at 13; b: whole on each tp, cut at 4;
  // c: rows of tp, 12 elements cut at 5; d: whole, on rank 0 only, not cut.
  if (!(drop_last_a && r == 3)) held.push_back(make(kA, 1, 5 * tp, 5, dp ? 13 : 0, dp ? 17 : 13, true));
  held.push_back(make(kB, -1, 0, 0, dp ? 4 : 0, dp ? 3 : 4, true));
  held.push_back(make(kC, 0, 2 * tp, 2, dp ? 5 : 0, dp ? 7 : 5, true));
  if (r == 0) held.push_back(make(kD, -1, 0, 0, 0, 0, true));
  std::vector<TensorPiece> ps;
  for (Held& h : held) {
    h.piece.data = h.data.data();  // moved as `held` grew
    ps.push_back(h.piece);
  }
  TrainingState st;
  st.step = drop_last_a ? 2 : 1;
  const std::string file = "f_tp" + std::to_string(tp) + "_dp" + std::to_string(dp) + ".h5";
  return save_checkpoint(dir, st, true, file, {{"param", ps}}, 0, world);
}

std::string test_dir() { return std::filesystem::path(g_data).parent_path().string() + "/ckpt"; }

TEST(CheckpointPieces, FlatPartsReadBackUnderAnyCut) {
  MpiControlComm world(MPI_COMM_WORLD);
  const std::string step = save(test_dir(), world, false);
  const int k = world.rank() % 2, q = world.rank();
  // Whole tensors.
  EXPECT_EQ(wrong_values(step, {{make(kA, -1, 0, 0, 0, 0, false), kA}, {make(kB, -1, 0, 0, 0, 0, false), kB},
                                {make(kC, -1, 0, 0, 0, 0, false), kC}, {make(kD, -1, 0, 0, 0, 0, false), kD}}),
            0);
  // a by rows (stored by columns), part [4, 17) of the 30; a by 2 columns, part [1, 11) of 12.
  EXPECT_EQ(wrong_values(step, {{make(kA, 0, 3 * k, 3, 4, 13, false), kA}, {make(kA, 1, 2 * q, 2, 1, 10, false), kA}}), 0);
  // c one row per rank; b a part; d by columns.
  EXPECT_EQ(wrong_values(step, {{make(kC, 0, q, 1, 0, 0, false), kC}, {make(kB, -1, 0, 0, 2, 4, false), kB},
                                {make(kD, 1, q % 3, 1, 0, 0, false), kD}}),
            0);
}

TEST(CheckpointPieces, AMissingPartIsNamed) {
  MpiControlComm world(MPI_COMM_WORLD);
  const std::string step = save(test_dir(), world, true);
  try {
    wrong_values(step, {{make(kA, -1, 0, 0, 0, 0, false), kA}});
    ADD_FAILURE() << "a load with 17 of a's 60 values missing succeeded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("a (only 43 of 60 values found)"), std::string::npos) << e.what();
  }
  try {
    Held e = make(kD, -1, 0, 0, 0, 0, false);
    e.piece.name = "e";
    wrong_values(step, {{std::move(e), kD}});
    ADD_FAILURE() << "a tensor absent from the checkpoint loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("e (not in the checkpoint)"), std::string::npos) << e.what();
  }
}

}  // namespace

int main(int argc, char** argv) { return trainer::testing::run_mpi_tests(argc, argv, 4, 1000, 64, 'a', &g_data); }
