#include "planning/calibrate.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "parallel/mpi_communicator.h"
#include "runtime/elapsed.h"
#include "runtime/metrics.h"

namespace trainer {

namespace {

struct Samples {
  std::vector<double> ms;
  double work = 0;
};

void add_calls(std::map<std::string, Samples>& into, const std::vector<OpCall>& calls) {
  for (const OpCall& c : calls) {
    Samples& s = into[c.key];
    s.ms.push_back(c.ms);
    s.work = c.flops > 0 ? c.flops : c.bytes;
  }
}

// The per-step elementwise work of the optimizer at two sizes; the cost
// model scales them to a rank's parameter count.
void time_optimizer_ops(Backend& be, std::map<std::string, Samples>& into) {
  for (size_t n : {size_t(1) << 18, size_t(1) << 22}) {
    MeteredBackend m(&be);
    Buffer p = m.alloc(n, DType::F32, Mem::Params), g = m.alloc(n, DType::F32, Mem::Grads);
    Buffer mo = m.alloc(n, DType::F32, Mem::Optimizer), v = m.alloc(n, DType::F32, Mem::Optimizer);
    for (int rep = 0; rep < 4; rep++) {
      double sums = 0;
      m.sumsq_groups({{g.ref().f32(), n, 0}}, &sums, 1);
      m.adamw(p.ref().f32(), g.ref().f32(), mo.ref().f32(), v.ref().f32(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
              0.5f, 1.0f);
      m.zero(g.ref(), n);
      if (rep == 0) m.clear_calls();  // warm-up
    }
    add_calls(into, m.calls());
  }
}

double time_max_over(MPI_Comm world, const std::function<void()>& op) {
  MPI_Barrier(world);
  const auto t0 = Clock::now();
  op();
  double ms = ms_since(t0);
  MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, world);
  return ms;
}

// Median of 5 timed repetitions after a warm-up; the slowest rank's time each.
double median_time(MPI_Comm world, const std::function<void()>& op) {
  op();
  std::vector<double> t;
  for (int r = 0; r < 5; r++) t.push_back(time_max_over(world, op));
  return median_of(t);
}

// A fixed amount of compute: `reps` products of 192-square matrices.
class FixedWork {
 public:
  explicit FixedWork(Backend& be)
      : be_(be), a_(be.alloc(kN * kN, DType::F32, Mem::Temporaries)), b_(be.alloc(kN * kN, DType::F32, Mem::Temporaries)),
        c_(be.alloc(kN * kN, DType::F32, Mem::Temporaries)) {}
  double run(int reps) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; i++) be_.matmul(false, true, kN, kN, kN, 1.f, a_.ref(), b_.ref(), 0.f, c_.ref());
    be_.synchronize();
    return ms_since(t0);
  }

 private:
  static constexpr int kN = 192;
  Backend& be_;
  Buffer a_, b_, c_;
};

// One repetition of the fixed work timed on rank 0 alone (ms), on every rank.
double fixed_work_ms(MPI_Comm world, FixedWork& work, int rank) {
  double ms = 0;
  if (rank == 0) ms = std::max(1e-3, work.run(10) / 10);
  MPI_Bcast(&ms, 1, MPI_DOUBLE, 0, world);
  return ms;
}

}  // namespace

