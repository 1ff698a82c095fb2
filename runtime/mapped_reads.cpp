#include "runtime/mapped_reads.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace trainer {

namespace {

// Fixed slots, written by watch/unwatch (at set-up, one thread) and read by
// the signal handler: no allocation, no locks. A slot is live while end > 0.
struct Watched {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0}, end{0};  // end stored last: 0 until the range is whole
  std::atomic<bool> lost{false};
};
constexpr int kSlots = 4096;
Watched g_slots[kSlots];

uintptr_t page_size() {
  static const uintptr_t p = (uintptr_t)sysconf(_SC_PAGESIZE);
  return p;
}

}  // namespace

int watch_mapping(const void* base, size_t bytes) {
  if (!base || bytes == 0) return -1;
  const uintptr_t page = page_size();
  for (int i = 0; i < kSlots; i++) {
    if (g_slots[i].used.exchange(true)) continue;  // taken
    g_slots[i].lost = false;
    g_slots[i].begin = (uintptr_t)base;
    g_slots[i].end = ((uintptr_t)base + bytes + page - 1) / page * page;  // the mapping covers whole pages
    return i;
  }
  return -1;
}

void unwatch_mapping(int handle) {
  if (handle < 0) return;
  g_slots[handle].end = 0;
  g_slots[handle].begin = 0;
  g_slots[handle].used = false;
}

bool mapping_lost(int handle) { return handle >= 0 && g_slots[handle].lost.load(std::memory_order_acquire); }

bool recover_mapped_read(const void* addr) {
  const uintptr_t a = (uintptr_t)addr, page = page_size();
  for (Watched& w : g_slots) {
    const uintptr_t b = w.begin, e = w.end;
    if (e == 0 || a < b || a >= e) continue;
    const uintptr_t from = a / page * page;
    // mmap is a plain system call here: zero pages in place of the file's
    // lost tail, so this read and any later one of the same mapping complete.
    if (mmap((void*)from, e - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
      return false;
    w.lost.store(true, std::memory_order_release);
    return true;
  }
  return false;
}

}  // namespace trainer
