#pragma once
// The process grid's shape: world = dp * pp * cp * tp, ranks ordered with tp
// fastest, then cp, then pp, then dp, so tensor-parallel peers are
// neighbours and context-parallel ones next to them (one node, as Megatron
// orders them). The dimensions are declared once, in that order
// (kGridDims): the rank count, a rank's coordinates, the derived groups and
// every communicator of parallel/process_grid.h walk that list. No MPI here:
// the recipe, the model's layout and the planners use it too.
#include <climits>
#include <compare>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace trainer {

struct GridShape {
  // The most ranks a job may have (each size's key and their product are
  // held to it by the recipe rules), so that every product of the sizes
  // fits an int wherever it is used after the recipe is read.
  static constexpr long kMaxRanks = 1048576;
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;  // context parallelism: each sequence cut over cp ranks (parallel/context_chunks.h)
  // Expert parallelism: a Mixture-of-Experts layer's experts split over ep
  // of the weight replicas (folded into dp x cp, as Megatron-Core's
  // parallel folding: not a dimension of the world). Replica rho holds the
  // experts of part rho % ep (expert_rank); those holding the same part
  // (rho / ep: expert_replica) sum their gradients.
  int ep = 1;
  long expert_replicas() const { return weight_replicas() / ep; }
  // In 64 bits, saturated at LONG_MAX: what the rules check, never wrapped.
  long ranks() const;
  long model_ranks() const;      // one model copy: tp x cp x pp (kModelDims)
  long weight_replicas() const;  // the ranks that hold the same weights: dp x cp (kWeightReplicaDims)
  long size_of(unsigned dims) const;  // the ranks a set of dimensions (GridDims) spans
  // The tokens of each sequence a rank holds: cp ranks share a sequence.
  int sequence_share(int seq_len) const { return seq_len / cp; }
  auto operator<=>(const GridShape&) const = default;
  static long saturated_product(std::initializer_list<long> sizes) {
    long p = 1;
    for (long s : sizes)
      if (__builtin_mul_overflow(p, s, &p)) return LONG_MAX;
    return p;
  }
};

struct GridCoords {
  int dp, pp, tp, cp;
};

// One dimension of the grid: its name (the recipe's parallel.NAME, the
// group's name in flight recordings), its size and a rank's coordinate.
// `named_at_1`: a layout's one-line texts name it even at size 1 (the three
// every user knows); the others only where they split the job. `doubled`:
// what twice the ranks on it does for a rank's memory, for the advice when
// a recipe does not fit (null: nothing).
struct GridDim {
  const char* name;
  int GridShape::*size;
  int GridCoords::*coord;
  bool named_at_1;
  const char* doubled;
};
// The dimensions, the fastest-varying first: world rank = the mixed-radix
// number of a rank's coordinates in this order.
inline constexpr GridDim kGridDims[] = {
    {"tp", &GridShape::tp, &GridCoords::tp, true, "twice the ranks per model copy"},
    {"cp", &GridShape::cp, &GridCoords::cp, false,
     "each sequence cut over twice the ranks: activations per rank about halved"},
    {"pp", &GridShape::pp, &GridCoords::pp, true, "twice the ranks per model copy"},
    {"dp", &GridShape::dp, &GridCoords::dp, true, nullptr},
};
inline constexpr int kGridDimCount = sizeof kGridDims / sizeof kGridDims[0];
// A set of dimensions, bit i for kGridDims[i].
using GridDims = unsigned;
// A dimension's place in kGridDims by name (-1: none), and its bit.
constexpr int grid_dim_index(const char* name) {
  for (int i = 0; i < kGridDimCount; i++) {
    const char* a = kGridDims[i].name;
    const char* b = name;
    while (*a && *a == *b) a++, b++;
    if (*a == *b) return i;
  }
  return -1;
}
// The same where the name must be one: an unknown name throws
// std::invalid_argument (a compile error where evaluated at compile time).
constexpr int known_grid_dim(const char* name) {
  const int i = grid_dim_index(name);
  if (i < 0) throw std::invalid_argument(std::string("no grid dimension named ") + name);
  return i;
}
constexpr GridDims grid_dim(const char* name) {
  const int i = grid_dim_index(name);
  return i < 0 ? 0 : 1u << i;
}
inline constexpr GridDims kAllGridDims = (1u << kGridDimCount) - 1;
// The derived groups: one model copy (every dimension but dp), and the
// ranks that hold the same weights (where weight gradients are summed and
// ZeRO shards): dp and cp, whose ranks read different tokens of one model.
inline constexpr GridDims kModelDims = kAllGridDims & ~grid_dim("dp");
inline constexpr GridDims kWeightReplicaDims = grid_dim("dp") | grid_dim("cp");
// The dimensions that split the weights (each rank holds 1/their product
// of them): one model copy's but the weight replicas'.
inline constexpr GridDims kWeightSplitDims = kModelDims & ~kWeightReplicaDims;
// The dimensions whose ranks share each layer's work and talk inside it
// (tp's collectives, cp's ring or all-to-all), not only between layers or
// steps: calibrate measures their groups' waits.
inline constexpr GridDims kLayerSplitDims = grid_dim("tp") | grid_dim("cp");
// The dimensions a layout's one-line texts name (GridDim::named_at_1).
inline GridDims named_dims(const GridShape& g) {
  GridDims out = 0;
  for (int i = 0; i < kGridDimCount; i++)
    if (kGridDims[i].named_at_1 || g.*kGridDims[i].size > 1) out |= 1u << i;
  return out;
}
// Whether a rank is the first of its group over `dims` (coordinate 0 in each).
inline bool first_in(const GridCoords& c, GridDims dims) {
  for (int i = 0; i < kGridDimCount; i++)
    if (dims >> i & 1 && c.*kGridDims[i].coord != 0) return false;
  return true;
}

inline long GridShape::size_of(unsigned dims) const {
  long p = 1;
  for (int i = 0; i < kGridDimCount; i++)
    if (dims >> i & 1) p = saturated_product({p, this->*kGridDims[i].size});
  return p;
}
inline long GridShape::ranks() const { return size_of(kAllGridDims); }
inline long GridShape::model_ranks() const { return size_of(kModelDims); }
inline long GridShape::weight_replicas() const { return size_of(kWeightReplicaDims); }

// Visits the dimensions the slowest first (dp, pp, cp, tp), the order in
// which users read and write a layout.
template <class Visit>
void each_grid_dim_slowest_first(Visit visit) {
  for (int i = kGridDimCount - 1; i >= 0; i--) visit(kGridDims[i], GridDims{1u} << i);
}

// Pure arithmetic, testable without MPI.
GridCoords grid_coords(const GridShape& g, int world_rank);
// The sizes as a layout is written, the slowest dimension first, of the
// dimensions in `dims`: "dp 2 x pp 1 x cp 1 x tp 2" (grid_sizes), "dp * pp
// * cp * tp" (grid_names) and "2 * 1 * 1 * 2" (grid_values).
std::string grid_sizes(const GridShape& g, GridDims dims = kAllGridDims, const char* sep = " x ");
std::string grid_names(GridDims dims = kAllGridDims, const char* sep = " * ");
std::string grid_values(const GridShape& g, GridDims dims = kAllGridDims, const char* sep = " * ");
// Where a rank sits, for messages: "dp 1, pp 0, cp 0, tp 1" (the slowest
// dimension first, as users read a layout).
std::string grid_position(const GridShape& g, int world_rank);

}  // namespace trainer