void wait_asleep(MPI_Comm world) {
  MPI_Request req;
  MPI_Ibarrier(world, &req);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

namespace {

// One round of the sharing measurement: rank 0's work alone (the others
// asleep), then for b = 1 .. size the same work on ranks 0 .. b-1 at once
// while the others wait in a receive from them (polling, as a pipeline
// stage waits for its message on Open MPI): the slowest busy rank's time
// against alone.
struct SharingRound {
  double alone = 0;
  std::vector<double> slow;  // [b - 1]
};

SharingRound sharing_round(MPI_Comm world, FixedWork& work, int reps, int rank, int size) {
  SharingRound r;
  if (rank == 0) r.alone = work.run(reps);
  wait_asleep(world);
  MPI_Bcast(&r.alone, 1, MPI_DOUBLE, 0, world);
  for (int b = 1; b <= size; b++) {
    MPI_Barrier(world);
    double ms = 0;
    char byte = 0;
    if (rank < b) {  // then hands over to its waiting ranks, as a stage sends to the next
      ms = work.run(reps);
      for (int w = rank + b; w < size; w += b) MPI_Send(&byte, 1, MPI_CHAR, w, 12, world);
    } else {
      MPI_Recv(&byte, 1, MPI_CHAR, rank % b, 12, world, MPI_STATUS_IGNORE);
    }
    MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, world);
    r.slow.push_back(std::max(1.0, ms / r.alone));
  }
  return r;
}

// The spread of timings of the same work taken at different moments: on a
// shared host whose speed moves while calibrating, the profile misprices.
void note_speed_variation(const std::vector<double>& ms, MachineProfile& p) {
  if (ms.size() < 2) return;
  const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
  if (*lo > 0) p.speed_variation = std::max(p.speed_variation, *hi / *lo - 1);
}

}  // namespace

void measure_sharing(MPI_Comm world, Backend& be, MachineProfile& p) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  FixedWork work(be);
  const double reps = std::max(5.0, std::round(50 / fixed_work_ms(world, work, rank)));  // about 50 ms alone
  // Rounds in turn, so that a slow spell of the shared host moves one
  // round's figures together; per busy count the median of eleven.
  std::vector<std::vector<double>> rounds(size);
  std::vector<double> alone;
  for (int i = 0; i < 11; i++) {
    const SharingRound r = sharing_round(world, work, (int)reps, rank, size);
    for (int b = 0; b < size; b++) rounds[b].push_back(r.slow[b]);
    alone.push_back(r.alone);
  }
  note_speed_variation(alone, p);
  p.busy_slowdown.clear();
  for (const std::vector<double>& r : rounds) p.busy_slowdown.push_back(median_of(r));
}

void measure_tp_sync(MPI_Comm world, Backend& be, const std::vector<int>& groups, MachineProfile& p) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  FixedWork work(be);
  const double rep_ms = fixed_work_ms(world, work, rank);
  std::vector<float> x(kSyncProbeBytes / sizeof(float), 1.f);
  for (int g : groups) {
    if (g < 2 || size % g) continue;
    MPI_Comm sub;
    MPI_Comm_split(world, rank / g, rank, &sub);  // tensor-parallel groups are consecutive ranks
    const double latency = std::max(0.0, p.comm_time("allreduce", g, kSyncProbeBytes));
    std::vector<SyncPoint>& pts = p.tp_sync[g];
    pts.clear();
    int last_reps = 0;
    for (double target : {0.3, 1.0, 3.0}) {  // ms of compute between two collectives, alone
      // Each point a longer segment than the one before, also when a loaded
      // host makes one repetition longer than the shorter targets.
      const int reps = std::max(last_reps + 1, (int)std::lround(target / rep_ms));
      last_reps = reps;
      const int iters = std::clamp((int)std::lround(60 / target), 20, 200);  // loops of about 60 ms alone
      auto loop = [&](bool sync) {
        return time_max_over(world, [&] {
          for (int i = 0; i < iters; i++) {
            work.run(reps);
            if (sync) MPI_Allreduce(MPI_IN_PLACE, x.data(), (int)x.size(), MPI_FLOAT, MPI_SUM, sub);
          }
        });
      };
      std::vector<double> extra;  // pairs of loops in turn, so that a slow spell hits both alike
      for (int pair = 0; pair < 9; pair++) {
        const double without = loop(false), with = loop(true);
        extra.push_back((with - without) / iters - latency);
      }
      pts.push_back({reps * rep_ms, std::max(0.0, median_of(extra))});
    }
    MPI_Comm_free(&sub);
  }
}

