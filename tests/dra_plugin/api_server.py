"""A Kubernetes API server for tests: HTTP on loopback, the resource.k8s.io/v1 paths the DRA
driver uses (ResourceSlices: get, create, replace, delete, list and watch; ResourceClaims: get),
bearer-token authentication, resourceVersions with conflicts on stale writes, and a check of
every object a client writes:

  - against the upstream schema of resource.k8s.io/v1 (resource_v1_schema.json: the OpenAPI
    definitions Kubernetes 1.36 publishes), with unknown fields refused as the API server's
    strict field validation does;
  - against the API server's own rules the schema cannot say (quantities, DNS labels, a
    capacity's request policy, one value per attribute, the limits on devices).

A write that fails is answered 422 and recorded in `rejected`, so that a test can say none
was. The test writes claims directly into `objects` (as kube-scheduler would allocate them)
and can stop and start the server on the same port (unavailable, then back).

Only the standard library is needed: without the jsonschema module (a GPU machine that has
just Python and PyTorch) the schema check is skipped with one warning on stderr, and
`SCHEMA_CHECKED` says so; the API server's own rules are still checked.
"""
import json
import pathlib
import re
import threading
import time
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import jsonschema
except ImportError:  # the CPU tests have it (scripts/setup.sh); a GPU machine may not
    jsonschema = None
    print("api_server: WARNING: no jsonschema module: objects are not checked against the "
          "resource.k8s.io/v1 schema, only against the API server's own rules", file=sys.stderr)
SCHEMA_CHECKED = jsonschema is not None

