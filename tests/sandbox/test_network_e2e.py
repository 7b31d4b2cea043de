"""Network isolation end to end: the real supervisor, run inside the lab's supervisor namespace, a real confined
worker with its egress bridge, and real servers on the lab's "internet" (203.0.113.0/24).

The supervisor resolves names with the lab's DNS server (``ip netns exec`` shows it ``/etc/netns/<ns>/resolv.conf``
as ``/etc/resolv.conf``), so no packet leaves the lab. Each check is a shell command run by ``execute-command``
inside the worker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests._policies import agent, system_toolbox, write_policy
from tests.sandbox._netlab import ALT_PORT, INET_HTTP, INET_TLS, REPO, Lab, in_ns, sh

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    root = Path(__import__("tempfile").mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    lab = Lab(root)  # its supervisor namespace's resolv.conf has a search domain and ndots:5
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)


def _call(lab: Lab, policy: Path, command: str) -> dict:
    proc = subprocess.run(
        # Not `ip netns exec`: it mounts a fresh /sys without the cgroup hierarchies the workers' cgroups need. A
        # private mount namespace gets the lab's resolv.conf, nsenter the lab's network namespace.
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$0" /etc/resolv.conf && exec nsenter --net="$1" "$2" -m supervisor call --policy "$3" '
            'system_system_execute_command "$4"',
            f"/etc/netns/{lab.sup}/resolv.conf",
            f"/run/netns/{lab.sup}",
            sys.executable,
            str(policy),
            json.dumps({"command": command}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)["structured"]


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    toolbox = system_toolbox(capabilities=["execute-command"])
    return write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        toolboxes={"system": {"allowed_hosts": ["www.example.test", "*.sub.example.test"]}},
    )


def test_allowed_host_through_the_proxy_and_refusals(lab: Lab, policy: Path) -> None:
    out = _call(
        lab,
        policy,
        "curl -sS --max-time 10 http://www.example.test/hello; echo; "
        "curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://evil.example.test/; echo; "
        "curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://WWW.EXAMPLE.TEST./x",
    )
    lines = out["stdout"].splitlines()
    assert "origin" in lines[0], out
    assert lines[1] == "403", out
    assert lines[2] == "200", out
    trace = [json.loads(line) for line in (policy.parent / "state" / "trace.jsonl").read_text().splitlines()]
    egress = [r for r in trace if r["event"] == "egress"]
    verdicts = {(r["host"], r["verdict"]) for r in egress}
    assert ("www.example.test", "allowed") in verdicts
    assert ("evil.example.test", "refused") in verdicts
    assert all(r["toolbox"] == "system" for r in egress)


def test_direct_connections_and_refused_names_reach_nothing(lab: Lab, policy: Path) -> None:
    before = lab.dns_log.read_text() if lab.dns_log.exists() else ""
    out = _call(
        lab,
        policy,
        f"curl -sS --noproxy '*' --max-time 5 http://{INET_HTTP}/ && echo BREACH-TCP; "
        f"bash -c 'exec 3<>/dev/tcp/{INET_HTTP}/80' && echo BREACH-DEVTCP; "
        "getent hosts leak-check.evil.example.test && echo BREACH-DNS; "
        "getent hosts www.example.test; getent ahostsv4 www.example.test; true",
    )
    assert "BREACH" not in out["stdout"], out
    assert "127.0.0.1" not in out["stdout"]
    # the stub answers allowed names with the addresses the proxy would dial
    assert "203.0.113.10" in out["stdout"] or "2001:db8::10" in out["stdout"]
    after = lab.dns_log.read_text() if lab.dns_log.exists() else ""
    assert "leak-check" not in after[len(before) :]  # a refused name is never looked up


def test_a_toolbox_without_allowed_hosts_has_no_network(lab: Lab, sandbox_tmp: Path) -> None:
    toolbox = system_toolbox(capabilities=["execute-command"])
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[toolbox])})
    out = _call(
        lab,
        policy,
        "curl -sS --max-time 5 http://www.example.test/ && echo BREACH; env | grep -i _proxy || echo no-proxy-env",
    )
    assert "BREACH" not in out["stdout"]
    assert "no-proxy-env" in out["stdout"]


def test_a_port_entry_allows_its_port_and_refuses_others_from_a_real_worker(lab: Lab, sandbox_tmp: Path) -> None:
    """``secure.example.test:443`` reaches 443 (CONNECT, TLS end to end), not 8443, which the same host serves."""
    alt = sh(*in_ns(lab.sup, "curl", "-sS", "--max-time", "5", f"http://{INET_TLS}:{ALT_PORT}/"), check=False)
    assert "origin-alt-port" in alt.stdout  # the refusal below is the policy's, not an empty port
    toolbox = system_toolbox(capabilities=["execute-command"])
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        toolboxes={"system": {"allowed_hosts": ["secure.example.test:443"]}},
    )
    out = _call(
        lab,
        policy,
        "curl -sSk --max-time 10 https://secure.example.test/a; echo; "
        f"curl -sS --max-time 10 -w '\\n%{{http_code}}' http://secure.example.test:{ALT_PORT}/b",
    )
    lines = out["stdout"].splitlines()
    assert lines[0].startswith("tls-origin"), out
    assert lines[-1] == "403", out
    assert f"not allowed on port {ALT_PORT}" in out["stdout"]


@pytest.mark.parametrize("accepted", [False, True])
def test_the_policy_cname_targets_knob_works_both_ways(lab: Lab, sandbox_tmp: Path, accepted: bool) -> None:
    toolbox = system_toolbox(capabilities=["execute-command"])
    extra = {"cname_targets": ["*.cdn.example.test"]} if accepted else {}
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        toolboxes={"system": {"allowed_hosts": ["cdn-alias.example.test"], **extra}},
    )
    out = _call(lab, policy, "curl -sS --max-time 10 -w '\\n%{http_code}' http://cdn-alias.example.test/")
    lines = out["stdout"].splitlines()
    if accepted:
        assert lines[-1] == "200" and lines[0].startswith("origin"), out
    else:
        assert lines[-1] == "403", out
        assert "alias (CNAME) of edge.cdn.example.test" in out["stdout"]


def test_metadata_behind_allowed_names_stays_refused_with_private_ranges_open(lab: Lab, sandbox_tmp: Path) -> None:
    """From a real worker: the Azure WireServer (public by class) and AWS IMDS over IPv6 (in fc00::/7, opened here)
    behind allowed names are refused by the proxy and not answered by the DNS stub."""
    toolbox = system_toolbox(capabilities=["execute-command"])
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        toolboxes={"system": {"allowed_hosts": ["azure.example.test", "aws6.example.test"]}},
        network={"allow_private_ranges": ["fc00::/7", "100.64.0.0/10"]},
    )
    out = _call(
        lab,
        policy,
        "for h in azure.example.test aws6.example.test; do "
        "curl -sS --max-time 10 -w '\\n%{http_code}\\n' http://$h/; "
        "getent ahosts $h && echo BREACH-DNS; done; true",
    )
    assert "SECRET" not in out["stdout"] and "BREACH" not in out["stdout"], out
    assert out["stdout"].count("cloud metadata address") == 2, out
    assert [line for line in out["stdout"].splitlines() if line.isdigit()] == ["403", "403"], out
