#include "dra_plugin/api_client.h"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "common/atomic_file.h"

namespace cuslice::dra {
namespace {

struct Transfer {
  std::string body;
  std::string pending;  // a watch's partial line
  const std::function<void(const std::string&)>* on_line = nullptr;
  const std::function<bool()>* keep_going = nullptr;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (!t->on_line) {
    t->body.append(data, n);
    return n;
  }
  t->pending.append(data, n);
  for (size_t end; (end = t->pending.find('\n')) != std::string::npos;) {
    const std::string line = t->pending.substr(0, end);
    t->pending.erase(0, end + 1);
    if (!line.empty()) (*t->on_line)(line);
  }
  return n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->keep_going && !(*t->keep_going)() ? 1 : 0;  // non-zero aborts the transfer
}

using Easy = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using Headers = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;

// The bearer token, from the config or its file (read on each call: the kubelet rotates a
// service account's), without the file's line end; false when the file cannot be read.
bool bearer_token(const KubeConfig& config, std::string& token) {
  token = config.token;
  if (token.empty() && !config.token_file.empty() && !read_file(config.token_file, token)) return false;
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return true;
}

Headers json_headers(const std::string& token) {
  curl_slist* list = curl_slist_append(nullptr, "Accept: application/json");
  list = curl_slist_append(list, "Content-Type: application/json");
  if (!token.empty()) list = curl_slist_append(list, ("Authorization: Bearer " + token).c_str());
  return Headers(list, curl_slist_free_all);
}

// The server's CA, and the client's certificate and key, as the config names them.
void set_tls(CURL* c, const KubeConfig& config) {
  if (!config.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, config.ca_file.c_str());
  if (config.insecure) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!config.client_cert_file.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, config.client_cert_file.c_str());
  if (!config.client_key_file.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, config.client_key_file.c_str());
}

// The method, the body, and where the answer goes (Transfer); the transfer outlives the call.
void set_request(CURL* c, const std::string& method, const std::string& body, Transfer& transfer) {
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &transfer);
  if (!body.empty() || method == "POST" || method == "PUT") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  if (transfer.keep_going) {
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &transfer);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }
}

}  // namespace

std::string ApiResponse::describe() const {
  if (!error.empty()) return error;
  std::string message;
  try {
    const auto j = nlohmann::json::parse(body);
    if (j.is_object() && j.contains("message") && j["message"].is_string()) message = j["message"].get<std::string>();
  } catch (const nlohmann::json::exception&) {  // not a Status object: show the start of it
    message = body.substr(0, 200);
  }
  return "HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + message);
}

ApiResponse ApiClient::call(const std::string& method, const std::string& path, const std::string& body) const {
  return watch_or_call(method, path, body, nullptr, nullptr, timeout_);
}

ApiResponse ApiClient::watch(const std::string& path, const std::function<void(const std::string&)>& on_line,
                             const std::function<bool()>& keep_going, std::chrono::seconds limit) const {
  return watch_or_call("GET", path, "", &on_line, &keep_going, limit);
}

ApiResponse ApiClient::watch_or_call(const std::string& method, const std::string& path, const std::string& body,
                                     const std::function<void(const std::string&)>* on_line,
                                     const std::function<bool()>* keep_going,
                                     std::chrono::milliseconds limit) const {
  ApiResponse out;
  Easy curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    out.error = "cannot start a request (curl_easy_init)";
    return out;
  }
  std::string token;
  if (!bearer_token(config_, token)) {
    out.error = "cannot read the token " + config_.token_file;
    return out;
  }
  const Headers headers = json_headers(token);
  Transfer transfer;
  transfer.on_line = on_line;
  transfer.keep_going = keep_going;
  const std::string url = config_.server + path;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(limit.count()));
  set_request(c, method, body, transfer);
  set_tls(c, config_);
  const CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  out.body = std::move(transfer.body);
  // A watch the caller stopped, or that ran its time, ended as it should.
  const bool watch_ended = on_line && (rc == CURLE_ABORTED_BY_CALLBACK || rc == CURLE_OPERATION_TIMEDOUT) &&
                           out.status == 200;
  if (rc != CURLE_OK && !watch_ended) out.error = method + " " + url + ": " + curl_easy_strerror(rc);
  return out;
}

}  // namespace cuslice::dra
