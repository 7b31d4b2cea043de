"""The deployment files are real: systemd accepts the unit, the Kubernetes schemas accept the manifests, every
command line in them is one the CLI accepts, and the supervisor serves with exactly the capabilities they grant
(each of which it needs), as root with no_new_privs."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import trio
import yaml

from supervisor.frontends._cli_parser import build_parser
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.test_skills_e2e import make_git_repo

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "agents-supervise.service"
MANIFESTS = REPO / "deploy" / "kubernetes" / "agents-supervise.yaml"
CONTAINERFILE = REPO / "deploy" / "Containerfile"
KUBERNETES_VERSION = "1.33"


def _unit_value(key: str) -> str:
    [line] = [ln for ln in UNIT.read_text().splitlines() if ln.startswith(f"{key}=")]
    return line.split("=", 1)[1]


def _documents() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(MANIFESTS.read_text()))


def _daemonset_container() -> dict[str, Any]:
    [daemonset] = [d for d in _documents() if d["kind"] == "DaemonSet"]
    [container] = [c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "supervisor"]
    return container


def _unit_caps() -> list[str]:
    return [c.removeprefix("CAP_").lower() for c in _unit_value("CapabilityBoundingSet").split()]


#: where the unit expects the installed venv (docs/DEPLOY.md)
UNIT_VENV = "/opt/agents-supervise/venv"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify`` (which also checks that ExecStart's program exists) accepts the unit, with its
    venv being the one these tests run from, wherever that is."""
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(UNIT_VENV, sys.prefix))
    assert os.access(Path(sys.prefix) / "bin" / "agents-supervise", os.X_OK), "the project is not installed here"
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr  # warnings count as failures too


def test_the_unit_waits_for_readiness() -> None:
    """``Type=notify``: systemd counts the service started at its READY=1 (tests/deploy/test_sd_notify.py)."""
    assert (_unit_value("Type"), _unit_value("NotifyAccess")) == ("notify", "main")


def test_the_kubernetes_schemas_accept_the_manifests() -> None:
    documents = _documents()
    assert {d["kind"] for d in documents} >= {"DaemonSet", "Service", "NetworkPolicy"}
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    broken = copy.deepcopy(_daemonset_container())  # the validator is live: a misspelt key is refused
    broken["securityContext"]["capabilties"] = broken["securityContext"].pop("capabilities")
    [daemonset] = [copy.deepcopy(d) for d in documents if d["kind"] == "DaemonSet"]
    daemonset["spec"]["template"]["spec"]["containers"][0] = broken
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSION, strict=True)


def _containerfile_command() -> list[str]:
    text = CONTAINERFILE.read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint == ["/opt/agents-supervise/venv/bin/agents-supervise"]
    return cmd


def test_every_command_line_is_one_the_cli_accepts() -> None:
    unit = shlex.split(_unit_value("ExecStart"))
    assert unit[0] == f"{UNIT_VENV}/bin/agents-supervise"
    for argv in (unit[1:], _daemonset_container()["args"], _containerfile_command()):
        args = build_parser().parse_args(argv)
        assert (args.command, args.policy) == ("serve", "/etc/agents-supervise/policy.yaml")
        assert args.http is not None  # the HTTP service, not stdio


def test_the_capabilities_are_the_same_everywhere() -> None:
    context = _daemonset_container()["securityContext"]
    assert context["capabilities"]["drop"] == ["ALL"] and context["allowPrivilegeEscalation"] is False
    assert sorted(c.lower() for c in context["capabilities"]["add"]) == sorted(_unit_caps())
    assert _unit_value("NoNewPrivileges") == "yes"


def _policy(root: Path) -> Path:
    """What a deployment runs: strict.yaml's uid per worker, one tenant, an agent whose toolboxes exercise what
    the supervisor does as root (a worker of its own uid; a git skill source cloned confined and sealed readable)."""
    strict = yaml.safe_load((REPO / "policies" / "strict.yaml").read_text())
    repo = make_git_repo(root)
    skills = [{"tag": "SkillGitRepo", "contents": {"url": f"file://{repo}", "subdir": "skills"}}]
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])], skillSources=skills)},
        worker_uids=strict["worker_uids"],
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"ops": {"tokens": [hash_token("ops-token")], "agents": ["alpha"]}},
    )


def _confined(caps: list[str]) -> list[str]:
    """The supervisor's command under exactly ``caps`` (bounding set) and no_new_privs, as the unit runs it."""
    return [
        "setpriv",
        "--no-new-privs",
        "--bounding-set=" + ",".join(["-all", *(f"+{c}" for c in caps)]),
        sys.executable,
        "-m",
        "supervisor",
    ]


@pytest.mark.root
async def test_the_http_service_runs_with_exactly_the_granted_capabilities(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    process = await trio.lowlevel.open_process(
        [*_confined(_unit_caps()), "serve", "--http", "--policy", str(policy)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        line = b""
        with trio.fail_after(60):
            while b"\n" not in line.partition(b"serving MCP over HTTP at ")[2]:
                chunk = await process.stderr.receive_some(4096)  # type: ignore[union-attr]
                assert chunk, line
                line += chunk
        line = line.split(b"serving MCP over HTTP at ", 1)[1].split(b"\n", 1)[0]
        url = line.decode().split("/agents/")[0] + "/agents/alpha/mcp"
        headers = [
            "-H",
            "authorization: Bearer ops-token",
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
        ]
        init = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        done = await trio.run_process(["curl", "-s", "-D", "-", url, *headers, "-d", init], capture_stdout=True)
        session = re.search(rb"mcp-session-id: (\S+)", done.stdout).group(1).decode()  # type: ignore[union-attr]
        call = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "system_system_date", "arguments": {}},
            }
        )
        done = await trio.run_process(
            ["curl", "-s", url, *headers, "-H", f"mcp-session-id: {session}", "-d", call], capture_stdout=True
        )
        result = json.loads(done.stdout)["result"]
        assert result["isError"] is False and json.loads(result["content"][0]["text"])["capability"] == "date"
    finally:
        process.terminate()
        await process.wait()
        await process.stderr.aclose()  # type: ignore[union-attr]


def _load(caps: list[str], policy: Path) -> tuple[int, list[Any], str]:
    done = subprocess.run(
        [*_confined(caps), "tools", "--json", "--policy", str(policy)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = json.loads(done.stdout)["load_errors"] if done.returncode == 0 else []
    return done.returncode, errors, done.stderr


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("missing", [None, *_unit_caps()])
def test_each_granted_capability_is_needed(sandbox_tmp: Path, missing: str | None) -> None:
    """With every granted capability everything loads; without any one of them something cannot (the supervisor
    refuses to start, or a toolbox becomes a load error)."""
    rc, errors, stderr = _load([c for c in _unit_caps() if c != missing], _policy(sandbox_tmp))
    if missing is None:
        assert (rc, errors) == (0, []), stderr
    else:
        assert rc != 0 or errors, f"{missing} is granted but nothing needs it"


def test_the_unit_reloads_the_policy_with_sighup() -> None:
    """``systemctl reload`` sends SIGHUP to the supervisor alone, which reloads the policy (tests/supervisor/
    test_reload.py runs that on a real ``serve --http``); its workers get no signal."""
    assert [ln for ln in UNIT.read_text().splitlines() if ln.startswith("ExecReload=")] == [
        "ExecReload=/bin/kill -HUP $MAINPID"
    ]
    assert _unit_value("KillMode") == "control-group"  # for stop only: kill -HUP $MAINPID signals the main pid
