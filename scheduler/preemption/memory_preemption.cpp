#include "scheduler/preemption/memory_preemption.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace cuslice {
namespace {

const char* claim(const PreemptProcess& p) { return describe_claim(p); }

}  // namespace

const char* describe_claim(const PreemptProcess& p) {
  return p.ipc ? "CUDA IPC memory" : p.managed ? "managed memory" : p.mps ? "an MPS connection" : nullptr;
}

std::string describe_claims(const PreemptTenant& tenant) {
  std::string text;
  size_t count = 0;
  for (const PreemptProcess& p : tenant.processes) {
    const char* what = claim(p);
    if (what == nullptr || count++ > 0) continue;
    text = "process " + std::to_string(p.pid) + " says it holds " + what +
           ", which the driver's checkpoint does not support";
  }
  if (count > 1) text += " (and " + std::to_string(count - 1) + (count > 2 ? " more processes)" : " more process)");
  return text;
}

const char* to_string(SuspendState state) {
  switch (state) {
    case SuspendState::kRunning: return "running";
    case SuspendState::kSuspending: return "suspending";
    case SuspendState::kSuspended: return "suspended";
    case SuspendState::kResuming: return "resuming";
    case SuspendState::kFailed: return "failed";
  }
  return "?";
}

std::string describe_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0 || value >= 100) {
    std::snprintf(text, sizeof text, "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

void MemoryPreemption::update(std::vector<PreemptTenant> tenants) {
  tenants_ = std::move(tenants);
  books_.resize(tenants_.size());
  for (size_t t = 0; t < tenants_.size(); ++t) {
    const PreemptTenant& tenant = tenants_[t];
    Book& book = books_[t];
    if (!tenant.present || tenant.processes.empty()) {
      book = Book{};
      continue;
    }
    // A refusal holds while a process it was about is still there.
    if (!book.refused_pids.empty()) {
      const bool still = std::any_of(tenant.processes.begin(), tenant.processes.end(), [&](const auto& p) {
        return std::find(book.refused_pids.begin(), book.refused_pids.end(), p.pid) != book.refused_pids.end();
      });
      if (!still) {
        book.refused_pids.clear();
        if (book.state == SuspendState::kRunning) book.reason.clear();
      }
    }
  }
}

uint64_t MemoryPreemption::bytes_on(uint32_t tenant, uint32_t gpu) const {
  uint64_t sum = 0;
  for (const PreemptProcess& p : tenants_[tenant].processes) {
    if (gpu < p.gpu_bytes.size()) sum += p.gpu_bytes[gpu];
  }
  return sum;
}

uint64_t MemoryPreemption::freeing_on(uint32_t tenant, uint32_t gpu) const {
  const Book& book = books_[tenant];
  if (book.escalating) return left_on(tenant, gpu);
  if (book.fast) return gpu == book.fast_gpu ? book.away : 0;
  return bytes_on(tenant, gpu);
}

uint64_t MemoryPreemption::left_on(uint32_t tenant, uint32_t gpu) const {
  const Book& book = books_[tenant];
  const uint64_t held = bytes_on(tenant, gpu);
  const uint64_t away = book.fast && gpu == book.fast_gpu ? book.away : 0;
  return held > away ? held - away : 0;
}

uint64_t MemoryPreemption::movable_on(uint32_t tenant, uint32_t gpu) const {
  uint64_t sum = 0;
  for (const PreemptProcess& p : tenants_[tenant].processes) {
    if (!p.movable) return 0;  // the tenant's processes are held together, so all must move
    const uint64_t on = gpu < p.gpu_bytes.size() ? p.gpu_bytes[gpu] : 0;
    sum += std::min(on, p.movable_bytes);
  }
  return sum;
}

uint64_t MemoryPreemption::pool_of(uint32_t tenant) const {
  uint64_t sum = 0;
  for (const PreemptProcess& p : tenants_[tenant].processes) sum += p.pool_bytes;
  return sum;
}

uint64_t MemoryPreemption::host_bytes(uint32_t tenant, uint64_t move) const {
  if (move > 0) {
    const uint64_t pool = pool_of(tenant);
    return move > pool ? move - pool : 0;  // pinned already: the host gives nothing more
  }
  const Book& book = books_[tenant];
  const uint64_t all = total_bytes(tenant) - stopped_bytes(tenant, kAllGpus);
  const uint64_t away = book.fast ? book.away : 0;
  return all > away ? all - away : 0;
}

uint64_t MemoryPreemption::total_bytes(uint32_t tenant) const {
  uint64_t sum = 0;
  for (const PreemptProcess& p : tenants_[tenant].processes) {
    sum = std::accumulate(p.gpu_bytes.begin(), p.gpu_bytes.end(), sum);
  }
  return sum;
}

uint64_t MemoryPreemption::start_of(uint32_t tenant) const {
  uint64_t start = UINT64_MAX;
  for (const PreemptProcess& p : tenants_[tenant].processes) start = std::min(start, p.start_time);
  return start;
}

std::string MemoryPreemption::claims(uint32_t tenant) const {
  return valid(tenant) ? describe_claims(tenants_[tenant]) : std::string();
}

uint64_t MemoryPreemption::stopped_bytes(uint32_t tenant, uint32_t gpu) const {
  if (!params_.stop_unsuspendable) return 0;
  uint64_t sum = 0;
  for (const PreemptProcess& p : tenants_[tenant].processes) {
    if (claim(p) == nullptr) continue;
    if (gpu == kAllGpus) {
      sum = std::accumulate(p.gpu_bytes.begin(), p.gpu_bytes.end(), sum);
    } else if (gpu < p.gpu_bytes.size()) {
      sum += p.gpu_bytes[gpu];
    }
  }
  return sum;
}

std::optional<std::string> MemoryPreemption::unsuspendable(uint32_t tenant) const {
  // The tenant's own word, taken only when the operator said to (`unsuspendable: keep`).
  if (!params_.stop_unsuspendable) {
    if (std::string said = claims(tenant); !said.empty()) return said;
  }
  const Book& book = books_[tenant];
  if (!book.refused_pids.empty()) return book.reason;
  return std::nullopt;
}

Verdict MemoryPreemption::request(const AllocationRequest& request, const std::vector<GpuMemory>& gpus,
                                  uint64_t host_available, Nanos /*now*/) {
  Verdict verdict;
  if (!valid(request.tenant) || request.gpu >= gpus.size()) {
    verdict.reason = "unknown tenant or GPU";
    return verdict;
  }
  const PreemptTenant& asker = tenants_[request.tenant];
  const uint32_t gpu = request.gpu;
  const uint64_t free = gpus[gpu].free;
  const std::string what = asker.name + "'s allocation of " + describe_bytes(request.bytes) + " on GPU " +
                           std::to_string(gpu);
  if (books_[request.tenant].state != SuspendState::kRunning) {
    verdict.reason = what + ": the tenant itself is " + to_string(books_[request.tenant].state);
    return verdict;
  }
  if (request.bytes <= free) {
    verdict.kind = Verdict::Kind::kFits;
    verdict.reason = what + " fits";
    return verdict;
  }

  // Memory already on its way: suspensions in flight free theirs.
  uint64_t coming = 0, moving_in_flight = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (!valid(t) || books_[t].state != SuspendState::kSuspending) continue;
    coming += freeing_on(t, gpu);
    moving_in_flight += books_[t].fast && !books_[t].escalating ? host_bytes(t, books_[t].away) : host_bytes(t, 0);
  }
  if (free + coming >= request.bytes) {
    verdict.kind = Verdict::Kind::kWait;
    verdict.coming_free = coming;
    verdict.reason = what + " waits for the suspensions in progress";
    return verdict;
  }

  std::vector<std::string> skipped;
  bool resuming_candidate = false;  // a tenant being resumed may be suspended again once it runs
  const std::vector<uint32_t> ordered = candidates(request, skipped, resuming_candidate);
  const uint64_t missing = request.bytes - free - coming;
  uint64_t freed = 0;
  std::vector<uint32_t> chosen = choose(ordered, gpu, missing, freed);
  auto with_skipped = [&](std::string text) {
    if (!skipped.empty()) {
      text += "; not suspended:";
      for (size_t i = 0; i < skipped.size(); ++i) text += (i ? ", " : " ") + skipped[i];
    }
    return text;
  };
  if (freed < missing) {
    if (resuming_candidate) {
      verdict.kind = Verdict::Kind::kWait;
      verdict.coming_free = coming;
      verdict.reason = with_skipped(what + " waits for a tenant being resumed, which may then be suspended");
      return verdict;
    }
    verdict.reason = with_skipped(what + " cannot fit: " + describe_bytes(missing) +
                                  " more is needed and the tenants that may give way hold " +
                                  describe_bytes(freed));
    return verdict;
  }
  // Rule 6: who moves only its part, the fast way.
  std::vector<uint64_t> move(chosen.size(), 0);
  uint64_t left = missing, moving = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const uint32_t t = chosen[i];
    const uint64_t part = std::min(available_on(t, gpu), left);
    left -= part;
    const Book& book = books_[t];
    // Once more the fast way for a tenant suspended so already, on the same GPU: its hooks may
    // have moved a little less than was missing. Only once: a second time, the checkpoint.
    const bool again = book.state == SuspendState::kSuspended && book.fast && book.topups == 0 && book.fast_gpu == gpu;
    if (params_.fast && (book.state == SuspendState::kRunning || again)) {
      // A little more than the part: memory the driver takes beside an allocation is not in
      // anybody's count (and the hooks move whole chunks anyway).
      const uint64_t slack = std::max<uint64_t>(part / 100, uint64_t{64} << 20);
      const uint64_t can = movable_on(t, gpu);
      if (can >= part) move[i] = std::min(can, part + slack);
    }
    moving += host_bytes(t, move[i]);
  }
  if (moving_in_flight + moving + params_.host_reserve > host_available) {
    verdict.reason = with_skipped(what + " cannot fit: suspending would move " + describe_bytes(moving) +
                                  " to host memory (" + describe_bytes(moving_in_flight) +
                                  " more is on its way), and the host has " + describe_bytes(host_available) +
                                  " available, " + describe_bytes(params_.host_reserve) + " of which stays free");
    return verdict;
  }
  const std::string names = commit(chosen, move, gpu, what, verdict);
  verdict.kind = Verdict::Kind::kSuspend;
  verdict.suspend = std::move(chosen);
  verdict.move = std::move(move);
  verdict.coming_free = coming + freed;
  verdict.moving = moving;
  verdict.reason = with_skipped("suspending " + names + " for " + what);
  return verdict;
}

