"""The API emulator's lists served from each stored object's cached JSON (``encoded``)
and the store's sorted names: a paged list shows every write made since the last one,
in (namespace, name) order, with the very bytes encoding the list whole would write.
Driven over HTTP with the official client."""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client

from podnet.core.cluster.port import POD
from podnet.sim.apiserver import ApiServer
from podnet.sim.encoded import EncodedObjects, encode

NS = "default"
MERGE = "application/merge-patch+json"


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "demo:1"}]}}


def pages(core: client.CoreV1Api, limit: int = 2) -> list[tuple[str, str, str]]:
    """Every pod as (name, image, resourceVersion), following the continue tokens."""
    out, token = [], None
    while True:
        page = core.list_namespaced_pod(NS, limit=limit, _continue=token)
        out += [(p.metadata.name, p.spec.containers[0].image, p.metadata.resource_version)
                for p in page.items]
        token = page.metadata._continue
        if not token:
            return out


def test_a_paged_list_shows_each_write_since_the_last_list(
        server: ApiServer, core: client.CoreV1Api) -> None:
    """An update, a create sorting in between, and a delete made after a list (each
    object's JSON cached by then) all show in the next one, in name order; the unchanged
    objects are written from the cache, not encoded again."""
    for name in ("a", "c", "e"):
        core.create_namespaced_pod(NS, pod(name))
    first = pages(core)
    assert [n for n, _, _ in first] == ["a", "c", "e"]
    encoded = server.encoded.encoded
    core.patch_namespaced_pod("c", NS, {"spec": {"containers": [{"name": "app",
                                                                 "image": "demo:2"}]}},
                              _content_type=MERGE)
    core.create_namespaced_pod(NS, pod("b"))
    core.delete_namespaced_pod("e", NS, grace_period_seconds=0)
    second = pages(core)
    assert [(n, i) for n, i, _ in second] == [("a", "demo:1"), ("b", "demo:1"),
                                              ("c", "demo:2")]
    assert second[0][2] == first[0][2] and second[2][2] != first[1][2]
    assert server.encoded.encoded == encoded + 2  # only the patched and the new pod
    assert server.encoded.reused >= 1


def test_a_list_body_is_what_encoding_it_whole_writes(server: ApiServer) -> None:
    """The raw answer of a paged list equals ``json.dumps`` of the list object (compact,
    ASCII), with items, continue token and resourceVersion as the store has them."""
    server.cluster.create(POD, {"metadata": {"name": "ü", "namespace": NS,
                                             "annotations": {"note": "é\u2028"}},
                                "spec": {"containers": [{"name": "app", "image": "x"}]}})
    server.cluster.create(POD, pod("z") | {"metadata": {"name": "z", "namespace": NS}})
    http = urllib3.PoolManager()
    for _ in range(2):  # encoded, then cached
        answer = http.request("GET", f"{server.url}/api/v1/namespaces/{NS}/pods?limit=1")
        body = json.loads(answer.data)
        assert answer.data == encode(body) and answer.headers["Content-Type"] == \
            "application/json"
        assert [o["metadata"]["name"] for o in body["items"]] == ["z"]  # "z" < "ü"
        assert body["metadata"]["continue"] and body["kind"] == "PodList"
    http.clear()


def test_the_cache_starts_over_past_its_budget() -> None:
    """A budget smaller than two objects' JSON: the second one clears the first, so
    objects deleted long ago cannot hold memory without bound."""
    first = {"metadata": {"name": "a", "namespace": NS}, "data": "x" * 100}
    second = {"metadata": {"name": "b", "namespace": NS}, "data": "y" * 100}
    cache = EncodedObjects(budget=len(encode(first)) + 10)
    assert cache.of(POD, first) == encode(first) and len(cache) == 1
    assert cache.of(POD, second) == encode(second) and len(cache) == 1
    changed = {**second, "data": "z"}  # a new version under the same key
    assert cache.of(POD, changed) == encode(changed) and cache.encoded == 3
