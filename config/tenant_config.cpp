#include "tenant_config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace cuslice {
namespace {

ConfigError make_error(const std::string& file, const YAML::Mark& mark, std::string message) {
  // yaml-cpp marks are 0-based, and a null mark (-1) means "no position".
  const int line = mark.line >= 0 ? mark.line + 1 : 0;
  const int column = line > 0 ? mark.column + 1 : 0;
  // Quoted input is escaped where it is quoted; this only guards the one-line promise
  // against a message that forgot to (yaml-cpp's own, say).
  std::replace_if(message.begin(), message.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return {file, line, column, std::move(message)};
}

// `text` as a message quotes it: `excerpt`.
std::string quoted(std::string_view text) { return "`" + excerpt(text) + "`"; }
std::string quoted(const YAML::Node& node) { return quoted(node.Scalar()); }

std::string format_duration(std::chrono::nanoseconds d) {
  if (d % std::chrono::seconds(1) == std::chrono::nanoseconds(0))
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
  if (d % std::chrono::milliseconds(1) == std::chrono::nanoseconds(0))
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
  return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(d).count()) + "us";
}

// Walks the YAML tree once, filling a Config and collecting every error with its position.
class Parser {
 public:
  explicit Parser(const std::string& file) : file_(file) {}

  ConfigResult run(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      error(root, "the file is empty: expected `scheduler:` and `tenants:`");
      return finish();
    }
    if (!expect_map(root, "the top level")) return finish();
    check_keys(root, {"scheduler", "tenants"});
    if (root["scheduler"]) parse_scheduler(root["scheduler"]);
    if (root["tenants"]) {
      parse_tenants(root["tenants"]);
    } else {
      error(root, "missing `tenants:` (a list of tenants; `[]` when the device plugin makes them all)");
    }
    check_cross_references();
    return finish();
  }

 private:
  void error(const YAML::Mark& mark, std::string message) {
    result_.errors.push_back(make_error(file_, mark, std::move(message)));
  }
  void error(const YAML::Node& node, std::string message) { error(node.Mark(), std::move(message)); }

  ConfigResult finish() {
    std::vector<ConfigError>& errors = result_.errors;
    std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    if (errors.size() > kMaxConfigErrors) {
      const size_t left_out = errors.size() - kMaxConfigErrors;
      errors.resize(kMaxConfigErrors);
      errors.push_back({file_, 0, 0, std::to_string(left_out) + " more errors not shown"});
    }
    return std::move(result_);
  }

  bool expect_map(const YAML::Node& node, const std::string& what) {
    if (node.IsMap()) return true;
    error(node, what + " must be a mapping of `key: value`");
    return false;
  }

  bool expect_scalar(const YAML::Node& node, const std::string& key) {
    if (node.IsScalar()) return true;
    error(node, "`" + key + "` must be a single value");
    return false;
  }