std::vector<uint32_t> MemoryPreemption::candidates(const AllocationRequest& request, std::vector<std::string>& skipped,
                                                   bool& resuming) const {
  // Rule 1: who may give way; rule 3: who never does, and why.
  const PreemptTenant& asker = tenants_[request.tenant];
  const uint32_t gpu = request.gpu;
  std::vector<uint32_t> out;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (!valid(t) || t == request.tenant) continue;
    const PreemptTenant& tenant = tenants_[t];
    if (!tenant.preemptible || available_on(t, gpu) == 0) continue;
    if (!asker.guaranteed && tenant.priority >= asker.priority) continue;
    const SuspendState state = books_[t].state;
    // Suspended the fast way, with memory left on this GPU: the checkpoint may take the rest
    // (rule 6), after the running tenants of its rank.
    if (state == SuspendState::kSuspended && books_[t].fast && !books_[t].no_escalation) {
      if (auto why = unsuspendable(t)) {
        skipped.push_back(tenant.name + " (" + *why + ")");
        continue;
      }
      out.push_back(t);
      continue;
    }
    if (state == SuspendState::kResuming) {
      resuming = true;
      continue;
    }
    if (state == SuspendState::kFailed) {
      skipped.push_back(tenant.name + " (" + books_[t].reason + ")");
      continue;
    }
    if (state != SuspendState::kRunning) continue;
    if (auto why = unsuspendable(t)) {
      skipped.push_back(tenant.name + " (" + *why + ")");
      continue;
    }
    out.push_back(t);
  }
  // Rule 2.
  std::sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) {
    const PreemptTenant& x = tenants_[a];
    const PreemptTenant& y = tenants_[b];
    if (x.priority != y.priority) return x.priority < y.priority;
    const bool sa_ = books_[a].state == SuspendState::kSuspended, sb_ = books_[b].state == SuspendState::kSuspended;
    if (sa_ != sb_) return !sa_;
    const uint64_t sa = start_of(a), sb = start_of(b);
    if (sa != sb) return sa > sb;
    return a < b;
  });
  return out;
}

