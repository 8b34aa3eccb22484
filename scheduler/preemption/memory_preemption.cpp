// MemoryPreemption (memory_preemption.h), whom to suspend: the tenants as the daemon sees
// them, a request's verdict (rules 1 to 4 and 6), and the sizes and claims in words. What
// operations did and when tenants resume is memory_preemption_state.cpp's.
#include "scheduler/preemption/memory_preemption.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace cuslice {
namespace {

const char* claim(const PreemptProcess& p) { return describe_claim(p); }

// A reason, followed by the tenants that were not suspended and why.
std::string with_skipped(std::string text, const std::vector<std::string>& skipped) {
  if (!skipped.empty()) {
    text += "; not suspended:";
    for (size_t i = 0; i < skipped.size(); ++i) text += (i ? ", " : " ") + skipped[i];
  }
  return text;
}

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

std::string MemoryPreemption::describe_request(const AllocationRequest& request) const {
  return tenants_[request.tenant].name + "'s allocation of " + describe_bytes(request.bytes) + " on GPU " +
         std::to_string(request.gpu);
}

Verdict MemoryPreemption::request(const AllocationRequest& request, const std::vector<GpuMemory>& gpus,
                                  uint64_t host_available, Nanos /*now*/) {
  Verdict verdict;
  if (!valid(request.tenant) || request.gpu >= gpus.size()) {
    verdict.reason = "unknown tenant or GPU";
    return verdict;
  }
  const uint64_t free = gpus[request.gpu].free;
  const std::string what = describe_request(request);
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
  const InFlight flight = in_flight(request.gpu, request.tenant);
  if (free + flight.coming >= request.bytes) {
    verdict.kind = Verdict::Kind::kWait;
    verdict.coming_free = flight.coming;
    verdict.reason = what + " waits for the suspensions in progress";
    return verdict;
  }
  return make_room(request, what, request.bytes - free - flight.coming, flight, host_available);
}

MemoryPreemption::InFlight MemoryPreemption::in_flight(uint32_t gpu, uint32_t asker) const {
  InFlight flight;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (!valid(t) || books_[t].state != SuspendState::kSuspending) continue;
    // Memory being freed is coming for those it may be freed for (rule 1), no one else: a
    // tenant nobody would suspend for is not told to wait for another's room.
    if (gives_way_to(t, asker)) flight.coming += freeing_on(t, gpu);
    flight.moving += books_[t].fast && !books_[t].escalating ? host_bytes(t, books_[t].away) : host_bytes(t, 0);
  }
  return flight;
}

Verdict MemoryPreemption::make_room(const AllocationRequest& request, const std::string& what, uint64_t missing,
                                    const InFlight& flight, uint64_t host_available) {
  const uint32_t gpu = request.gpu;
  Verdict verdict;
  std::vector<std::string> skipped;
  bool resuming_candidate = false;  // a tenant being resumed may be suspended again once it runs
  const std::vector<uint32_t> ordered = candidates(request, skipped, resuming_candidate);
  uint64_t freed = 0;
  const Shortfall shortfall{missing, missing + params_.room_margin};
  std::vector<uint32_t> chosen = choose(ordered, gpu, shortfall, freed);
  if (freed < missing) {
    if (resuming_candidate) {
      verdict.kind = Verdict::Kind::kWait;
      verdict.coming_free = flight.coming;
      verdict.reason = with_skipped(what + " waits for a tenant being resumed, which may then be suspended", skipped);
      return verdict;
    }
    verdict.reason = with_skipped(what + " cannot fit: " + describe_bytes(missing) +
                                      " more is needed and the tenants that may give way hold " + describe_bytes(freed),
                                  skipped);
    return verdict;
  }
  std::vector<uint64_t> move = fast_moves(chosen, gpu, shortfall);
  uint64_t moving = 0;
  for (size_t i = 0; i < chosen.size(); ++i) moving += host_bytes(chosen[i], move[i]);
  if (flight.moving + moving + params_.host_reserve > host_available) {
    verdict.reason = with_skipped(what + " cannot fit: suspending would move " + describe_bytes(moving) +
                                      " to host memory (" + describe_bytes(flight.moving) +
                                      " more is on its way), and the host has " + describe_bytes(host_available) +
                                      " available, " + describe_bytes(params_.host_reserve) + " of which stays free",
                                  skipped);
    return verdict;
  }
  const std::string names = commit(chosen, move, gpu, what, verdict);
  verdict.kind = Verdict::Kind::kSuspend;
  verdict.suspend = std::move(chosen);
  verdict.move = std::move(move);
  verdict.coming_free = flight.coming + freed;
  verdict.moving = moving;
  verdict.reason = with_skipped("suspending " + names + " for " + what, skipped);
  return verdict;
}

