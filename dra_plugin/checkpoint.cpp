#include "dra_plugin/checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstring>

#include "common/atomic_file.h"

namespace cuslice::dra {
namespace {

using nlohmann::json;
constexpr int kVersion = 1;

json to_json(const PreparedClaim& c) {
  json devices = json::array();
  for (const AllocatedDevice& d : c.devices) {
    json device = {{"request", d.request}, {"pool", d.pool}, {"device", d.device}};
    if (d.share_id) device["shareID"] = *d.share_id;
    devices.push_back(device);
  }
  return {{"namespace", c.name_space}, {"name", c.name},          {"pod", c.pod},
          {"tenant", c.tenant},        {"key", c.key},            {"gpus", c.plan.gpus},
          {"gpuUUIDs", c.gpu_uuids},   {"memory", c.plan.memory_bytes}, {"compute", c.plan.compute_percent},
          {"devices", devices}};
}

PreparedClaim from_json(const std::string& uid, const json& j) {
  PreparedClaim c;
  c.uid = uid;
  c.name_space = j.at("namespace").get<std::string>();
  c.name = j.at("name").get<std::string>();
  c.pod = j.value("pod", "");
  c.tenant = j.at("tenant").get<std::string>();
  c.key = j.at("key").get<std::string>();
  c.plan.gpus = j.at("gpus").get<std::vector<uint32_t>>();
  c.gpu_uuids = j.at("gpuUUIDs").get<std::vector<std::string>>();
  c.plan.memory_bytes = j.at("memory").get<uint64_t>();
  c.plan.compute_percent = j.at("compute").get<uint32_t>();
  for (const json& d : j.at("devices")) {
    AllocatedDevice device{d.at("request").get<std::string>(), d.at("pool").get<std::string>(),
                           d.at("device").get<std::string>(), std::nullopt, std::nullopt, std::nullopt};
    if (d.contains("shareID")) device.share_id = d.at("shareID").get<std::string>();
    c.devices.push_back(std::move(device));
  }
  if (c.gpu_uuids.size() != c.plan.gpus.size()) throw std::invalid_argument("gpus and gpuUUIDs differ in length");
  return c;
}

}  // namespace

bool Checkpoint::load(std::string& why) {
  claims.clear();
  std::string text;
  if (!read_file(path_, text)) return true;  // none yet
  try {
    const json j = json::parse(text);
    if (j.at("version").get<int>() != kVersion) {
      why = path_ + ": checkpoint version " + j.at("version").dump() + " is not one this plugin reads";
      return false;
    }
    for (const auto& [uid, claim] : j.at("claims").items()) claims[uid] = from_json(uid, claim);
  } catch (const std::exception& e) {  // nlohmann's parse and type errors, from_json's
    claims.clear();
    why = path_ + ": not a checkpoint of this plugin (" + e.what() + "); move it away to start afresh";
    return false;
  }
  return true;
}

bool Checkpoint::save(std::string& why) const {
  json all = json::object();
  for (const auto& [uid, claim] : claims) all[uid] = to_json(claim);
  const json j = {{"version", kVersion}, {"claims", all}};
  if (const int err = write_file(path_, j.dump(2) + "\n", 0600); err != 0) {
    why = "cannot write " + path_ + ": " + std::strerror(err);
    return false;
  }
  return true;
}

std::map<std::string, std::vector<std::string>> holders(const std::map<std::string, PreparedClaim>& claims) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [uid, c] : claims)
    for (const AllocatedDevice& d : c.devices)
      out[d.pool + "/" + d.device].push_back(d.share_id ? uid + "/" + *d.share_id : uid);
  return out;
}

}  // namespace cuslice::dra
