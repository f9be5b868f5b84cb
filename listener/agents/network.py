"""An agent's network: a namespace of its own, and egress only through its run's proxy.

Agents read untrusted text, and a host's loopback is full of services that trust
whoever reaches them: the listener's own dashboard (approve a gate, read every
prompt), its metrics and event streams, a PostgreSQL with `trust` for 127.0.0.1,
whatever else binds there. So a sandboxed agent never shares the host's network:

- `agents.egress = '{none}'`: bubblewrap's `--unshare-net`. The agent has a
  loopback interface of its own and nothing else.
- a list of `host[:port]` entries, or `'{open}'`: the agent's namespace again
  has only its own loopback, and on 127.0.0.1:3128 inside it listens the run's
  egress proxy (egress.py), served by the keeper from outside the sandbox.
  HTTPS_PROXY, HTTP_PROXY and ALL_PROXY (and their lowercase twins) name it,
  NO_PROXY names the agent's own loopback. The proxy allows `CONNECT host:port`
  and plain `http://` requests whose host and port match the list (`open`:
  any public address) and refuses everything else with 403.

Why this design, and not another:
- Proxy variables on the host's network would be advice: the agent could
  ignore them and connect anywhere, 127.0.0.1 included. In the agent's
  namespace the proxy is the only way out, so the allowlist is enforced, not
  asked for.
- `open` goes through the same proxy, not a user-mode TCP/IP stack.
  slirp4netns and pasta open the agent's connections as sockets in the host's
  namespace; their switches (`--disable-host-loopback`, `--no-map-gw`) close
  the host's loopback, but the host's other addresses (eth0's, a bridge's, where
  a service bound to 0.0.0.0 answers), its link-local metadata service and its
  private network stay reachable, and neither can refuse a destination. One
  enforcement point for every policy is easier to trust. What this costs: a
  program that ignores proxy variables (ssh, a raw TCP client) has no network
  under any policy; git over https honours https_proxy, git over ssh does not.
- The proxy runs in the keeper (reaper.py), one per run: the policy is the
  run's own, with no identity to pass or check; it lives outside the sandbox,
  dies with the run, and its traffic never runs on the listener's event loop,
  which keeps the leases. Standard library only (threads), since the keeper
  runs with `python -I`; the proxy libraries that exist (proxy.py, mitmproxy)
  are far larger and would still need the rules below written as plugins.
- The keeper's child makes the namespace itself, just before it executes
  bubblewrap (which then keeps it), and hands the keeper the proxy's listening
  socket from inside it. So nothing of ours runs inside the sandbox (no
  forwarder, no interpreter the agent's user must be able to execute, no unix
  socket bound into it), and there is no race: the socket listens before the
  agent's first instruction.
- DNS: the namespace has no resolver to ask, and needs none: clients send the
  proxy names. The proxy resolves each name once and connects to an address of
  that resolution; a name never leads to a loopback, link-local, unspecified or
  multicast address or to one of this host's own (an allowlisted name pointed at
  127.0.0.1 would otherwise be a way back in); only an entry naming such an
  address as an IP literal, with its port, reaches it.

Settings (the listener's environment; agents never see CEASELESS_* variables):
- CEASELESS_EGRESS_HOSTS names a hosts(5) file the proxies read before DNS:
  test upstreams, or hosts whose names agents must reach at other addresses
  than the host's resolver gives. It must be writable only by its owner, root or
  the listener's user; a file that is not is refused and the run fails.

Without bubblewrap (CEASELESS_SANDBOX=off, not installed, refused by the kernel)
there is no namespace and `agents.egress` is not enforced; the listener's
isolation warning says so.

Guarantees: `keeper_args` and `bwrap_args` together give an agent either no
network but its own loopback, or its own loopback and the proxy; never the
host's network.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from listener.agents import egress as proxy

HOSTS_VAR = "CEASELESS_EGRESS_HOSTS"
# No network: what an AgentConfig built without a value means, and the column's `{none}`.
NO_EGRESS: tuple[str, ...] = ("none",)


def proxied(egress: Sequence[str]) -> bool:
    """Whether this egress value needs the proxy (anything but none)."""
    return tuple(e.lower() for e in egress) not in ((), NO_EGRESS)


def keeper_args(egress: Sequence[str]) -> list[str]:
    """The keeper's options that make it give the agent a namespace and serve its proxy."""
    if not proxied(egress):
        return []
    if tuple(e.lower() for e in egress) == ("open",):
        args = ["--egress-open"]
    else:
        args = [arg for entry in egress for arg in ("--egress-allow", entry)]
    if hosts := os.environ.get(HOSTS_VAR):
        args += ["--egress-hosts", hosts]
    return args


def bwrap_args(egress: Sequence[str]) -> list[str]:
    """bubblewrap's options for this egress: a namespace of its own, or the proxy's variables.

    With the proxy, the namespace is already the keeper's child's own when
    bubblewrap starts (keeper_args), so bubblewrap keeps it.
    """
    if not proxied(egress):
        return ["--unshare-net"]
    return [
        arg
        for name, value in proxy.proxy_environment().items()
        for arg in ("--setenv", name, value)
    ]
