// MemoryPreemption (memory_preemption.h), the tenants' states: what the daemon's operations
// did to them, when a suspended tenant resumes (rule 5), and what the daemon reads back. Whom
// to suspend for a request is memory_preemption.cpp's.
#include "scheduler/preemption/memory_preemption.h"

#include <algorithm>

namespace cuslice {

void MemoryPreemption::moved(uint32_t tenant, uint64_t bytes) {
  if (tenant < books_.size() && books_[tenant].fast && !books_[tenant].escalating) books_[tenant].away = bytes;
}

void MemoryPreemption::escalate(uint32_t tenant) {
  if (tenant >= books_.size() || !books_[tenant].fast) return;
  books_[tenant].state = SuspendState::kSuspending;
  books_[tenant].escalating = true;
}

void MemoryPreemption::suspended(uint32_t tenant, Nanos now) {
  if (tenant >= books_.size() || books_[tenant].state != SuspendState::kSuspending) return;
  if (books_[tenant].escalating) {
    // The checkpoint took the rest: the tenant is off the card as any checkpointed one.
    books_[tenant].fast = false;
    books_[tenant].escalating = false;
    books_[tenant].away = 0;
  }
  books_[tenant].state = SuspendState::kSuspended;
  books_[tenant].suspended_at = now;
  books_[tenant].fits_since.reset();
}

void MemoryPreemption::suspend_refused(uint32_t tenant, std::string reason) {
  if (!valid(tenant)) return;
  Book& book = books_[tenant];
  if (book.escalating) {
    // The rest stays on the card; what moved the fast way stays moved.
    book.state = SuspendState::kSuspended;
    book.escalating = false;
    book.no_escalation = true;
    book.reason = std::move(reason);
    return;
  }
  book.state = SuspendState::kRunning;
  book.reason = std::move(reason);
  book.refused_pids.clear();
  for (const PreemptProcess& p : tenants_[tenant].processes) book.refused_pids.push_back(p.pid);
}

void MemoryPreemption::resumed(uint32_t tenant, Nanos /*now*/) {
  if (tenant >= books_.size() || books_[tenant].state != SuspendState::kResuming) return;
  books_[tenant] = Book{};
}

void MemoryPreemption::resume_deferred(uint32_t tenant, std::string reason) {
  if (tenant >= books_.size() || books_[tenant].state != SuspendState::kResuming) return;
  books_[tenant].state = SuspendState::kSuspended;
  books_[tenant].reason = std::move(reason);
  books_[tenant].fits_since.reset();
}

void MemoryPreemption::failed(uint32_t tenant, std::string reason) {
  if (tenant >= books_.size()) return;
  books_[tenant].state = SuspendState::kFailed;
  books_[tenant].reason = std::move(reason);
  books_[tenant].fits_since.reset();
}

void MemoryPreemption::adopt_suspended(uint32_t tenant, Nanos now, std::string reason) {
  if (!valid(tenant)) return;
  Book& book = books_[tenant];
  book = Book{};
  book.state = SuspendState::kSuspended;
  book.suspended_at = now;
  book.reason = std::move(reason);
}

void MemoryPreemption::hold(uint32_t tenant, bool held) {
  if (tenant < books_.size()) books_[tenant].held = held;
}

std::vector<uint32_t> MemoryPreemption::resumption_order() const {
  std::vector<uint32_t> waiting;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (valid(t) && books_[t].state == SuspendState::kSuspended && !books_[t].held) waiting.push_back(t);
  }
  std::sort(waiting.begin(), waiting.end(), [&](uint32_t a, uint32_t b) {
    if (tenants_[a].priority != tenants_[b].priority) return tenants_[a].priority > tenants_[b].priority;
    if (books_[a].suspended_at != books_[b].suspended_at) return books_[a].suspended_at < books_[b].suspended_at;
    return a < b;
  });
  return waiting;
}

bool MemoryPreemption::fits_back(uint32_t tenant, const std::vector<uint64_t>& room) const {
  for (uint32_t g = 0; g < room.size(); ++g) {
    const uint64_t need = freeing_on(tenant, g);
    if (need != 0 && need + params_.resume_margin > room[g]) return false;
  }
  return true;
}

MemoryPreemption::Resumption MemoryPreemption::step(const std::vector<GpuMemory>& gpus,
                                                    const std::vector<uint64_t>& pending, Nanos now) {
  Resumption out;
  // What each GPU can give: free, less what waiting allocations need.
  std::vector<uint64_t> room(gpus.size());
  for (size_t g = 0; g < gpus.size(); ++g) {
    const uint64_t want = g < pending.size() ? pending[g] : 0;
    room[g] = gpus[g].free > want ? gpus[g].free - want : 0;
  }
  for (uint32_t t : resumption_order()) {
    Book& book = books_[t];
    if (!fits_back(t, room)) {
      book.fits_since.reset();
      // Room may come without an event of the daemon's (a process without the hook ends):
      // looked at again a hold-off later.
      out.wake_at = std::min(out.wake_at, now + std::max(params_.resume_holdoff, kRecheck));
      continue;
    }
    if (!book.fits_since) book.fits_since = now;
    const Nanos due = *book.fits_since + params_.resume_holdoff;
    if (due > now) {
      out.wake_at = std::min(out.wake_at, due);
      continue;
    }
    for (uint32_t g = 0; g < room.size(); ++g) room[g] -= freeing_on(t, g);
    book.state = SuspendState::kResuming;
    book.fits_since.reset();
    out.resume.push_back(t);
  }
  return out;
}

SuspendState MemoryPreemption::state(uint32_t tenant) const {
  return tenant < books_.size() ? books_[tenant].state : SuspendState::kRunning;
}

const std::string& MemoryPreemption::reason(uint32_t tenant) const {
  static const std::string kNone;
  return tenant < books_.size() ? books_[tenant].reason : kNone;
}

std::vector<uint64_t> MemoryPreemption::bytes(uint32_t tenant) const {
  std::vector<uint64_t> out;
  if (!valid(tenant)) return out;
  for (const PreemptProcess& p : tenants_[tenant].processes) {
    if (out.size() < p.gpu_bytes.size()) out.resize(p.gpu_bytes.size());
    for (size_t g = 0; g < p.gpu_bytes.size(); ++g) out[g] += p.gpu_bytes[g];
  }
  return out;
}

uint64_t MemoryPreemption::off_card(uint32_t tenant, uint32_t gpu, uint64_t held) const {
  if (tenant >= books_.size()) return 0;
  const Book& book = books_[tenant];
  if (book.state != SuspendState::kSuspended) return 0;
  if (!book.fast) return held;
  return gpu == book.fast_gpu ? std::min(held, book.away) : 0;
}

bool MemoryPreemption::fast(uint32_t tenant) const { return tenant < books_.size() && books_[tenant].fast; }

MemoryPreemption::Nanos MemoryPreemption::suspended_at(uint32_t tenant) const {
  return tenant < books_.size() ? books_[tenant].suspended_at : Nanos{0};
}

}  // namespace cuslice
