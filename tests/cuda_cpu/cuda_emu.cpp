// The scheduler behind tests/cuda_cpu/cuda_emu.h: blocks run one after the
// other; the threads of a block are fibers on stacks of their own, switched
// by a few lines of x86-64 assembly (glibc's swapcontext also saves the
// signal mask, a system call per switch: 568 ns a round trip against 17 ns,
// and the attention kernels switch at every shuffle). Each round resumes every runnable thread
// once, in the chosen order, and each runs until it reaches a barrier, a
// shuffle or its end; then shuffles whose lanes have all arrived are
// completed, and the barrier is released once every live thread is at it.
// Under AddressSanitizer the switches are announced to it, so it follows the
// fibers' stacks.
#include "tests/cuda_cpu/cuda_emu.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define TRAINER_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA CPU tier's fiber switch is written for x86-64"
#endif

// trainer_emu_switch(&save_sp, load_sp): saves the callee-saved registers
// on the current stack, stores its stack pointer, loads the other one and
// returns into the fiber that stored it.
extern "C" void trainer_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text
  .globl trainer_emu_switch
  .type trainer_emu_switch, @function
trainer_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size trainer_emu_switch, .-trainer_emu_switch
  .popsection
)");

namespace trainer_emu {

namespace {

#ifdef TRAINER_EMU_ASAN
constexpr size_t kStackBytes = 512 << 10;  // ASan's redzones and fake frames need room
#else
constexpr size_t kStackBytes = 128 << 10;
#endif
constexpr size_t kPage = 4096;

enum class State { Ready, Barrier, Shuffle, Done };
const char* state_name(State s) {
  return s == State::Ready ? "running" : s == State::Barrier ? "at __syncthreads" : s == State::Shuffle ? "at a shuffle" : "exited";
}

struct Thread {
  void* sp = nullptr;
  void* fake_stack = nullptr;  // ASan's, while switched out
  char* stack = nullptr;       // lowest usable byte (a guard page lies below)
  uint3 idx{};
  State state = State::Ready;
  // The shuffle it waits at, and its result.
  unsigned mask = 0;
  ShflOp op = ShflOp::Xor;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
};

struct Scheduler {
  Order order = Order::Forward;
  unsigned seed = 1;
  std::mt19937 rng{1};

