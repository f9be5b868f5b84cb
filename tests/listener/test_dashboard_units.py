"""The dashboard's pure parts: the graph layout and the access rules, request by request."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from listener.dashboard import access, graph

_DIAMOND = {
    "nodes": [{"id": n} for n in "ABCD"],
    "edges": [{"from": a, "to": b} for a, b in [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")]],
}


def test_nodes_sit_in_the_column_of_their_longest_path_and_every_edge_points_right() -> None:
    placed = graph.layout(_DIAMOND)
    x = {n.id: n.x for n in placed.nodes}
    assert x["A"] < x["B"] == x["C"] < x["D"]
    assert len({(n.x, n.y) for n in placed.nodes}) == 4
    assert all(e.x2 > e.x1 for e in placed.edges) and len(placed.edges) == 4
    assert all(n.x + graph.NODE_W <= placed.width for n in placed.nodes)
    assert all(n.y + graph.NODE_H <= placed.height for n in placed.nodes)


def test_a_long_edge_puts_its_target_after_the_longest_path() -> None:
    g = {
        "nodes": [{"id": n} for n in "ABC"],
        "edges": [{"from": "A", "to": "C"}, {"from": "A", "to": "B"}, {"from": "B", "to": "C"}],
    }
    x = {n.id: n.x for n in graph.layout(g).nodes}
    assert x["A"] < x["B"] < x["C"]


def test_a_single_node_and_an_empty_graph_are_drawn() -> None:
    assert [n.id for n in graph.layout({"nodes": [{"id": "only"}]}).nodes] == ["only"]
    assert graph.layout({"nodes": []}).nodes == []


def _request(method: str = "GET", host: str = "127.0.0.1:8787", **headers: str):
    return make_mocked_request(method, "/approvals/x", headers={"Host": host, **headers})


def test_loopback_is_open_but_only_to_a_loopback_host_name() -> None:
    gate = access.Access(loopback=True, token=None)
    for host in ("127.0.0.1:8787", "localhost:8787", "[::1]:8787", "127.0.0.2"):
        assert access.authorized(_request(host=host), gate), host
    for host in ("evil.example:8787", "10.0.0.5:8787", "localhost.evil.example"):
        assert not access.authorized(_request(host=host), gate), host


def test_beyond_loopback_the_token_is_needed_as_a_bearer_header_or_the_cookie() -> None:
    gate = access.Access(loopback=False, token="s3cret")
    assert not access.authorized(_request(host="dash.example"), gate)
    assert not access.authorized(_request(host="dash.example", Authorization="Bearer nope"), gate)
    assert not access.authorized(_request(host="dash.example", Authorization="Basic s3cret"), gate)
    assert access.authorized(_request(host="dash.example", Authorization="Bearer s3cret"), gate)
    cookie = f"{access.COOKIE}=s3cret"
    assert access.authorized(_request(host="dash.example", Cookie=cookie), gate)
    no_token = access.Access(loopback=False, token=None)
    assert not access.authorized(_request(host="d", Authorization="Bearer "), no_token)


def test_a_post_needs_the_csrf_token_and_its_own_origin() -> None:
    gate = access.Access(loopback=True, token=None)
    own = "http://127.0.0.1:8787"
    assert access.same_origin_post(_request("POST", Origin=own), gate, gate.csrf)
    assert access.same_origin_post(_request("POST", Referer=own + "/runs/x"), gate, gate.csrf)
    assert not access.same_origin_post(_request("POST", Origin=own), gate, None)
    assert not access.same_origin_post(_request("POST", Origin=own), gate, gate.csrf + "x")
    assert not access.same_origin_post(_request("POST"), gate, gate.csrf)
    assert not access.same_origin_post(_request("POST", Origin="null"), gate, gate.csrf)
    assert not access.same_origin_post(
        _request("POST", Origin="http://127.0.0.1:9999"), gate, gate.csrf
    )
    assert not access.same_origin_post(
        _request("POST", Origin=own, **{"Sec-Fetch-Site": "same-site"}), gate, gate.csrf
    )


def test_each_process_has_its_own_csrf_token() -> None:
    assert access.Access(True, None).csrf != access.Access(True, None).csrf