std::vector<uint32_t> MemoryPreemption::choose(const std::vector<uint32_t>& candidates, uint32_t gpu, uint64_t missing,
                                               uint64_t& freed) const {
  std::vector<uint32_t> chosen;
  freed = 0;
  for (uint32_t t : candidates) {
    if (freed >= missing) break;
    chosen.push_back(t);
    freed += available_on(t, gpu);
  }
  if (freed < missing) return chosen;
  // Those taken early that the later ones made unnecessary give way no more.
  for (size_t i = chosen.size(); i-- > 0;) {
    const uint64_t own = available_on(chosen[i], gpu);
    if (freed - own >= missing) {
      freed -= own;
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return chosen;
}

std::string MemoryPreemption::commit(const std::vector<uint32_t>& chosen, const std::vector<uint64_t>& move,
                                     uint32_t gpu, const std::string& what, Verdict& verdict) {
  std::string names;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const uint32_t t = chosen[i];
    Book& book = books_[t];
    if (move[i] > 0) {
      // The fast way: no process is stopped, nothing is checkpointed.
      const bool again = book.state == SuspendState::kSuspended;
      names += (names.empty() ? "" : ", ") + tenants_[t].name + " (" + describe_bytes(move[i]) + (again ? " more" : "") +
               " of " + describe_bytes(bytes_on(t, gpu)) + ", moved by its processes)";
      book.state = SuspendState::kSuspending;
      book.reason = "suspended for " + what;
      book.fits_since.reset();
      book.fast = true;
      book.fast_gpu = gpu;
      book.away = again ? book.away + move[i] : move[i];
      if (again) ++book.topups;
      continue;
    }
    const bool rest = book.state == SuspendState::kSuspended && book.fast;
    names += (names.empty() ? "" : ", ") + tenants_[t].name + " (" + describe_bytes(available_on(t, gpu));
    if (rest) names += " more, checkpointed";
    if (params_.stop_unsuspendable && !claims(t).empty()) {
      names += "; stopping what cannot be suspended: " + claims(t);
      for (const PreemptProcess& p : tenants_[t].processes)
        if (claim(p) != nullptr) verdict.stop.push_back(p.pid);
    }
    names += ")";
    book.state = SuspendState::kSuspending;
    book.reason = "suspended for " + what;
    book.fits_since.reset();
    book.escalating = rest;
  }
  return names;
}

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

MemoryPreemption::Resumption MemoryPreemption::step(const std::vector<GpuMemory>& gpus,
                                                    const std::vector<uint64_t>& pending, Nanos now) {
  Resumption out;
  std::vector<uint32_t> waiting;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (valid(t) && books_[t].state == SuspendState::kSuspended && !books_[t].held) waiting.push_back(t);
  }
  std::sort(waiting.begin(), waiting.end(), [&](uint32_t a, uint32_t b) {
    if (tenants_[a].priority != tenants_[b].priority) return tenants_[a].priority > tenants_[b].priority;
    if (books_[a].suspended_at != books_[b].suspended_at) return books_[a].suspended_at < books_[b].suspended_at;
    return a < b;
  });
  // What each GPU can give: free, less what waiting allocations need.
  std::vector<uint64_t> room(gpus.size());
  for (size_t g = 0; g < gpus.size(); ++g) {
    const uint64_t want = g < pending.size() ? pending[g] : 0;
    room[g] = gpus[g].free > want ? gpus[g].free - want : 0;
  }
  for (uint32_t t : waiting) {
    Book& book = books_[t];
    bool fits = true;
    for (uint32_t g = 0; g < room.size() && fits; ++g) {
      const uint64_t need = freeing_on(t, g);
      fits = need == 0 || need + params_.resume_margin <= room[g];
    }
    if (!fits) {
      book.fits_since.reset();
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
