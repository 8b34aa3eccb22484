// Where the API server is and how the driver proves who it is: in a pod, the pod's service
// account (in-cluster config: KUBERNETES_SERVICE_HOST and _PORT, the token and CA certificate
// mounted under /var/run/secrets/kubernetes.io/serviceaccount); elsewhere, a kubeconfig file's
// current context (server, certificate-authority, token or tokenFile, client-certificate and
// client-key). Credentials given inline (*-data) are not read: name files instead.
//
// The token is read from its file at each request, because the kubelet rotates projected
// service account tokens.
#pragma once

#include <optional>
#include <string>

namespace cuslice::dra {

struct KubeConfig {
  std::string server;  // e.g. https://10.0.0.1:443
  std::string ca_file;  // empty: the system's CAs
  bool insecure = false;
  std::string token;
  std::string token_file;
  std::string client_cert_file;
  std::string client_key_file;
};

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// `account_dir`: where the token and ca.crt are (kServiceAccountDir in a pod).
std::optional<KubeConfig> in_cluster_config(const std::string& account_dir, std::string& why);
std::optional<KubeConfig> load_kubeconfig(const std::string& path, std::string& why);

}  // namespace cuslice::dra
