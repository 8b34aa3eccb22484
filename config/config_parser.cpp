// Parsing: YAML text becomes a Config (parse_config, tenant_config.h). Owns the schema (which
// keys each mapping may hold, and where each value goes) and the checks on one tenant's values
// as they are read (a name, a memory over the card, a limit below the share). Records where
// the values that the rules across tenants point at were written, and runs those rules
// (config_validation.h) once the whole file is read.
//
// Never opens a file (config_file.cpp) and never decides a rule across tenants itself.
#include <arpa/inet.h>

#include <set>

#include "config/config_errors.h"
#include "config/config_validation.h"
#include "config/node_reader.h"
#include "config/tenant_config.h"

namespace cuslice {
namespace {

// Walks the YAML tree once, filling a Config; every problem goes to the error list.
class ConfigParser {
 public:
  ConfigParser(ConfigErrors& errors, Config& config, SourcePositions& positions)
      : errors_(errors), read_(errors), config_(config), positions_(positions) {}

  // False when the document is not a mapping, and so holds nothing the rules could check.
  bool parse(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      errors_.add(root, "the file is empty: expected `scheduler:` and `tenants:`");
      return false;
    }
    if (!read_.expect_map(root, "the top level")) return false;
    read_.check_keys(root, {"scheduler", "tenants"});
    if (root["scheduler"]) parse_scheduler(root["scheduler"]);
    if (root["tenants"]) {
      parse_tenants(root["tenants"]);
    } else {
      errors_.add(root, "missing `tenants:` (a list of tenants; `[]` when the device plugin makes them all)");
    }
    return true;
  }

 private:
  // --- scheduler: ---------------------------------------------------------------------------

  void parse_scheduler(const YAML::Node& node) {
    if (!read_.expect_map(node, "`scheduler`")) return;
    read_.check_keys(node, {"quantum", "limit_window", "lower_priority_timeslice", "gpu_memory", "default_tenant",
                            "metrics_port", "metrics_address", "preemption", "spatial"});
    parse_scheduler_timing(node);
    SchedulerSettings& s = config_.scheduler;
    if (const YAML::Node m = node["gpu_memory"]) {
      if (auto b = read_.bytes(m, "gpu_memory",
                               "`gpu_memory` is the size of the card: write bytes, e.g. 80GiB, not a percentage"))
        s.gpu_memory = *b;
    }
    if (const YAML::Node d = node["default_tenant"]) {
      if (read_.expect_scalar(d, "default_tenant")) {
        s.default_tenant = d.Scalar();
        positions_.default_tenant = d.Mark();
      }
    }
    if (const YAML::Node p = node["metrics_port"]) {
      if (auto port = read_.whole_number(p, "metrics_port", 1, 65535, "a TCP port from 1 to 65535"))
        s.metrics_port = static_cast<uint16_t>(*port);
    }
    if (node["preemption"]) parse_preemption(node["preemption"]);
    if (const YAML::Node a = node["metrics_address"]) parse_metrics_address(a);
    if (node["spatial"]) parse_spatial(node["spatial"]);
  }

  // --- scheduler.spatial: ---------------------------------------------------------------------

  void parse_spatial(const YAML::Node& node) {
    if (!read_.expect_map(node, "`spatial`")) return;
    read_.check_keys(node, {"gpus", "mps_control", "pipe_directory", "log_directory"});
    SpatialSettings& sp = config_.scheduler.spatial;
    if (const YAML::Node g = node["gpus"]) {
      if (g.IsScalar() && g.Scalar() == "all") {
        sp.all_gpus = true;
      } else {
        TenantConfig scratch;  // the same list as a tenant's `gpus`
        parse_gpus(g, scratch, "spatial.gpus");
        sp.gpu_mask = scratch.gpu_mask;
      }
    } else {
      errors_.add(node, "`spatial` needs `gpus`: a list of GPU indices, or `all`");
    }
    const std::pair<const char*, std::string*> paths[] = {
        {"mps_control", &sp.mps_control}, {"pipe_directory", &sp.pipe_directory}, {"log_directory", &sp.log_directory}};
    for (const auto& [key, field] : paths) {
      const YAML::Node n = node[key];
      if (!n || !read_.expect_scalar(n, key)) continue;
      if (n.Scalar().empty() || n.Scalar()[0] != '/' || n.Scalar().size() >= 200)
        errors_.add(n, std::string("`") + key + "` must be an absolute path of fewer than 200 characters");
      else
        *field = n.Scalar();
    }
  }

