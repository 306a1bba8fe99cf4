"""What the Python `kubernetes` client discovers through the front door.

Usage: discovery.py URL  -> prints a JSON report on stdout.
"""
import json
import os
import sys
import tempfile

from kubernetes import client, dynamic


def main(url):
    cfg = client.Configuration()
    cfg.host = url
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
    for api_version, kind in [
        ("lifecycle.k8s.io/v1alpha1", "EvictionRequest"),
        ("resource.k8s.io/v1alpha2", "ResourceClaimParameters"),
        ("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
    ]:
        r = dc.resources.get(api_version=api_version, kind=kind)
        listed = r.get(namespace="default") if r.namespaced else r.get()
        report["resources"][f"{api_version}/{kind}"] = {
            "name": r.name,
            "listKind": listed.kind,
            "servedBy": listed.to_dict().get("servedBy", {}).get("server"),
        }
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
