#include "dra_plugin/control_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "node/agent_options.h"

namespace cuslice::dra {
namespace {

// Says which GPUs left NVML's list since the last look (they leave the slice) and which came
// back (they are listed again), with what NVML said of those that went.
void log_gpu_changes(const std::vector<node::GpuInfo>& before, const std::vector<node::GpuInfo>& now,
                     const std::vector<std::string>& problems) {
  const auto listed = [](const std::vector<node::GpuInfo>& list, const node::GpuInfo& g) {
    return std::any_of(list.begin(), list.end(), [&](const node::GpuInfo& x) { return x.uuid == g.uuid; });
  };
  for (const node::GpuInfo& g : before)
    if (!listed(now, g))
      spdlog::warn("GPU {} ({}) does not answer NVML ({}): it leaves the slice until it does", g.index, g.uuid,
                   problems.empty() ? std::string("no longer listed") : fmt::format("{}", fmt::join(problems, "; ")));
  for (const node::GpuInfo& g : now)
    if (!listed(before, g)) spdlog::info("GPU {} ({}) is back: the slice lists it again", g.index, g.uuid);
}

}  // namespace

ControlLoop::ControlLoop(const node::GpuInventory& inventory, const node::SchedulerClient& scheduler,
                         ClaimPreparer& preparer, SlicePublisher& publisher, SliceOptions slice,
                         double scheduler_grace_seconds)
    : inventory_(inventory),
      scheduler_(scheduler),
      preparer_(preparer),
      publisher_(publisher),
      slice_(std::move(slice)),
      grace_seconds_(scheduler_grace_seconds),
      grace_(node::milliseconds_of(scheduler_grace_seconds)) {}

void ControlLoop::first_look() {
  std::vector<std::string> problems;
  listed_ = inventory_.list(problems).value_or(std::vector<node::GpuInfo>{});
  for (const std::string& p : problems) spdlog::warn("NVML: {}", p);
  preparer_.set_gpus(listed_);
}

std::vector<node::GpuInfo> ControlLoop::look_at_gpus() {
  std::vector<std::string> problems;
  std::vector<node::GpuInfo> gpus = inventory_.list(problems).value_or(std::vector<node::GpuInfo>{});
  for (const std::string& p : problems) spdlog::debug("NVML: {}", p);
  log_gpu_changes(listed_, gpus, problems);
  listed_ = gpus;
  preparer_.set_gpus(gpus);
  return gpus;
}

bool ControlLoop::enforceable(Clock::time_point& now) {
  std::string why;
  const std::optional<node::SchedulerState> state = scheduler_.state(why);
  now = Clock::now();
  if (state) {
    if (scheduler_silent_) spdlog::info("the scheduler answers again");
    scheduler_silent_ = false;
    if (state->generation != generation_) spdlog::info("scheduler (pid {}) found", state->pid);
    generation_ = state->generation;
    spatial_gpus_ = state->spatial_gpus;
    preparer_.reconcile(*state);
  } else if (!scheduler_silent_) {
    spdlog::warn("{}; the slice lists no GPU after {} s of this", why, grace_seconds_);
    scheduler_silent_ = true;
    silent_since_ = now;
  }
  return !scheduler_silent_ || now - silent_since_ < grace_;
}

ControlLoop::Clock::time_point ControlLoop::look() {
  const std::vector<node::GpuInfo> gpus = look_at_gpus();
  Clock::time_point now;
  const bool listed = enforceable(now);
  publisher_.set(slice_spec(slice_, listed ? gpus : std::vector<node::GpuInfo>{}, 0, spatial_gpus_));
  return now;
}

}  // namespace cuslice::dra