  // quantum, limit_window and lower_priority_timeslice.
  void parse_scheduler_timing(const YAML::Node& node) {
    SchedulerSettings& s = config_.scheduler;
    if (node["quantum"]) {
      if (auto q = read_.bounded_duration(node["quantum"], "quantum", kMinQuantum, kMaxQuantum)) s.quantum = *q;
    }
    if (node["limit_window"]) {
      if (auto w = read_.bounded_duration(node["limit_window"], "limit_window", kMinLimitWindow, kMaxLimitWindow))
        s.limit_window = *w;
    }
    if (const YAML::Node t = node["lower_priority_timeslice"]) parse_lower_priority_timeslice(t);
  }

  void parse_lower_priority_timeslice(const YAML::Node& t) {
    SchedulerSettings& s = config_.scheduler;
    if (t.IsScalar() && t.Scalar() == "off") {
      s.lower_priority_timeslice = std::chrono::microseconds(0);
    } else if (auto d = read_.bounded_duration(t, "lower_priority_timeslice", kMinLowerTimeslice, kMaxLowerTimeslice)) {
      if (*d % std::chrono::microseconds(1) != std::chrono::nanoseconds(0))
        errors_.add(t, "`lower_priority_timeslice` " + quoted(t) + " is finer than the GPU takes: write whole microseconds");
      else
        s.lower_priority_timeslice = std::chrono::duration_cast<std::chrono::microseconds>(*d);
    }
  }

  void parse_metrics_address(const YAML::Node& a) {
    if (!read_.expect_scalar(a, "metrics_address")) return;
    in6_addr parsed{};
    const std::string& text = a.Scalar();
    if (inet_pton(AF_INET, text.c_str(), &parsed) == 1 || inet_pton(AF_INET6, text.c_str(), &parsed) == 1) {
      config_.scheduler.metrics_address = text;
    } else {
      errors_.add(a, "bad `metrics_address` " + quoted(a) + ": expected an IPv4 or IPv6 address, e.g. 127.0.0.1, ::1 or 0.0.0.0");
    }
  }

  // --- scheduler.preemption: ------------------------------------------------------------------

  void parse_preemption(const YAML::Node& node) {
    if (!read_.expect_map(node, "`preemption`")) return;
    read_.check_keys(node, {"allocation_wait", "resume_holdoff", "host_reserve", "resume_margin", "room_margin", "unsuspendable",
                                "fast"});
    PreemptionSettings& p = config_.scheduler.preemption;
    if (node["fast"]) {
      if (auto b = read_.boolean(node["fast"], "fast")) p.fast = *b;
    }
    if (const YAML::Node v = node["unsuspendable"]) parse_unsuspendable(v);
    if (node["allocation_wait"]) {
      if (auto d = read_.duration(node["allocation_wait"], "allocation_wait")) p.allocation_wait = *d;
    }
    if (node["resume_holdoff"]) {
      if (auto d = read_.duration(node["resume_holdoff"], "resume_holdoff")) p.resume_holdoff = *d;
    }
    const std::pair<const char*, uint64_t*> sizes[] = {
        {"host_reserve", &p.host_reserve}, {"resume_margin", &p.resume_margin}, {"room_margin", &p.room_margin}};
    for (const auto& [key, field] : sizes) {
      const YAML::Node n = node[key];
      if (!n) continue;
      if (auto b = read_.bytes(n, key, std::string("`") + key + "` is a size in bytes, e.g. 4GiB, not a percentage"))
        *field = *b;
    }
  }

  void parse_unsuspendable(const YAML::Node& v) {
    if (!read_.expect_scalar(v, "unsuspendable")) return;
    PreemptionSettings& p = config_.scheduler.preemption;
    if (v.Scalar() == "stop") p.stop_unsuspendable = true;
    else if (v.Scalar() == "keep") p.stop_unsuspendable = false;
    else errors_.add(v, "bad `unsuspendable` " + quoted(v) + ": expected stop or keep");
  }

  // --- tenants: -------------------------------------------------------------------------------

  // Pinned host memory each process of a preemptible tenant prepares for the fast suspension:
  // bytes, at most what the segment holds in MiB.
  void parse_host_pool(const YAML::Node& n, TenantConfig& t) {
    const auto bytes = read_.bytes(n, "host_pool", "`host_pool` is a size in bytes, e.g. 24GiB, not a percentage");
    if (!bytes) return;
    if (*bytes > kMaxHostPool) {
      errors_.add(n, "`host_pool` " + quoted(n) + " is more than 1 PiB");
      return;
    }
    t.host_pool = *bytes;
  }