std::vector<uint64_t> MemoryPreemption::fast_moves(const std::vector<uint32_t>& chosen, uint32_t gpu,
                                                   Shortfall missing) const {
  // Rule 6: who moves only its part, the fast way.
  std::vector<uint64_t> move(chosen.size(), 0);
  Shortfall left = missing;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const uint64_t has = available_on(chosen[i], gpu);
    const Shortfall part{std::min(has, left.need), std::min(has, left.want)};
    left.need -= part.need;
    left.want -= part.want;
    move[i] = fast_part(chosen[i], gpu, part);
  }
  return move;
}

uint64_t MemoryPreemption::fast_part(uint32_t t, uint32_t gpu, Shortfall part) const {
  const Book& book = books_[t];
  // Once more the fast way for a tenant suspended so already, on the same GPU: its hooks may
  // have moved a little less than was missing. Only once: a second time, the checkpoint.
  const bool again = book.state == SuspendState::kSuspended && book.fast && book.topups == 0 && book.fast_gpu == gpu;
  if (!params_.fast || !(book.state == SuspendState::kRunning || again)) return 0;
  // A little more than the part: memory the driver takes beside an allocation is not in
  // anybody's count (and the hooks move whole chunks anyway).
  const uint64_t slack = std::max<uint64_t>(part.want / 100, uint64_t{64} << 20);
  const uint64_t can = movable_on(t, gpu);
  if (can >= part.want) return std::min(can, part.want + slack);
  // Less than its part with the margin: all it can move, if that covers its part without.
  return can >= part.need && can > 0 ? can : 0;
}

MemoryPreemption::Candidacy MemoryPreemption::candidacy(uint32_t t, const AllocationRequest& request,
                                                        std::vector<std::string>& skipped) const {
  // Rule 1: who may give way; rule 3: who never does, and why.
  const PreemptTenant& tenant = tenants_[t];
  if (!valid(t) || !gives_way_to(t, request.tenant) || available_on(t, request.gpu) == 0) return Candidacy::kNo;
  const Book& book = books_[t];
  // Suspended the fast way, with memory left on this GPU: the checkpoint may take the rest
  // (rule 6), after the running tenants of its rank.
  const bool rest = book.state == SuspendState::kSuspended && book.fast && !book.no_escalation;
  if (book.state == SuspendState::kResuming) return Candidacy::kResuming;
  if (book.state == SuspendState::kFailed) {
    skipped.push_back(tenant.name + " (" + book.reason + ")");
    return Candidacy::kNo;
  }
  if (book.state != SuspendState::kRunning && !rest) return Candidacy::kNo;
  if (auto why = unsuspendable(t)) {
    skipped.push_back(tenant.name + " (" + *why + ")");
    return Candidacy::kNo;
  }
  return Candidacy::kYes;
}

bool MemoryPreemption::gives_way_to(uint32_t t, uint32_t asker) const {
  // Rule 1.
  const PreemptTenant& tenant = tenants_[t];
  const PreemptTenant& by = tenants_[asker];
  return t != asker && tenant.preemptible && (by.guaranteed || tenant.priority < by.priority);
}

bool MemoryPreemption::gives_way_first(uint32_t a, uint32_t b) const {
  // Rule 2.
  const PreemptTenant& x = tenants_[a];
  const PreemptTenant& y = tenants_[b];
  if (x.priority != y.priority) return x.priority < y.priority;
  const bool sa_ = books_[a].state == SuspendState::kSuspended, sb_ = books_[b].state == SuspendState::kSuspended;
  if (sa_ != sb_) return !sa_;
  const uint64_t sa = start_of(a), sb = start_of(b);
  if (sa != sb) return sa > sb;
  return a < b;
}

std::vector<uint32_t> MemoryPreemption::candidates(const AllocationRequest& request, std::vector<std::string>& skipped,
                                                   bool& resuming) const {
  std::vector<uint32_t> out;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    const Candidacy c = candidacy(t, request, skipped);
    if (c == Candidacy::kResuming) resuming = true;
    if (c == Candidacy::kYes) out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) { return gives_way_first(a, b); });
  return out;
}

std::vector<uint32_t> MemoryPreemption::choose(const std::vector<uint32_t>& candidates, uint32_t gpu,
                                               Shortfall missing, uint64_t& freed) const {
  std::vector<uint32_t> chosen;
  freed = 0;
  for (uint32_t t : candidates) {
    if (freed >= missing.want) break;
    chosen.push_back(t);
    freed += available_on(t, gpu);
  }
  if (freed < missing.need) return chosen;
  // Those taken early that the later ones made unnecessary give way no more: the margin as
  // far as they cover it.
  const uint64_t target = std::min(freed, missing.want);
  for (size_t i = chosen.size(); i-- > 0;) {
    const uint64_t own = available_on(chosen[i], gpu);
    if (freed - own >= target) {
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

}  // namespace cuslice