  // Every key of `map` is one of `allowed`, and none is given twice: yaml-cpp keeps both
  // entries of a duplicate and its lookup returns the first, so `memory: 1GiB` followed by
  // `memory: 100GiB` would silently mean 1GiB.
  void check_keys(const YAML::Node& map, std::initializer_list<const char*> allowed) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) {
        error(entry.first, "a key must be a plain word, not a list or a mapping");
        continue;
      }
      const std::string& key = entry.first.Scalar();
      const bool known = std::any_of(allowed.begin(), allowed.end(),
                                     [&](const char* a) { return key == a; });
      if (!known) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        error(entry.first, "unknown key " + quoted(key) + " (expected one of: " + list + ")");
        continue;
      }
      const auto [first, inserted] = seen.emplace(key, entry.first.Mark());
      if (!inserted) {
        error(entry.first, "duplicate key `" + key + "` (first given at line " +
                               std::to_string(first->second.line + 1) + ", column " +
                               std::to_string(first->second.column + 1) + ")");
      }
    }
  }

  // A duration of `key` within [min, max].
  std::optional<std::chrono::nanoseconds> bounded_duration(const YAML::Node& node, const std::string& key,
                                                            std::chrono::nanoseconds min,
                                                            std::chrono::nanoseconds max) {
    const std::optional<std::chrono::nanoseconds> value = duration(node, key);
    if (value && (*value < min || *value > max)) {
      error(node, "`" + key + "` " + quoted(node) + " is out of range: from " + format_duration(min) + " to " +
                      format_duration(max));
      return std::nullopt;
    }
    return value;
  }

  // A percentage the segment can hold (see kMinPercent).
  bool representable_percent(const YAML::Node& node, const std::string& key, double percent) {
    if (percent >= kMinPercent) return true;
    error(node, "`" + key + "` " + quoted(node) + " is below 0.0001%, the finest percentage the scheduler holds" +
                    (key == "memory" ? ": write a size in bytes for a smaller quota" : ""));
    return false;
  }

  std::optional<std::chrono::nanoseconds> duration(const YAML::Node& node, const std::string& key) {
    if (!expect_scalar(node, key)) return std::nullopt;
    uint64_t ns = 0;
    const char* why = nullptr;
    if (!parse_duration(node.Scalar(), ns, &why)) {
      error(node, "bad duration " + quoted(node) + " for `" + key + "`: " + why);
      return std::nullopt;
    }
    if (ns == 0) {
      error(node, "`" + key + "` must be above zero");
      return std::nullopt;
    }
    return std::chrono::nanoseconds(ns);  // at most kMaxDurationNs: fits
  }

  std::optional<SizeSpec> size(const YAML::Node& node, const std::string& key) {
    if (!expect_scalar(node, key)) return std::nullopt;
    SizeSpec spec;
    const char* why = nullptr;
    // A bare number is a byte count, as in a Kubernetes resource quantity.
    if (!parse_size(node.Scalar(), spec, &why, SizeForms{.bare_bytes = true, .percent = true})) {
      error(node, "bad size " + quoted(node) + " for `" + key + "`: " + why);
      return std::nullopt;
    }
    if (spec.kind == SizeSpec::Kind::kBytes && spec.bytes == 0) {
      error(node, "`" + key + "` must be above zero");
      return std::nullopt;
    }
    return spec;
  }

  // A percentage in (0, 100], written with its '%'.
  std::optional<double> percent(const YAML::Node& node, const std::string& key) {
    if (!expect_scalar(node, key)) return std::nullopt;
    double value = 0;
    const char* why = nullptr;
    if (!parse_percent(node.Scalar(), value, &why)) {
      error(node, "bad percentage " + quoted(node) + " for `" + key + "`: " + why);
      return std::nullopt;
    }
    return value;
  }

  // A whole number in [min, max], written in decimal digits only.
  std::optional<uint64_t> whole_number(const YAML::Node& node, const std::string& key, uint64_t min, uint64_t max,
                                       const std::string& what) {
    if (!expect_scalar(node, key)) return std::nullopt;
    const std::string& text = node.Scalar();
    const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      const bool negative = text.size() > 1 && text[0] == '-' &&
                            std::all_of(text.begin() + 1, text.end(), [](char c) { return c >= '0' && c <= '9'; });
      error(node, "bad `" + key + "` " + quoted(text) + ": " + (negative ? "cannot be negative; " : "") + "expected " +
                      what);
      return std::nullopt;
    }
    // Leading zeros aside, more than 20 digits cannot fit; strtoull says so for fewer.
    const size_t first = std::min(text.find_first_not_of('0'), text.size());
    errno = 0;
    const unsigned long long value = text.size() - first > 20 ? ULLONG_MAX : std::strtoull(text.c_str(), nullptr, 10);
    if (text.size() - first > 20 || errno == ERANGE || value < min || value > max) {
      error(node, "bad `" + key + "` " + quoted(text) + ": expected " + what);
      return std::nullopt;
    }
    return value;
  }

  std::optional<uint32_t> id(const YAML::Node& node, const std::string& key) {
    const auto value = whole_number(node, key, 0, kMaxId, "a numeric id from 0 to " + std::to_string(kMaxId));
    if (!value) return std::nullopt;
    return static_cast<uint32_t>(*value);
  }

  std::optional<bool> boolean(const YAML::Node& node, const std::string& key) {
    if (!expect_scalar(node, key)) return std::nullopt;
    bool value = false;
    if (!YAML::convert<bool>::decode(node, value)) {
      error(node, "bad `" + key + "` " + quoted(node) + ": expected true or false");
      return std::nullopt;
    }
    return value;
  }

  void parse_scheduler(const YAML::Node& node) {
    if (!expect_map(node, "`scheduler`")) return;
    check_keys(node, {"quantum", "limit_window", "lower_priority_timeslice", "gpu_memory", "default_tenant",
                      "metrics_port", "metrics_address", "preemption"});
    SchedulerSettings& s = result_.config.scheduler;
    if (node["quantum"]) {
      if (auto q = bounded_duration(node["quantum"], "quantum", kMinQuantum, kMaxQuantum)) s.quantum = *q;
    }
    if (node["limit_window"]) {
      if (auto w = bounded_duration(node["limit_window"], "limit_window", kMinLimitWindow, kMaxLimitWindow))
        s.limit_window = *w;
    }
    if (const YAML::Node t = node["lower_priority_timeslice"]) {
      if (t.IsScalar() && t.Scalar() == "off") {
        s.lower_priority_timeslice = std::chrono::microseconds(0);
      } else if (auto d = bounded_duration(t, "lower_priority_timeslice", kMinLowerTimeslice, kMaxLowerTimeslice)) {
        if (*d % std::chrono::microseconds(1) != std::chrono::nanoseconds(0))
          error(t, "`lower_priority_timeslice` " + quoted(t) + " is finer than the GPU takes: write whole microseconds");
        else
          s.lower_priority_timeslice = std::chrono::duration_cast<std::chrono::microseconds>(*d);
      }
    }
    if (const YAML::Node m = node["gpu_memory"]) {
      if (auto spec = size(m, "gpu_memory")) {
        if (spec->kind == SizeSpec::Kind::kPercent) {
          error(m, "`gpu_memory` is the size of the card: write bytes, e.g. 80GiB, not a percentage");
        } else {
          s.gpu_memory = spec->bytes;
        }
      }
    }
    if (const YAML::Node d = node["default_tenant"]) {
      if (expect_scalar(d, "default_tenant")) {
        s.default_tenant = d.Scalar();
        default_tenant_mark_ = d.Mark();
      }
    }
    if (const YAML::Node p = node["metrics_port"]) {
      if (auto port = whole_number(p, "metrics_port", 1, 65535, "a TCP port from 1 to 65535"))
        s.metrics_port = static_cast<uint16_t>(*port);
    }
    if (node["preemption"]) parse_preemption(node["preemption"]);
    if (const YAML::Node a = node["metrics_address"]) {
      if (expect_scalar(a, "metrics_address")) {
        in6_addr parsed{};
        const std::string& text = a.Scalar();
        if (inet_pton(AF_INET, text.c_str(), &parsed) == 1 || inet_pton(AF_INET6, text.c_str(), &parsed) == 1) {
          s.metrics_address = text;
        } else {
          error(a, "bad `metrics_address` " + quoted(a) + ": expected an IPv4 or IPv6 address, e.g. 127.0.0.1, ::1 or 0.0.0.0");
        }
      }
    }
  }

  void parse_tenants(const YAML::Node& node) {
    // Empty is allowed: on a Kubernetes node the device plugin may make every tenant.
    if (!node.IsSequence()) {
      error(node, "`tenants` must be a list of tenants (`- name: ...`, or `[]`)");
      return;
    }
    if (node.size() > kMaxConfigTenants) {
      error(node, "too many tenants: " + std::to_string(node.size()) + " (at most " +
                      std::to_string(kMaxConfigTenants) + ")");
    }
    std::set<std::string> names;
    for (const YAML::Node& item : node) {
      TenantConfig tenant;
      if (!parse_tenant(item, tenant)) continue;
      if (!names.insert(tenant.name).second) {
        error(item["name"], "duplicate tenant name " + quoted(tenant.name));
        continue;
      }
      tenant_marks_[tenant.name] = item["name"].Mark();
      if (item["memory"]) memory_marks_[tenant.name] = item["memory"].Mark();
      result_.config.tenants.push_back(std::move(tenant));
    }
  }

  // Returns false when the tenant has no usable name (it is then left out entirely; its
  // other errors are still reported).
  bool parse_tenant(const YAML::Node& item, TenantConfig& t) {
    if (!expect_map(item, "a tenant")) return false;
    check_keys(item, {"name", "priority", "memory", "compute", "match", "allow_env", "on_violation", "preemptible"});
    bool named = false;
    if (const YAML::Node n = item["name"]) {
      if (expect_scalar(n, "name")) {
        t.name = n.Scalar();
        if (!valid_tenant_name(t.name)) {
          error(n, "bad tenant name " + quoted(t.name) + ": 1 to " + std::to_string(kMaxTenantNameLength) +
                       " characters of letters, digits, '-', '_' or '.'");
        } else {
          named = true;
        }
      }
    } else {
      error(item, "a tenant needs a `name`");
    }
    if (const YAML::Node p = item["priority"]) {
      if (expect_scalar(p, "priority")) {
        const std::string& v = p.Scalar();
        if (v == "high") t.priority = Priority::kHigh;
        else if (v == "normal") t.priority = Priority::kNormal;
        else if (v == "low") t.priority = Priority::kLow;
        else error(p, "bad priority " + quoted(v) + ": expected high, normal or low");
      }
    }
    if (const YAML::Node m = item["memory"]) {
      if (auto spec = size(m, "memory")) {
        const uint64_t* card = result_.config.scheduler.gpu_memory ? &*result_.config.scheduler.gpu_memory : nullptr;
        if (card && spec->kind == SizeSpec::Kind::kBytes && spec->bytes > *card) {
          error(m, "memory " + quoted(m) + " is more than the card (`gpu_memory` is " +
                       std::to_string(*card) + " bytes)");
        }
        if (spec->kind == SizeSpec::Kind::kBytes || representable_percent(m, "memory", spec->percent)) t.memory = spec;
      }
    }
    if (const YAML::Node c = item["compute"]) {
      if (expect_map(c, "`compute`")) {
        check_keys(c, {"share", "limit"});
        if (c["share"]) {
          t.share_percent = percent(c["share"], "share");
          if (t.share_percent && !representable_percent(c["share"], "share", *t.share_percent))
            t.share_percent.reset();
          share_marks_.push_back(c["share"]);
        }
        if (c["limit"]) {
          if (auto l = percent(c["limit"], "limit"); l && representable_percent(c["limit"], "limit", *l)) {
            t.limit_percent = *l;
            if (t.share_percent && *l < *t.share_percent) {
              error(c["limit"], "`limit` is below `share`: the tenant could never get its share");
            }
          }
        }
      }
    }
    if (const YAML::Node m = item["match"]) {
      if (expect_map(m, "`match`")) {
        check_keys(m, {"uid", "gid", "cgroup"});
        if (m["uid"]) t.match.uid = id(m["uid"], "uid");
        if (m["gid"]) t.match.gid = id(m["gid"], "gid");
        if (const YAML::Node cg = m["cgroup"]) {
          if (expect_scalar(cg, "cgroup")) {
            if (cg.Scalar().empty() || cg.Scalar()[0] != '/') {
              error(cg, "`cgroup` must be an absolute cgroup path prefix, e.g. /kubepods");
            } else {
              t.match.cgroup_prefix = cg.Scalar();
            }
          }
        }
      }
    }
    if (item["allow_env"]) {
      if (auto b = boolean(item["allow_env"], "allow_env")) t.allow_env = *b;
    }
    if (const YAML::Node v = item["on_violation"]) {
      if (expect_scalar(v, "on_violation")) {
        if (v.Scalar() == "report") t.kill_on_violation = false;
        else if (v.Scalar() == "kill") t.kill_on_violation = true;
        else error(v, "bad on_violation " + quoted(v) + ": expected report or kill");
      }
    }
    if (item["preemptible"]) {
      if (auto b = boolean(item["preemptible"], "preemptible")) t.preemptible = *b;
    }
    return named;
  }

  void check_cross_references() {
    const Config& c = result_.config;
    double total = 0;
    for (const TenantConfig& t : c.tenants) total += t.share_percent.value_or(0);
    if (total > 100.0 + 1e-9) {
      std::ostringstream msg;
      msg << "the tenants' shares add up to " << total << "%, more than 100%";
      // Point at the share that first goes over.
      double running = 0;
      for (const YAML::Node& s : share_marks_) {
        double percent = 0;
        if (!parse_percent(s.Scalar(), percent, nullptr)) continue;
        running += percent;
        if (running > 100.0 + 1e-9) {
          error(s, msg.str());
          break;
        }
      }
    }
    check_implicit_shares();
    check_guarantees();
    if (c.scheduler.default_tenant && c.find_tenant(*c.scheduler.default_tenant) < 0) {
      error(default_tenant_mark_, "`default_tenant` names " + quoted(*c.scheduler.default_tenant) +
                                      ", which is not a tenant in this file");
    }
  }

  // A tenant without a share gets an equal part of what the explicit shares leave, but at
  // least kMinImplicitShare so that it is never starved; the shares must still fit in 100%.
  void check_implicit_shares() {
    const Config& c = result_.config;
    double explicit_total = 0;
    size_t implicit = 0;
    for (const TenantConfig& t : c.tenants) {
      if (t.share_percent) explicit_total += *t.share_percent;
      else ++implicit;
    }
    if (implicit == 0 || explicit_total > 100.0 + 1e-9) return;  // the latter is reported above
    if (explicit_total + implicit * kMinImplicitShare <= 100.0 + 1e-9) return;
    for (const TenantConfig& t : c.tenants) {
      if (t.share_percent) continue;
      std::ostringstream msg;
      msg << "tenant " << quoted(t.name) << " has no `compute.share`, and the explicit shares (" << explicit_total
          << "%) leave less than " << kMinImplicitShare
          << "% to each tenant without one: give it a share, or lower the others'";
      error(tenant_marks_[t.name], msg.str());
      return;
    }
  }

  // --- Memory preemption ------------------------------------------------------------------------

  void parse_preemption(const YAML::Node& node) {
    if (!expect_map(node, "`preemption`")) return;
    check_keys(node, {"allocation_wait", "resume_holdoff", "host_reserve", "resume_margin", "unsuspendable"});
    PreemptionSettings& p = result_.config.scheduler.preemption;
    if (const YAML::Node v = node["unsuspendable"]) {
      if (expect_scalar(v, "unsuspendable")) {
        if (v.Scalar() == "stop") p.stop_unsuspendable = true;
        else if (v.Scalar() == "keep") p.stop_unsuspendable = false;
        else error(v, "bad `unsuspendable` " + quoted(v) + ": expected stop or keep");
      }
    }
    if (node["allocation_wait"]) {
      if (auto d = duration(node["allocation_wait"], "allocation_wait")) p.allocation_wait = *d;
    }
    if (node["resume_holdoff"]) {
      if (auto d = duration(node["resume_holdoff"], "resume_holdoff")) p.resume_holdoff = *d;
    }
    for (const char* key : {"host_reserve", "resume_margin"}) {
      const YAML::Node n = node[key];
      if (!n) continue;
      auto spec = size(n, key);
      if (!spec) continue;
      if (spec->kind == SizeSpec::Kind::kPercent) {
        error(n, std::string("`") + key + "` is a size in bytes, e.g. 4GiB, not a percentage");
        continue;
      }
      (std::string(key) == "host_reserve" ? p.host_reserve : p.resume_margin) = spec->bytes;
    }
  }

  // With a preemptible tenant, the others' quotas are guarantees: each non-preemptible tenant
  // needs one, and together they must fit the card (only preemptible tenants may over-commit).
  void check_guarantees() {
    const Config& c = result_.config;
    const bool any = std::any_of(c.tenants.begin(), c.tenants.end(), [](const auto& t) { return t.preemptible; });
    if (!any) return;
    const std::optional<uint64_t> card = c.scheduler.gpu_memory;
    uint64_t bytes = 0;
    double percent = 0;
    bool in_bytes = false;
    for (const TenantConfig& t : c.tenants) {
      if (t.preemptible) continue;
      if (!t.memory) {
        error(tenant_marks_[t.name], "tenant `" + t.name + "` needs a `memory` quota: with preemptible tenants in "
                                     "the file, the quotas of the others are guarantees (or mark it "
                                     "`preemptible: true`)");
        continue;
      }
      if (t.memory->kind == SizeSpec::Kind::kPercent) {
        percent += t.memory->percent;
        if (card) bytes += t.memory->resolve(*card);
      } else {
        bytes += t.memory->bytes;
        in_bytes = true;
      }
      const YAML::Mark& mark = memory_marks_[t.name];
      if (card && bytes > *card) {
        error(mark, "the quotas of the tenants that are not preemptible add up to " + std::to_string(bytes) +
                        " bytes, more than the card (`gpu_memory` is " + std::to_string(*card) +
                        " bytes): they are guarantees; mark tenants that may be suspended `preemptible: true`");
        return;
      }
      if (!card && in_bytes) {
        error(mark, "with preemptible tenants, give `gpu_memory` so that quotas in bytes can be checked "
                    "against the card, or write the quotas of the tenants that are not preemptible as "
                    "percentages");
        return;
      }
      if (!card && percent > 100.0 + 1e-9) {
        std::ostringstream msg;
        msg << "the quotas of the tenants that are not preemptible add up to " << percent
            << "% of the card, more than 100%: they are guarantees; mark tenants that may be suspended "
               "`preemptible: true`";
        error(mark, msg.str());
        return;
      }
    }
  }

  std::string file_;
  ConfigResult result_;
  YAML::Mark default_tenant_mark_;
  std::vector<YAML::Node> share_marks_;
  std::map<std::string, YAML::Mark> tenant_marks_;  // of each tenant's `name`
  std::map<std::string, YAML::Mark> memory_marks_;  // of each tenant's `memory`
};

}  // namespace

