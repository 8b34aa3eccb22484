#include "dra_plugin/slice_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "dra_plugin/resource_slice.h"

namespace cuslice::dra {
namespace {

using nlohmann::json;

// The spec without its pool generation, to compare what the server has with what is wanted.
json without_generation(json spec) {
  if (spec.contains("pool") && spec["pool"].is_object()) spec["pool"].erase("generation");
  return spec;
}

// metadata.resourceVersion of an object, or "" (not JSON, not an object, none).
std::string resource_version_of(const json& object) {
  if (!object.is_object()) return "";
  const json::json_pointer at("/metadata/resourceVersion");
  return object.contains(at) && object[at].is_string() ? object[at].get<std::string>() : "";
}

int64_t generation_of(const json& slice) {
  try {
    return slice.at("spec").at("pool").at("generation").get<int64_t>();
  } catch (const json::exception&) {  // absent or not a number: start over
    return 0;
  }
}

}  // namespace

void SlicePublisher::set(json spec) {
  std::lock_guard lock(mutex_);
  if (wanted_ && *wanted_ == spec) return;
  wanted_ = std::move(spec);
  ++version_;
  current_ = false;
  wake_.notify_all();
}

bool SlicePublisher::changed_since(uint64_t version) {
  std::lock_guard lock(mutex_);
  return version_ != version;
}

json SlicePublisher::owner() {
  if (!owner_.is_null()) return owner_;
  const ApiResponse got = api_.get("/api/v1/nodes/" + node_);
  const json node = got.ok() ? json::parse(got.body, nullptr, false) : json();
  const json::json_pointer uid("/metadata/uid");
  if (!node.is_object() || !node.contains(uid) || !node[uid].is_string()) {
    if (std::exchange(owner_warned_, true)) return nullptr;
    spdlog::warn("cannot read Node {} ({}): its ResourceSlice is published without an owner, and stays if the node "
                 "is deleted",
                 node_, got.ok() ? "no UID" : got.describe());
    return nullptr;
  }
  owner_ = json::array(
      {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_}, {"uid", node[uid]}, {"controller", true}}});
  return owner_;
}

std::string SlicePublisher::collection() const { return std::string(kResourceApi) + "/resourceslices"; }

std::optional<std::string> SlicePublisher::create(const json& wanted) {
  json slice = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", name_}}},
                {"spec", wanted}};
  if (const json owners = owner(); !owners.is_null()) slice["metadata"]["ownerReferences"] = owners;
  slice["spec"]["pool"]["generation"] = 1;
  const ApiResponse made = api_.post(collection(), slice.dump());
  if (!made.ok()) {
    last_problem_ = "cannot create ResourceSlice " + name_ + ": " + made.describe();
    return std::nullopt;
  }
  spdlog::info("published ResourceSlice {} ({} devices)", name_, wanted["devices"].size());
  return resource_version_of(json::parse(made.body, nullptr, false));
}

std::optional<std::string> SlicePublisher::update(const json& have, const json& wanted) {
  const bool owned = have.contains(json::json_pointer("/metadata/ownerReferences"));
  const json owners = owned ? json() : owner();
  const bool adopt = !owned && !owners.is_null();
  if (without_generation(have["spec"]) == without_generation(wanted) && !adopt) return resource_version_of(have);
  json slice = have;
  slice["spec"] = wanted;
  if (adopt) slice["metadata"]["ownerReferences"] = owners;
  slice["spec"]["pool"]["generation"] = generation_of(have) + 1;
  const ApiResponse replaced = api_.put(collection() + "/" + name_, slice.dump());
  if (!replaced.ok()) {  // 409: someone wrote it since; read it again
    last_problem_ = "cannot update ResourceSlice " + name_ + ": " + replaced.describe();
    return std::nullopt;
  }
  spdlog::info("updated ResourceSlice {} ({} devices, pool generation {})", name_, wanted["devices"].size(),
               generation_of(slice));
  return resource_version_of(json::parse(replaced.body, nullptr, false));
}

std::optional<std::string> SlicePublisher::make_current(const json& wanted) {
  const ApiResponse got = api_.get(collection() + "/" + name_);
  if (got.status == 404 && got.error.empty()) return create(wanted);
  if (!got.ok()) {
    last_problem_ = "cannot read ResourceSlice " + name_ + ": " + got.describe();
    return std::nullopt;
  }
  const json have = json::parse(got.body, nullptr, false);
  if (!have.is_object() || !have.contains("spec")) {
    last_problem_ = "the API server's ResourceSlice " + name_ + " is not JSON";
    return std::nullopt;
  }
  return update(have, wanted);
}

bool SlicePublisher::watch(const std::string& resource_version, uint64_t version, const std::atomic<bool>& stop) {
  bool changed = false;
  const std::string watch = collection() + "?watch=true&fieldSelector=metadata.name%3D" + name_ +
                            "&resourceVersion=" + resource_version +
                            "&timeoutSeconds=" + std::to_string(timing_.resync.count());
  const ApiResponse watched = api_.watch(
      watch,
      [&](const std::string& line) {
        const json event = json::parse(line, nullptr, false);
        const std::string type = event.is_object() && event.contains("type") && event["type"].is_string()
                                     ? event["type"].get<std::string>()
                                     : "";
        if (type == "BOOKMARK") return;
        const std::string rv = event.is_object() && event.contains("object") ? resource_version_of(event["object"]) : "";
        if (type != "MODIFIED" || rv != resource_version) changed = true;
      },
      [&] { return !changed && !stop && !changed_since(version); }, timing_.resync + std::chrono::seconds(5));
  if (!watched.ok() && !changed) {
    last_problem_ = "cannot watch ResourceSlice " + name_ + ": " + watched.describe();
    return false;
  }
  if (changed) current_ = false;
  return true;
}

bool SlicePublisher::publish_once(const json& wanted, uint64_t version, const std::atomic<bool>& stop) {
  const std::optional<std::string> resource_version = make_current(wanted);
  if (!resource_version) return false;
  if (!last_problem_.empty()) spdlog::info("the API server answers again; ResourceSlice {} is current", name_);
  last_problem_.clear();
  current_ = true;
  return watch(*resource_version, version, stop);
}

void SlicePublisher::run(const std::atomic<bool>& stop) {
  std::chrono::milliseconds backoff = timing_.backoff_min;
  std::string reported;
  while (!stop) {
    json wanted;
    uint64_t version = 0;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return wanted_.has_value() || stop; });
      if (!wanted_) continue;
      wanted = *wanted_;
      version = version_;
    }
    if (publish_once(wanted, version, stop)) {
      backoff = timing_.backoff_min;
      reported.clear();
      continue;
    }
    current_ = false;
    if (last_problem_ != reported) spdlog::warn("{}; trying again, backing off up to {} s", last_problem_,
                                                timing_.backoff_max.count() / 1000);
    reported = last_problem_;
    // In steps, so that a stop is seen within a fraction of a second.
    const auto until = std::chrono::steady_clock::now() + backoff;
    std::unique_lock lock(mutex_);
    while (!stop && version_ == version && std::chrono::steady_clock::now() < until)
      wake_.wait_for(lock, std::chrono::milliseconds(200));
    backoff = std::min(backoff * 2, timing_.backoff_max);
  }
}

}  // namespace cuslice::dra