void measure_ops(Backend& be, const ModelConfig& c, const std::vector<ShardShape>& shards, MachineProfile& p,
                 const std::function<void(size_t, size_t)>& progress) {
  std::map<std::string, Samples> calls;
  // Passes over all the shapes in turn, so that a slow spell of the shared
  // host slows one pass of every shape alike rather than all of one shape's
  // (which would reorder the layouts); the median of the passes per key.
  constexpr int kPasses = 7;
  std::vector<double> pass_ms;  // how the machine's speed moved between passes
  for (int pass = 0; pass < kPasses; pass++) {
    double ms = 0;
    for (const ShardShape& shard : shards) {  // one layer with the embedding and the head: every shape a chunk computes
      const ChunkTrace t = trace_chunk(c, ChunkSpec{0, 1, true, true}, shard, &be, 1);
      for (const OpCall& op : t.ops) ms += op.ms;
      add_calls(calls, t.ops);
    }
    pass_ms.push_back(ms);
    if (progress) progress(pass + 1, kPasses);
  }
  time_optimizer_ops(be, calls);
  for (const auto& [key, s] : calls) p.ops[key] = {median_of(s.ms), s.work};
  note_speed_variation(pass_ms, p);
}

void measure_collectives(MPI_Comm world, const std::vector<int>& groups, const std::vector<double>& sizes, DType dt,
                         MachineProfile& p) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const size_t es = dtype_size(dt);
  for (int g : groups) {
    if (g < 2 || size % g) continue;
    MPI_Comm sub;
    MPI_Comm_split(world, rank / g, rank, &sub);
    {
      MpiDataComm comm(sub);
      for (double bytes : sizes) {
        const size_t n = std::max<size_t>(g, (size_t)(bytes / es) / g * g);  // a multiple of g elements
        std::vector<char> a(n * es), b(n * es);
        const Ref in(a.data(), dt), out(b.data(), dt);
        const double real = (double)n * es;
        p.collectives[comm_key("allreduce", g)].push_back(
            {real, median_time(world, [&] { comm.allreduce_sum(in, n); })});
        p.collectives[comm_key("reduce_scatter", g)].push_back(
            {real, median_time(world, [&] { comm.reduce_scatter_sum(in, out, n / g); })});
        p.collectives[comm_key("allgather", g)].push_back(
            {real, median_time(world, [&] { comm.allgather(in, out, n / g); })});
        // Context parallelism's two ways: an all-to-all of the whole buffer,
        // and a ring step, each rank sending it to the next and receiving
        // the previous one's (parallel/ring_attention.h).
        p.collectives[comm_key("alltoall", g)].push_back(
            {real, median_time(world, [&] { comm.wait(comm.start_alltoall(in, out, n / g)); })});
        p.collectives[comm_key("ring", g)].push_back({real, median_time(world, [&] {
          const int me = comm.rank();
          const DataComm::Handle sent = comm.isend(in, n, (me + 1) % g, 8),
                                 got = comm.irecv(out, n, (me + g - 1) % g, 8);
          comm.wait(sent);
          comm.wait(got);
        })});
        if (g == 2)  // pipeline messages: each rank sends one and receives one, as neighbouring stages do
          p.collectives[comm_key("send", 2)].push_back({real, median_time(world, [&] {
            const int peer = comm.rank() ^ 1;
            const DataComm::Handle sent = comm.isend(in, n, peer, 7), got = comm.irecv(out, n, peer, 7);
            comm.wait(sent);
            comm.wait(got);
          })});
      }
    }
    MPI_Comm_free(&sub);
  }
}

double measure_disk(const std::string& dir, double megabytes, int* error) {
  if (error) *error = 0;
  // A name of its own (mkostemp: O_CREAT | O_EXCL), so whatever sits in the
  // directory, a link to a user's file or a FIFO, is never opened: the probe
  // writes only into a regular file it has just made.
  std::string name = dir + "/.disk_probe.XXXXXX";
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = errno;
    return 0;
  }
  std::vector<char> block(1 << 20, 1);
  const auto t0 = Clock::now();
  bool ok = true;
  errno = 0;
  for (int i = 0; i < (int)megabytes && ok; i++) ok = ::write(fd, block.data(), block.size()) == (ssize_t)block.size();
  ok = ok && ::fsync(fd) == 0;
  if (!ok && error) *error = errno ? errno : ENOSPC;  // a short write: the disk filled
  const double s = ms_since(t0) / 1e3;
  ::close(fd);
  ::unlink(name.c_str());
  return ok && s > 0 ? megabytes / s : 0;
}

}  // namespace trainer