bool valid_tenant_name(std::string_view name) {
  const bool charset = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
  return !name.empty() && name.size() <= kMaxTenantNameLength && charset;
}

int Config::find_tenant(std::string_view name) const {
  for (size_t i = 0; i < tenants.size(); ++i)
    if (tenants[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<double> Config::effective_shares() const {
  double explicit_total = 0;
  size_t implicit = 0;
  for (const TenantConfig& t : tenants) {
    if (t.share_percent) explicit_total += *t.share_percent;
    else ++implicit;
  }
  const double each = implicit ? std::max(kMinImplicitShare, (100.0 - explicit_total) / implicit) : 0.0;
  std::vector<double> shares;
  for (const TenantConfig& t : tenants) shares.push_back(t.share_percent.value_or(each));
  return shares;
}

std::string excerpt(std::string_view text) {
  size_t cut = std::min(text.size(), kMaxExcerpt);
  // Not inside a UTF-8 sequence: its lead byte would be escaped as invalid.
  if (cut < text.size()) {
    for (size_t back = 0; back < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++back) --cut;
  }
  // fmt's debug format escapes what is not printable; drop its enclosing quotes.
  std::string escaped = fmt::format("{:?}", text.substr(0, cut));
  escaped = escaped.substr(1, escaped.size() - 2);
  if (cut < text.size()) escaped += "...";
  return escaped;
}

std::string ConfigError::to_string() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

ConfigResult parse_config(std::string_view yaml_text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    ConfigResult result;
    result.errors.push_back(make_error(file_name, e.mark, "YAML syntax error: " + e.msg));
    return result;
  }
  try {
    return Parser(file_name).run(root);
  } catch (const YAML::Exception& e) {
    // The parser checks each node's type before it reads it; this is the last line of
    // defence, so that no input can take the daemon down with an exception.
    ConfigResult result;
    result.errors.push_back(make_error(file_name, e.mark, "cannot read this as a configuration: " + e.msg));
    return result;
  }
}

ConfigResult load_config_file(const std::string& path) {
  const auto refuse = [&](std::string message) {
    ConfigResult result;
    result.errors.push_back({path, 0, 0, std::move(message)});
    return result;
  };
  // O_NONBLOCK: a FIFO put in the file's place must not block the daemon in open().
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return refuse("is a directory, not a configuration file");
  if (!S_ISREG(st.st_mode)) return refuse("is not a regular file (a device, FIFO or socket)");
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigFileBytes) {
    return refuse("is " + std::to_string(st.st_size) + " bytes, more than a configuration may have (" +
                  std::to_string(kMaxConfigFileBytes) + ")");
  }
  // Read one byte past the limit: the file may have grown since fstat.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  if (have > kMaxConfigFileBytes) {
    return refuse("is more than " + std::to_string(kMaxConfigFileBytes) + " bytes, more than a configuration may have");
  }
  if (have == 0) return refuse("the file is empty: expected `scheduler:` and `tenants:`");
  text.resize(have);
  return parse_config(text, path);
}

}  // namespace cuslice
