#include "dra_plugin/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

namespace cuslice::dra {
namespace {

// The entry of `list` (clusters, users, contexts) named `name`, or a null node.
YAML::Node named(const YAML::Node& list, const std::string& name) {
  if (list.IsDefined() && list.IsSequence())
    for (const YAML::Node& entry : list)
      if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  return YAML::Node(YAML::NodeType::Null);
}

// A missing key gives an undefined node, which yaml-cpp refuses to be asked its type: check first.
std::string text(const YAML::Node& map, const char* key) {
  if (!map.IsDefined() || !map.IsMap()) return "";
  const YAML::Node value = map[key];
  return value.IsDefined() && value.IsScalar() ? value.as<std::string>() : std::string();
}

YAML::Node field(const YAML::Node& map, const char* key) {
  return map.IsDefined() && map.IsMap() ? map[key] : YAML::Node(YAML::NodeType::Null);
}

}  // namespace

std::optional<KubeConfig> in_cluster_config(const std::string& account_dir, std::string& why) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    why = "not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set): give --kubeconfig";
    return std::nullopt;
  }
  KubeConfig c;
  const std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  c.token_file = account_dir + "/token";
  c.ca_file = account_dir + "/ca.crt";
  if (!std::filesystem::exists(c.token_file)) {
    why = c.token_file + " is missing: the pod has no service account token (automountServiceAccountToken: false?)";
    return std::nullopt;
  }
  return c;
}

std::optional<KubeConfig> load_kubeconfig(const std::string& path, std::string& why) {
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (!root.IsMap()) {
      why = path + ": not a kubeconfig (no current-context, clusters, users, contexts)";
      return std::nullopt;
    }
    const std::string context_name = text(root, "current-context");
    const YAML::Node context = field(named(field(root, "contexts"), context_name), "context");
    if (context_name.empty() || !context.IsDefined() || !context.IsMap()) {
      why = path + ": no current-context, or no context of that name";
      return std::nullopt;
    }
    const YAML::Node cluster = field(named(field(root, "clusters"), text(context, "cluster")), "cluster");
    const YAML::Node user = field(named(field(root, "users"), text(context, "user")), "user");
    if (!cluster.IsDefined() || !cluster.IsMap()) {
      why = path + ": the current context's cluster is missing";
      return std::nullopt;
    }
    // Relative paths in a kubeconfig are relative to the file.
    const std::filesystem::path base = std::filesystem::absolute(path).parent_path();
    const auto file = [&](const YAML::Node& map, const char* key) {
      const std::string value = text(map, key);
      return value.empty() || value[0] == '/' ? value : (base / value).string();
    };
    KubeConfig c;
    c.server = text(cluster, "server");
    c.ca_file = file(cluster, "certificate-authority");
    c.insecure = text(cluster, "insecure-skip-tls-verify") == "true";
    c.token = text(user, "token");
    c.token_file = file(user, "tokenFile");
    c.client_cert_file = file(user, "client-certificate");
    c.client_key_file = file(user, "client-key");
    for (const auto& [map, key] : {std::pair{cluster, "certificate-authority-data"}, {user, "client-certificate-data"},
                                   {user, "client-key-data"}})
      if (!text(map, key).empty()) {
        why = path + ": " + key + " is not read; name the file instead (" +
              std::string(key).substr(0, std::string(key).size() - 5) + ")";
        return std::nullopt;
      }
    if (c.server.empty()) {
      why = path + ": the current context's cluster has no server";
      return std::nullopt;
    }
    return c;
  } catch (const YAML::Exception& e) {  // yaml-cpp reports bad files by throwing
    why = path + ": " + e.what();
    return std::nullopt;
  }
}

}  // namespace cuslice::dra
