"""The dashboard's graph layout, and the listener's one access rule, request by request."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from listener.web import access
from listener.web.dashboard import graph

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


def test_on_loopback_the_token_is_needed_too_and_only_a_loopback_host_name_is_served() -> None:
    gate = access.Gate("s3cret", loopback=True, port=8787)
    bearer = {"Authorization": "Bearer s3cret"}
    for host in ("127.0.0.1:8787", "localhost:8787", "[::1]:8787", "127.0.0.2"):
        assert access.signed_in(_request(host=host, **bearer), gate), host
        assert not access.signed_in(_request(host=host), gate), host
    for host in ("evil.example:8787", "10.0.0.5:8787", "localhost.evil.example"):
        assert not access.host_allowed(_request(host=host), gate), host
        assert not access.signed_in(_request(host=host, **bearer), gate), host


def test_the_token_is_presented_as_a_bearer_header_or_the_ports_cookie() -> None:
    gate = access.Gate("s3cret", loopback=False, port=8787)
    assert not access.signed_in(_request(host="dash.example"), gate)
    assert not access.signed_in(_request(host="dash.example", Authorization="Bearer nope"), gate)
    assert not access.signed_in(_request(host="dash.example", Authorization="Basic s3cret"), gate)
    assert access.signed_in(_request(host="dash.example", Authorization="Bearer s3cret"), gate)
    assert access.signed_in(_request(host="d", Cookie="ceaseless_dashboard_8787=s3cret"), gate)
    # Cookies ignore ports: another listener's cookie on this host is not this one's.
    assert not access.signed_in(_request(host="d", Cookie="ceaseless_dashboard_8788=s3cret"), gate)
    assert not access.signed_in(_request(host="d", Authorization="Bearer "), gate)


def test_a_post_needs_the_csrf_token_and_its_own_origin() -> None:
    gate = access.Gate("t", loopback=True, port=8787)
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
    assert access.Gate("t", True, 1).csrf != access.Gate("t", True, 1).csrf