  void parse_tenants(const YAML::Node& node) {
    // Empty is allowed: on a Kubernetes node the device plugin may make every tenant.
    if (!node.IsSequence()) {
      errors_.add(node, "`tenants` must be a list of tenants (`- name: ...`, or `[]`)");
      return;
    }
    if (node.size() > kMaxConfigTenants) {
      errors_.add(node, "too many tenants: " + std::to_string(node.size()) + " (at most " +
                            std::to_string(kMaxConfigTenants) + ")");
    }
    std::set<std::string> names;
    for (const YAML::Node& item : node) {
      TenantConfig tenant;
      if (!parse_tenant(item, tenant)) continue;
      if (!names.insert(tenant.name).second) {
        errors_.add(item["name"], "duplicate tenant name " + quoted(tenant.name));
        continue;
      }
      positions_.tenant_names[tenant.name] = item["name"].Mark();
      if (item["memory"]) positions_.memories[tenant.name] = item["memory"].Mark();
      config_.tenants.push_back(std::move(tenant));
    }
  }

  // Returns false when the tenant has no usable name (it is then left out entirely; its
  // other errors are still reported).
  bool parse_tenant(const YAML::Node& item, TenantConfig& t) {
    if (!read_.expect_map(item, "a tenant")) return false;
    read_.check_keys(item, {"name", "priority", "memory", "compute", "match", "allow_env", "on_violation", "preemptible", "gpus", "host_pool", "spatial"});
    const bool named = parse_name(item, t);
    if (const YAML::Node p = item["priority"]) parse_priority(p, t);
    if (const YAML::Node m = item["memory"]) parse_memory(m, t);
    if (const YAML::Node c = item["compute"]) parse_compute(c, t);
    if (const YAML::Node m = item["match"]) parse_match(m, t);
    if (item["allow_env"]) {
      if (auto b = read_.boolean(item["allow_env"], "allow_env")) t.allow_env = *b;
    }
    if (const YAML::Node v = item["on_violation"]) parse_on_violation(v, t);
    if (item["preemptible"]) {
      if (auto b = read_.boolean(item["preemptible"], "preemptible")) t.preemptible = *b;
    }
    if (const YAML::Node g = item["gpus"]) parse_gpus(g, t);
    if (const YAML::Node n = item["host_pool"]) parse_host_pool(n, t);
    if (item["spatial"]) {
      if (auto b = read_.boolean(item["spatial"], "spatial")) t.spatial = *b;
    }
    check_spatial_member(item, t);
    return named;
  }

  // `sm` only means something where the tenant runs side by side with others.
  void check_spatial_member(const YAML::Node& item, const TenantConfig& t) {
    if (!t.sm_percent) return;
    for (uint32_t g = 0; g < kMaxConfigGpus; ++g)
      if (config_.spatial_member(t, g)) return;
    errors_.add(item["compute"]["sm"],
                "`sm` applies on spatial GPUs only, and this tenant runs on none: every GPU it may use must be in "
                "`scheduler.spatial.gpus`, and it must not say `spatial: false`");
  }

  // `gpus: [0, 1]`: GPU indices as nvidia-smi numbers them, each once.
  void parse_gpus(const YAML::Node& g, TenantConfig& t, const std::string& key = "gpus") {
    if (!g.IsSequence() || g.size() == 0) {
      errors_.add(g, "`" + key + "` is a list of GPU indices, e.g. [0, 1]; leave it out for every GPU");
      return;
    }
    uint32_t mask = 0;
    for (const YAML::Node& item : g) {
      const auto index = read_.whole_number(item, key, 0, kMaxConfigGpus - 1,
                                            "a GPU index from 0 to " + std::to_string(kMaxConfigGpus - 1));
      if (!index) return;
      if (mask & (1u << *index)) {
        errors_.add(item, "GPU " + std::to_string(*index) + " is listed twice in `" + key + "`");
        return;
      }
      mask |= 1u << *index;
    }
    t.gpu_mask = mask;
  }

  bool parse_name(const YAML::Node& item, TenantConfig& t) {
    const YAML::Node n = item["name"];
    if (!n) {
      errors_.add(item, "a tenant needs a `name`");
      return false;
    }
    if (!read_.expect_scalar(n, "name")) return false;
    t.name = n.Scalar();
    if (!valid_tenant_name(t.name)) {
      errors_.add(n, "bad tenant name " + quoted(t.name) + ": 1 to " + std::to_string(kMaxTenantNameLength) +
                         " characters of letters, digits, '-', '_' or '.'");
      return false;
    }
    return true;
  }