SCHEMA = json.loads((pathlib.Path(__file__).parent / "resource_v1_schema.json").read_text())
GROUP = "/apis/resource.k8s.io/v1"
# k8s.io/apimachinery's quantity syntax.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def strict(definition):
    """The definition with unknown fields refused, everywhere beneath it."""
    if isinstance(definition, dict):
        out = {k: strict(v) for k, v in definition.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(definition, list):
        return [strict(v) for v in definition]
    return definition


DEFINITIONS = strict(SCHEMA["definitions"])


def quantity_value(text):
    """A whole quantity as an integer (what the tests' amounts are)."""
    m = re.match(r"^(\d+)(Ki|Mi|Gi|Ti|Pi|Ei)?$", text)
    assert m, f"not a whole binary quantity: {text}"
    return int(m.group(1)) * BINARY.get(m.group(2) or "", 1)


def schema_errors(obj, kind):
    if jsonschema is None:
        return []
    schema = {"$ref": f"#/definitions/io.k8s.api.resource.v1.{kind}", "definitions": DEFINITIONS}
    validator = jsonschema.Draft4Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def slice_rule_errors(obj):
    """The API server's validation of a ResourceSlice beyond its schema."""
    errors = []
    spec = obj.get("spec", {})
    devices = spec.get("devices", [])
    if len(devices) > 128:
        errors.append("spec.devices: more than 128")
    for d in devices:
        name = d.get("name", "")
        if not DNS_LABEL.match(name):
            errors.append(f"device {name}: not a DNS label")
        attributes, capacity = d.get("attributes", {}), d.get("capacity", {})
        if len(attributes) + len(capacity) > 32:
            errors.append(f"device {name}: more than 32 attributes and capacities")
        for key, value in attributes.items():
            if len(value) != 1:
                errors.append(f"device {name}: attribute {key} must have exactly one value")
            if "version" in value and not re.match(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$", value["version"]):
                errors.append(f"device {name}: attribute {key}: {value['version']} is not a semantic version")
        for key, cap in capacity.items():
            for q in [cap.get("value", "")] + [v for v in cap.get("requestPolicy", {}).get("validRange", {}).values()] \
                    + ([cap["requestPolicy"]["default"]] if "default" in cap.get("requestPolicy", {}) else []):
                if not QUANTITY.match(q):
                    errors.append(f"device {name}: capacity {key}: {q} is not a quantity")
            policy = cap.get("requestPolicy")
            if policy is not None:
                if not d.get("allowMultipleAllocations"):
                    errors.append(f"device {name}: capacity {key} has a requestPolicy but the device is not shared")
                r = policy.get("validRange")
                if r is not None:
                    if "default" not in policy:
                        errors.append(f"device {name}: capacity {key}: validRange without default")
                        continue
                    lo, default = quantity_value(r["min"]), quantity_value(policy["default"])
                    hi = quantity_value(r["max"]) if "max" in r else None
                    step = quantity_value(r["step"]) if "step" in r else None
                    if default < lo or (hi is not None and default > hi):
                        errors.append(f"device {name}: capacity {key}: default outside validRange")
                    if step and (default - lo) % step:
                        errors.append(f"device {name}: capacity {key}: default not on a step")
                    if hi is not None and hi > quantity_value(cap["value"]):
                        errors.append(f"device {name}: capacity {key}: validRange max above the capacity")
    return errors


class Store:
    def __init__(self, token):
        self.token = token
        self.lock = threading.Condition()
        self.version = 100
        self.objects = {}  # path -> object
        self.rejected = []  # (method, path, errors)
        self.writes = []  # (method, path)

    def bump(self, obj):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.lock.notify_all()

    def put_claim(self, claim):
        with self.lock:
            meta = claim["metadata"]
            path = f"{GROUP}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
            errors = schema_errors(claim, "ResourceClaim")
            assert not errors, errors  # the test's own claims must be right too
            self.bump(claim)
            self.objects[path] = claim

    def slices(self):
        with self.lock:
            return {p.rsplit("/", 1)[1]: json.loads(json.dumps(o)) for p, o in self.objects.items()
                    if p.startswith(GROUP + "/resourceslices/")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store = None  # set by ApiServer

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, message):
        self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})

    def body(self):
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"null")

    def authorized(self):
        if self.headers.get("Authorization") == f"Bearer {self.store.token}":
            return True
        self.status(401, "Unauthorized")
        return False

    def do_GET(self):
        if not self.authorized():
            return
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if query.get("watch") == "true":
            return self.watch(url.path, query)
        with self.store.lock:
            obj = self.store.objects.get(url.path)
        if obj is None:
            return self.status(404, f"{url.path} not found")
        self.reply(200, obj)

    def watch(self, path, query):
        """Events for the objects under `path` named by the field selector, from the given
        resourceVersion, until timeoutSeconds."""
        name = query.get("fieldSelector", "").removeprefix("metadata.name=")
        target = f"{path}/{name}"
        since = int(query.get("resourceVersion") or 0)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + float(query.get("timeoutSeconds", "30"))
        seen = since
        try:
            while time.monotonic() < deadline and not self.store.closed:
                with self.store.lock:
                    self.store.lock.wait(timeout=0.2)
                    obj = self.store.objects.get(target)
                    rv = int(obj["metadata"]["resourceVersion"]) if obj else None
                    gone = obj is None and seen != 0 and target in self.store.deleted
                if obj is not None and rv > seen:
                    self.chunk({"type": "MODIFIED", "object": obj})
                    seen = rv
                elif gone:
                    self.chunk({"type": "DELETED", "object": {"metadata": {"name": name}}})
                    self.store.deleted.discard(target)
                    seen = 0
            if not self.store.closed:  # a server that stops drops its watches mid-stream
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def chunk(self, event):
        data = (json.dumps(event) + "\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        if not self.authorized():
            return
        obj = self.body()
        if self.path != GROUP + "/resourceslices":
            return self.status(405, f"POST {self.path} is not served here")
        self.write("POST", f"{self.path}/{obj.get('metadata', {}).get('name', '')}", obj, create=True)

    def do_PUT(self):
        if not self.authorized():
            return
        self.write("PUT", self.path, self.body(), create=False)

    def do_DELETE(self):
        if not self.authorized():
            return
        with self.store.lock:
            obj = self.store.objects.pop(self.path, None)
            if obj is not None:
                self.store.deleted.add(self.path)
                self.store.bump({})
        if obj is None:
            return self.status(404, f"{self.path} not found")
        self.reply(200, obj)

    def write(self, method, path, obj, create):
        if not path.startswith(GROUP + "/resourceslices/"):
            return self.status(405, f"{method} {path} is not served here")
        errors = []
        if obj.get("apiVersion") != "resource.k8s.io/v1" or obj.get("kind") != "ResourceSlice":
            errors.append("apiVersion and kind must be resource.k8s.io/v1 ResourceSlice")
        errors += schema_errors(obj, "ResourceSlice") + slice_rule_errors(obj)
        if errors:
            self.store.rejected.append((method, path, errors))
            return self.status(422, "; ".join(errors))
        with self.store.lock:
            have = self.store.objects.get(path)
            if create and have is not None:
                return self.status(409, f"{path} already exists")
            if not create:
                if have is None:
                    return self.status(404, f"{path} not found")
                if obj["metadata"].get("resourceVersion") != have["metadata"]["resourceVersion"]:
                    return self.status(409, "the object has been modified; please apply your changes to the "
                                            "latest version and try again")
            self.store.bump(obj)
            self.store.objects[path] = obj
            self.store.writes.append((method, path))
        self.reply(201 if create else 200, obj)


class ApiServer:
    """The server on 127.0.0.1:<port>, in threads of this process."""

    def __init__(self, token="test-token"):
        self.store = Store(token)
        self.store.deleted = set()
        self.store.closed = False
        self.port = 0
        self.httpd = None
        self.start()

    def start(self):
        self.store.closed = False
        handler = type("BoundHandler", (Handler,), {"store": self.store})
        ThreadingHTTPServer.allow_reuse_address = True
        ThreadingHTTPServer.daemon_threads = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.store.closed = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def kubeconfig(self, path, token_file=None):
        """A kubeconfig (JSON is YAML) naming this server."""
        user = {"tokenFile": str(token_file)} if token_file else {"token": self.store.token}
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "driver", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "driver"}}]}))
        return path
