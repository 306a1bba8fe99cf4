"""A kube-apiserver stand-in on Python's standard http.server: plaintext,
HTTP/1.1 only (no TLS, no h2c) — what `kubectl proxy`, kube's old insecure
port or a plain proxy in between speak. Written apart from the project's
fake apiserver (Rust, hyper: it takes h2c too), so a front door that assumes
HTTP/2 of a plaintext server fails against it.

It serves one release's aggregated discovery as stored in a fixtures folder
(`api.json`, `apis.json`), the unaggregated `/api/v1` and `/apis/{group}/{version}` made from it,
`/version`, health endpoints, and resource
requests for what that release serves: a list, an object, a watch (one
BOOKMARK, then held open until `timeoutSeconds`, 5 s by default) — kube's
404 Status for anything it does not serve. Every answer names the server in
`x-fake-apiserver`.

Usage: http1_apiserver.py --name NAME --fixtures DIR [--port 0]
  prints "listening PORT" on stdout once it accepts connections.
"""
import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
# kube's RequestInfo: these follow a namespace's name as its subresources.
NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def load(fixtures):
    def read(name):
        with open(os.path.join(fixtures, name), "rb") as f:
            return f.read()

    api, apis = read("api.json"), read("apis.json")
    served, lists = {}, {}
    for doc, core in ((json.loads(api), True), (json.loads(apis), False)):
        for item in doc.get("items", []):
            group = "" if core else item["metadata"]["name"]
            for v in item.get("versions", []):
                gv = v["version"] if core else "%s/%s" % (group, v["version"])
                listed = []
                for r in v.get("resources", []):
                    kind = r.get("responseKind", {}).get("kind", "")
                    served[(group, v["version"], r["resource"])] = {
                        "kind": kind,
                        "subresources": {s["subresource"] for s in r.get("subresources", [])},
                    }
                    listed.append({"name": r["resource"], "singularName": r.get("singularResource", ""),
                                   "namespaced": r.get("scope") == "Namespaced", "kind": kind, "verbs": r.get("verbs", [])})
                    for sub in r.get("subresources", []):
                        listed.append({"name": "%s/%s" % (r["resource"], sub["subresource"]), "singularName": "",
                                       "namespaced": r.get("scope") == "Namespaced",
                                       "kind": sub.get("responseKind", {}).get("kind", ""), "verbs": sub.get("verbs", [])})
                # The unaggregated APIResourceList of the group-version.
                lists["/api/v1" if core else "/apis/" + gv] = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": listed}
    # The body exactly as stored, re-serialised compactly (kube sends no
    # whitespace); the minor release from the folder's name (v1.37).
    minor = os.path.basename(os.path.normpath(fixtures)).split(".")[-1]
    return {"api": json.dumps(json.loads(api)).encode(), "apis": json.dumps(json.loads(apis)).encode(), "served": served, "lists": lists, "minor": minor}


def classify(path):
    """(group, version, namespace, resource, name, subresource) of a resource
    path, or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) == 2 or rest[2] not in NAMESPACE_SUBRESOURCES):
        namespace = rest[1]
        rest = rest[2:] if len(rest) > 2 else ["namespaces", rest[1]]
    if not rest:
        return None
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    return group, version, namespace, resource, name, sub


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "http1-apiserver"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.server.name, fmt % args))

    def send(self, code, body, content_type="application/json", headers=()):
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-fake-apiserver", self.server.name)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, code, doc):
        self.send(code, json.dumps(doc).encode())

    def not_found(self):
        self.send_json(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": "the server could not find the requested resource", "reason": "NotFound",
                             "details": {}, "code": 404})

    def handle_any(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query)
        docs = self.server.docs
        if path in ("/readyz", "/livez", "/healthz"):
            return self.send(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return self.send_json(200, {"major": "1", "minor": docs["minor"], "gitVersion": "v1.%s.0-http1+%s" % (docs["minor"], self.server.name)})
        if path in ("/api", "/apis"):
            if AGGREGATED in self.headers.get("accept", ""):
                return self.send(200, docs[path[1:]], AGGREGATED)
            return self.not_found()
        if path in docs["lists"]:
            return self.send_json(200, docs["lists"][path])
        c = classify(path)
        if c is None:
            return self.not_found()
        group, version, namespace, resource, name, sub = c
        r = docs["served"].get((group, version, resource))
        if r is None or (sub and sub not in r["subresources"]):
            return self.not_found()
        api_version = version if not group else "%s/%s" % (group, version)
        if query.get("watch", [""])[0] in ("1", "true") and not name:
            return self.watch(r["kind"], api_version, int(query.get("timeoutSeconds", ["5"])[0]))
        if name:
            meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
            return self.send_json(200, {"kind": r["kind"], "apiVersion": api_version, "metadata": meta})
        code = 201 if self.command == "POST" else 200
        return self.send_json(code, {"kind": r["kind"] + "List", "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": []})

    def watch(self, kind, api_version, timeout):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-fake-apiserver", self.server.name)
        self.end_headers()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        event = {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}}}
        chunk(json.dumps(event).encode() + b"\n")
        # Held open like a quiet watch; its client may leave first.
        time.sleep(min(max(timeout, 0), 30))
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    server.name = a.name
    server.docs = load(a.fixtures)
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