  void parse_priority(const YAML::Node& p, TenantConfig& t) {
    if (!read_.expect_scalar(p, "priority")) return;
    const std::string& v = p.Scalar();
    if (v == "high") t.priority = Priority::kHigh;
    else if (v == "normal") t.priority = Priority::kNormal;
    else if (v == "low") t.priority = Priority::kLow;
    else errors_.add(p, "bad priority " + quoted(v) + ": expected high, normal or low");
  }

  void parse_memory(const YAML::Node& m, TenantConfig& t) {
    auto spec = read_.size(m, "memory");
    if (!spec) return;
    const uint64_t* card = config_.scheduler.gpu_memory ? &*config_.scheduler.gpu_memory : nullptr;
    if (card && spec->kind == SizeSpec::Kind::kBytes && spec->bytes > *card) {
      errors_.add(m, "memory " + quoted(m) + " is more than the card (`gpu_memory` is " + std::to_string(*card) +
                         " bytes)");
    }
    if (spec->kind == SizeSpec::Kind::kBytes || read_.representable_percent(m, "memory", spec->percent)) t.memory = spec;
  }

  void parse_compute(const YAML::Node& c, TenantConfig& t) {
    if (!read_.expect_map(c, "`compute`")) return;
    read_.check_keys(c, {"share", "limit", "sm"});
    if (const YAML::Node sm = c["sm"]) parse_sm(sm, t);
    if (c["share"]) {
      t.share_percent = read_.percent(c["share"], "share");
      if (t.share_percent && !read_.representable_percent(c["share"], "share", *t.share_percent))
        t.share_percent.reset();
      positions_.shares.push_back(c["share"]);
      if (!t.name.empty()) positions_.share_marks[t.name] = c["share"].Mark();
    }
    if (c["limit"]) {
      if (auto l = read_.percent(c["limit"], "limit"); l && read_.representable_percent(c["limit"], "limit", *l)) {
        t.limit_percent = *l;
        if (t.share_percent && *l < *t.share_percent) {
          errors_.add(c["limit"], "`limit` is below `share`: the tenant could never get its share");
        }
      }
    }
  }

  // `sm: 25%`: MPS takes whole percentages of the SMs.
  void parse_sm(const YAML::Node& sm, TenantConfig& t) {
    const auto p = read_.percent(sm, "sm");
    if (!p) return;
    if (*p < 1.0 || *p != static_cast<double>(static_cast<uint32_t>(*p)))
      errors_.add(sm, "`sm` " + quoted(sm) + " must be a whole percentage from 1% to 100%");
    else
      t.sm_percent = static_cast<uint32_t>(*p);
  }

  void parse_match(const YAML::Node& m, TenantConfig& t) {
    if (!read_.expect_map(m, "`match`")) return;
    read_.check_keys(m, {"uid", "gid", "cgroup"});
    if (m["uid"]) t.match.uid = read_.id(m["uid"], "uid");
    if (m["gid"]) t.match.gid = read_.id(m["gid"], "gid");
    if (const YAML::Node cg = m["cgroup"]) {
      if (read_.expect_scalar(cg, "cgroup")) {
        if (cg.Scalar().empty() || cg.Scalar()[0] != '/') {
          errors_.add(cg, "`cgroup` must be an absolute cgroup path prefix, e.g. /kubepods");
        } else {
          t.match.cgroup_prefix = cg.Scalar();
        }
      }
    }
  }

  void parse_on_violation(const YAML::Node& v, TenantConfig& t) {
    if (!read_.expect_scalar(v, "on_violation")) return;
    if (v.Scalar() == "report") t.kill_on_violation = false;
    else if (v.Scalar() == "kill") t.kill_on_violation = true;
    else errors_.add(v, "bad on_violation " + quoted(v) + ": expected report or kill");
  }

  ConfigErrors& errors_;
  NodeReader read_;
  Config& config_;
  SourcePositions& positions_;
};

}  // namespace

ConfigResult parse_config(std::string_view yaml_text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    ConfigResult result;
    result.errors.push_back(error_at(file_name, e.mark, "YAML syntax error: " + e.msg));
    return result;
  }
  try {
    ConfigResult result;
    ConfigErrors errors(file_name);
    SourcePositions positions;
    if (ConfigParser(errors, result.config, positions).parse(root)) {
      check_across_tenants(result.config, positions, errors);
    }
    result.errors = errors.take();
    return result;
  } catch (const YAML::Exception& e) {
    // The parser checks each node's type before it reads it; this is the last line of
    // defence, so that no input can take the daemon down with an exception.
    ConfigResult result;
    result.errors.push_back(error_at(file_name, e.mark, "cannot read this as a configuration: " + e.msg));
    return result;
  }
}

}  // namespace cuslice