  std::vector<Thread> threads;
  std::vector<char*> stacks;  // kept across launches
  Thread* current = nullptr;
  void* sched_sp = nullptr;
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  const std::function<void()>* body = nullptr;
  uint3 block{};
  dim3 bdim, gdim;
  std::map<const void*, std::unique_ptr<char[]>> shared;
  std::string error;  // the first fault of the block
};
Scheduler& S() {
  static Scheduler s;
  return s;
}

char* new_stack() {
  void* m = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::runtime_error("CUDA CPU tier: no memory for fiber stacks");
  mprotect(m, kPage, PROT_NONE);  // an overflowing fiber faults instead of corrupting its neighbour
  return static_cast<char*>(m) + kPage;
}

[[noreturn]] void fiber_main();

// A fresh fiber: trainer_emu_switch pops six registers and returns into
// fiber_main with the stack aligned as after a call.
void prepare(Thread& t) {
#ifdef TRAINER_EMU_ASAN
  // The stack's last fiber was switched away from for good, never unwound:
  // its frames' redzones are still marked.
  __asan_unpoison_memory_region(t.stack, kStackBytes);
#endif
  auto* top = reinterpret_cast<uintptr_t*>(t.stack + kStackBytes);
  *--top = 0;  // fiber_main's (never used) return address
  *--top = reinterpret_cast<uintptr_t>(&fiber_main);
  for (int i = 0; i < 6; i++) *--top = 0;
  t.sp = top;
  t.state = State::Ready;
  t.fake_stack = nullptr;
}

void resume(Thread& t) {
  Scheduler& s = S();
  s.current = &t;
#ifdef TRAINER_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t.stack, kStackBytes);
  trainer_emu_switch(&s.sched_sp, t.sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  trainer_emu_switch(&s.sched_sp, t.sp);
#endif
  s.current = nullptr;
}

// From a thread back to the scheduler; returns when it is resumed.
void yield(bool exiting = false) {
  Scheduler& s = S();
  Thread& t = *s.current;
#ifdef TRAINER_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &t.fake_stack, s.sched_stack_bottom, s.sched_stack_size);
  trainer_emu_switch(&t.sp, s.sched_sp);
  __sanitizer_finish_switch_fiber(t.fake_stack, nullptr, nullptr);
#else
  (void)exiting;
  trainer_emu_switch(&t.sp, s.sched_sp);
#endif
}

void fail(const std::string& what) {
  if (S().error.empty()) S().error = what;
}

[[noreturn]] void fiber_main() {
  Scheduler& s = S();
#ifdef TRAINER_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.sched_stack_bottom, &s.sched_stack_size);
#endif
  try {
    (*s.body)();
  } catch (const std::exception& e) {
    fail(std::string("thread threw: ") + e.what());
  }
  s.current->state = State::Done;
  yield(true);
  std::abort();  // a finished fiber is never resumed
}

std::string where(int linear) {
  const Thread& t = S().threads[linear];
  std::ostringstream o;
  o << "thread (" << t.idx.x << "," << t.idx.y << "," << t.idx.z << ") (warp " << linear / 32 << " lane "
    << linear % 32 << ")";
  return o.str();
}

int source_lane(const Thread& t, int lane) {
  const int seg = lane / t.width * t.width;
  switch (t.op) {
    case ShflOp::Idx: return seg + ((t.arg % t.width) + t.width) % t.width;
    case ShflOp::Up: return lane - t.arg < seg ? lane : lane - t.arg;
    case ShflOp::Down: return lane + t.arg >= seg + t.width ? lane : lane + t.arg;
    case ShflOp::Xor: return (lane ^ t.arg) >= seg + t.width ? lane : lane ^ t.arg;
    case ShflOp::SyncWarp: return lane;
  }
  return lane;
}

// Completes the shuffles of warp `base / 32` whose named lanes have all
// arrived; faults a mask that names an exited or missing lane.
void resolve_warp(int base, int n) {
  Scheduler& s = S();
  for (int l = 0; l < 32 && base + l < n; l++) {
    Thread& t = s.threads[base + l];
    if (t.state != State::Shuffle) continue;
    if (!(t.mask >> l & 1u)) return fail(where(base + l) + ": a shuffle whose mask leaves out its own lane");
    bool all = true;
    for (int k = 0; k < 32; k++) {
      if (!(t.mask >> k & 1u)) continue;
      if (base + k >= n) return fail(where(base + l) + ": shuffle mask names lane " + std::to_string(k) + ", which the block does not have");
      const Thread& o = s.threads[base + k];
      if (o.state == State::Done)
        return fail(where(base + l) + ": shuffle mask names lane " + std::to_string(k) + ", which has exited");
      if (o.state != State::Shuffle) all = false;
      else if (o.mask != t.mask || o.op != t.op || o.width != t.width)
        return fail(where(base + l) + " and lane " + std::to_string(k) + " wait at different shuffles");
    }
    if (!all) continue;
    for (int k = 0; k < 32; k++) {
      if (!(t.mask >> k & 1u)) continue;
      Thread& o = s.threads[base + k];
      const int src = source_lane(o, k);
      if (!(t.mask >> src & 1u))
        return fail(where(base + k) + ": shuffle reads lane " + std::to_string(src) + ", which is not in the mask");
      o.result = s.threads[base + src].value;
    }
    for (int k = 0; k < 32; k++)
      if (t.mask >> k & 1u) s.threads[base + k].state = State::Ready;
  }
}

// Releases the barrier once every live thread waits at it.
void resolve_barrier(int n) {
  Scheduler& s = S();
  int at = 0, done = 0;
  for (const Thread& t : s.threads) {
    if (t.state == State::Ready || t.state == State::Shuffle) return;
    at += t.state == State::Barrier, done += t.state == State::Done;
  }
  if (!at) return;
  if (done) {
    int first_done = 0;
    while (s.threads[first_done].state != State::Done) first_done++;
    return fail("__syncthreads reached by " + std::to_string(at) + " threads while " + std::to_string(done) +
                " have exited (a barrier in divergent code), e.g. " + where(first_done));
  }
  for (int i = 0; i < n; i++) s.threads[i].state = State::Ready;
}

std::string states(int n) {
  std::map<std::string, int> count;
  for (int i = 0; i < n; i++) count[state_name(S().threads[i].state)]++;
  std::string out;
  for (auto& [k, v] : count) out += (out.empty() ? "" : ", ") + std::to_string(v) + " " + k;
  return out;
}

void run_block(int n) {
  Scheduler& s = S();
  s.shared.clear();
  for (int i = 0; i < n; i++) {
    Thread& t = s.threads[i];
    t.idx = {(unsigned)i % s.bdim.x, (unsigned)i / s.bdim.x % s.bdim.y, (unsigned)i / (s.bdim.x * s.bdim.y)};
    t.stack = s.stacks[i];
    prepare(t);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (s.order == Order::Reverse) std::reverse(order.begin(), order.end());
  for (;;) {
    if (s.order == Order::Random) std::shuffle(order.begin(), order.end(), s.rng);
    for (int i : order)
      if (s.threads[i].state == State::Ready) resume(s.threads[i]);
    if (!s.error.empty()) return;
    for (int base = 0; base < n && s.error.empty(); base += 32) resolve_warp(base, n);
    if (s.error.empty()) resolve_barrier(n);
    if (!s.error.empty()) return;
    bool done = true, ready = false;
    for (int i = 0; i < n; i++) done &= s.threads[i].state == State::Done, ready |= s.threads[i].state == State::Ready;
    if (done) return;
    if (!ready) return fail("deadlock: " + states(n));
  }
}

}  // namespace

void set_order(Order order, unsigned seed) {
  S().order = order;
  S().seed = seed;
  S().rng.seed(seed);
}

void set_order_from_env() {
  const char* v = std::getenv("TRAINER_EMU_ORDER");
  const std::string o = v ? v : "forward";
  if (o == "forward") return set_order(Order::Forward);
  if (o == "reverse") return set_order(Order::Reverse);
  if (o.rfind("random", 0) == 0)
    return set_order(Order::Random, o.size() > 7 ? (unsigned)std::stoul(o.substr(7)) : 1u);
  throw std::invalid_argument("TRAINER_EMU_ORDER=" + o + ": use forward, reverse or random[:SEED]");
}

std::string order_name() {
  const Scheduler& s = S();
  return s.order == Order::Forward ? "forward" : s.order == Order::Reverse ? "reverse" : "random:" + std::to_string(s.seed);
}

const uint3& thread_idx() { return S().current->idx; }
const uint3& block_idx() { return S().block; }
const dim3& block_dim() { return S().bdim; }
const dim3& grid_dim() { return S().gdim; }

void syncthreads() {
  Thread& t = *S().current;
  t.state = State::Barrier;
  yield();
}

uint64_t exchange(unsigned mask, ShflOp op, uint64_t bits, int arg, int width) {
  Thread& t = *S().current;
  if (width < 1 || width > 32 || (width & (width - 1))) fail(where((int)(&t - S().threads.data())) + ": shuffle width " + std::to_string(width));
  t.mask = mask, t.op = op, t.value = bits, t.arg = arg, t.width = width;
  t.state = State::Shuffle;
  yield();
  return t.result;
}

void* shared_bytes(const void* site, size_t bytes) {
  auto& slot = S().shared[site];
  if (!slot) {
    slot.reset(new char[bytes]);
    std::memset(slot.get(), 0xff, bytes);  // NaN as float and as double
  }
  return slot.get();
}

void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body) {
  Scheduler& s = S();
  const int n = (int)(block.x * block.y * block.z);
  if (n <= 0 || n > 1024) throw std::logic_error(std::string(kernel) + ": block of " + std::to_string(n) + " threads");
  if (!grid.x || !grid.y || !grid.z) throw std::logic_error(std::string(kernel) + ": empty grid");
  while ((int)s.stacks.size() < n) s.stacks.push_back(new_stack());
  s.threads.assign(n, Thread{});
  s.body = &body;
  s.bdim = block, s.gdim = grid;
  s.error.clear();
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        s.block = {x, y, z};
        run_block(n);
        if (!s.error.empty()) {
          std::ostringstream o;
          o << "CUDA CPU tier: kernel " << kernel << ", block (" << x << "," << y << "," << z << ") of a grid ("
            << grid.x << "," << grid.y << "," << grid.z << ") x (" << block.x << "," << block.y << "," << block.z
            << "), " << order_name() << " order: " << s.error;
          s.error.clear();
          throw std::runtime_error(o.str());
        }
      }
}

}  // namespace trainer_emu
