// Keeps the node's ResourceSlice on the API server equal to what the driver wants published.
// One thread (run()):
//   1. reads the slice; creates it when missing, replaces it when its spec differs (the pool's
//      generation one higher, so kube-scheduler takes the new one), leaves it when equal;
//   2. then watches it until it changes on the server (someone else wrote or deleted it: back
//      to 1), the wanted spec changes (set()), or the watch ends (a resync: back to 1);
//   3. when the API server does not answer or refuses, tries again after a back-off that
//      doubles from `backoff_min` to `backoff_max`, and starts from 1.
// The slice outlives the plugin: a restarted plugin finds it and leaves it as it is when it is
// still right, so claims are not disturbed by an upgrade. It is owned by the Node object (an
// owner reference, when the node can be read), so the garbage collector removes it with the
// node.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "dra_plugin/api_client.h"

namespace cuslice::dra {

struct PublisherTiming {
  std::chrono::milliseconds backoff_min{500};
  std::chrono::milliseconds backoff_max{30'000};
  std::chrono::seconds resync{300};  // the longest a watch runs before the slice is read again
};

class SlicePublisher {
 public:
  // `node`: the Node that owns the slice.
  SlicePublisher(const ApiClient& api, std::string name, std::string node, PublisherTiming timing)
      : api_(api), name_(std::move(name)), node_(std::move(node)), timing_(timing) {}

  // What should be published: a ResourceSlice spec whose pool generation the publisher sets.
  void set(nlohmann::json spec);
  // Until `stop`.
  void run(const std::atomic<bool>& stop);
  // The spec on the server equals the wanted one (as of the last look).
  bool current() const { return current_.load(); }

 private:
  // One pass of steps 1 and 2; false when the API server failed (back off).
  bool publish_once(const nlohmann::json& wanted, uint64_t version, const std::atomic<bool>& stop);
  // Step 1: the slice's resourceVersion once it is `wanted`; nullopt with last_problem_.
  std::optional<std::string> make_current(const nlohmann::json& wanted);
  std::optional<std::string> create(const nlohmann::json& wanted);
  // `have` as it is when its spec is `wanted` and it has an owner (or none can be read), else
  // replaced.
  std::optional<std::string> update(const nlohmann::json& have, const nlohmann::json& wanted);
  // Step 2, from `resource_version`; false with last_problem_ when the watch failed.
  bool watch(const std::string& resource_version, uint64_t version, const std::atomic<bool>& stop);
  std::string collection() const;
  bool changed_since(uint64_t version);
  // metadata.ownerReferences naming the Node, read once; null while the node cannot be read.
  nlohmann::json owner();

  const ApiClient& api_;
  std::string name_;
  std::string node_;
  nlohmann::json owner_;  // the publisher thread's own
  bool owner_warned_ = false;
  PublisherTiming timing_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<nlohmann::json> wanted_;
  uint64_t version_ = 0;  // of wanted_, counts set() calls that changed it
  std::atomic<bool> current_{false};
  std::string last_problem_;
};

}  // namespace cuslice::dra
