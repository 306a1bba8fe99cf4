"""What the Python `kubernetes` client discovers through the front door.

Usage: discovery.py URL [--ca FILE --token TOKEN] [APIVERSION:KIND ...]
  -> prints a JSON report on stdout. Without kinds: the fakes' three.
"""
import argparse
import json
import os
import tempfile

from kubernetes import client, dynamic


FAKE_KINDS = [
    ("lifecycle.k8s.io/v1alpha1", "EvictionRequest"),
    ("resource.k8s.io/v1alpha2", "ResourceClaimParameters"),
    ("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
]


def main(url, ca=None, token=None, kinds=FAKE_KINDS):
    cfg = client.Configuration()
    cfg.host = url
    if ca:
        cfg.ssl_ca_cert = ca
    if token:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    api = client.ApiClient(cfg)
    report = {}

    # Unaggregated discovery, as ApisApi exposes it.
    groups = client.ApisApi(api).get_api_versions()
    report["groups"] = sorted(g.name for g in groups.groups)

    # The dynamic client's discovery (group list, then each group-version),
    # and a list through it.
    cache = os.path.join(tempfile.mkdtemp(), "discovery.json")
    dc = dynamic.DynamicClient(api, cache_file=cache)
    report["resources"] = {}
    for api_version, kind in kinds:
        r = dc.resources.get(api_version=api_version, kind=kind)
        listed = r.get(namespace="default") if r.namespaced else r.get()
        report["resources"][f"{api_version}/{kind}"] = {
            "name": r.name,
            "listKind": listed.kind,
            "servedBy": listed.to_dict().get("servedBy", {}).get("server"),
        }
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--ca")
    p.add_argument("--token")
    p.add_argument("kinds", nargs="*", help="APIVERSION:KIND")
    a = p.parse_intermixed_args()
    kinds = [tuple(k.rsplit(":", 1)) for k in a.kinds] or FAKE_KINDS
    main(a.url, a.ca, a.token, kinds)
