"""``agents-supervise check`` (issue 25): a summary by default (one line per worker, then warnings), printed from
data others can add to; no false warning for a database a shared group may write; a warning for each rule path the
launcher will refuse; and nothing runs or changes (no credential command, no folder, no CA, no identity)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from supervisor.frontends._check_summary import CheckSection, render_summary, summarize
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "check", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=120,
    )


REPORT = {
    "policy": "/etc/p.yaml",
    "state_dir": "/var/lib/s",
    "landlock_abi": 7,
    "landlock_min_abi": 6,
    "strict": True,
    "max_call_depth": 4,
    "kernel_audit": "enable",
    "denial_explanations": ["Landlock denials: from the kernel's audit records"],
    "toolboxes": [
        {
            "toolbox": "files",
            "kind": "mcp",
            "agent": "coder",
            "uid": 3000000001,
            "groups": [2000],
            "allowed_hosts": [],
            "file_sandbox": None,
            "read_only": ["/usr", "/bin"],
            "read_write": ["/w"],
            "limits": {"memory_bytes": 1 << 30, "wall_time_s": 30.0},
            "start": "lazy",
            "warnings": ["files: a warning of its own", "shared with another"],
        }
    ],
    "warnings": ["files: a warning of its own", "a policy warning"],
    "load_errors": [{"toolbox": "gh", "agent": "coder", "source": "x.json $.openApiToolboxes[0]", "message": "m"}],
}


def test_the_summary_is_data_a_small_printer_renders_and_others_extend() -> None:
    summary = summarize(REPORT)
    [worker] = summary.workers
    assert (worker.agent, worker.toolbox, worker.kind) == ("coder", "files", "mcp")
    summary.sections.append(CheckSection("host-wide uids", ["coder/files: 3000000001 (registry /var/lib/r)"]))
    worker.facts.append("an added fact")
    lines = render_summary(summary)
    assert lines[0] == "policy /etc/p.yaml: strict true, kernel Landlock ABI 7, needs 6, max call depth 4"
    assert (
        "  coder/files (mcp): uid 3000000001 + groups 2000; no network; 2 paths read-only, 1 read-write; "
        "memory 1 GiB, 30 s a call; starts on its first call; an added fact"
    ) in lines
    assert lines[lines.index("host-wide uids:") + 1] == "  coder/files: 3000000001 (registry /var/lib/r)"
    warnings = lines.index("warnings (3):")  # each once, the toolbox's name said once, as the subject
    assert lines[warnings + 1 : warnings + 4] == [
        "  coder/files: a warning of its own",
        "  coder/files: shared with another",
        "  a policy warning",
    ]
    assert lines[lines.index("load errors (1):") + 1] == "  coder/gh: x.json $.openApiToolboxes[0]: m"


@pytest.mark.root
def test_check_runs_no_credential_command_and_changes_nothing(sandbox_tmp: Path) -> None:
    marker = sandbox_tmp / "the-command-ran"
    program = sandbox_tmp / "token.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\necho secret\n")
    program.chmod(0o755)
    state = sandbox_tmp / "state"
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        worker_uids={"first": 3900000000, "count": 65536, "registry": str(sandbox_tmp / "uids")},
        credentials={
            "tok": {
                "source": {"command": [str(program)]},
                "bindings": [{"hosts": ["api.example.com"]}],
                "header": "Authorization: Bearer {value}",
            }
        },
        toolboxes={
            "tester/system": {"credentials": ["tok"], "allowed_hosts": ["api.example.com"], "tls_termination": True}
        },
    )
    before = sorted(p.name for p in sandbox_tmp.iterdir())
    for args in ([], ["--detail"], ["--json"]):
        out = _check("--policy", str(policy), *args)
        assert out.returncode == 0, out.stderr
    assert not marker.exists()  # the credential's program was not run
    assert not state.exists() and not (sandbox_tmp / "uids").exists()  # no folder, CA, identity or uid recorded
    assert sorted(p.name for p in sandbox_tmp.iterdir()) == before
    assert "credentials.tok: its command source is not run by check (nothing starts)" in out.stdout
    [tb] = json.loads(out.stdout)["toolboxes"]
    assert [c["name"] for c in tb["credentials"]] == ["tok"] and "secret" not in out.stdout


@pytest.mark.root
def test_a_database_its_shared_group_may_write_gets_no_warning(sandbox_tmp: Path) -> None:
    data = sandbox_tmp / "data"
    data.mkdir()
    os.chown(data, 0, 2000)
    data.chmod(0o2775)
    db = data / "notes.db"
    db.write_bytes(b"")
    os.chown(db, 0, 2000)
    db.chmod(0o664)
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {"Name": "notes", "Description": "d", "Versioning": {"tag": "SqliteReadWrite", "path": str(db)}},
    }
    agents = {"tester": agent(builtinToolboxes=[sqlite])}
    shared = write_policy(sandbox_tmp, agents, shared_groups=[{"gid": 2000, "toolboxes": ["tester/notes"]}])
    out = _check("--policy", str(shared))
    assert "cannot be written" not in out.stdout, out.stdout
    alone = write_policy(sandbox_tmp, agents)
    out = _check("--policy", str(alone))
    assert f"the read-write database {db} cannot be written by the worker (uid 65534)" in out.stdout, out.stdout
    assert "shared_groups: [{gid: GID, toolboxes: [<agent>/notes]}]" in out.stdout and "chown" not in out.stdout


@pytest.mark.root
async def test_check_warns_about_a_link_the_launcher_will_refuse_and_the_launcher_does(sandbox_tmp: Path) -> None:
    real = sandbox_tmp / "data"
    real.mkdir()
    link = sandbox_tmp / "data-link"
    link.symlink_to(real)
    os.lchown(link, 4242, 4242)  # a user's link: the launcher follows root's only
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox("sys"), system_toolbox("other")])},
        toolboxes={"tester/sys": {"read_paths": [str(link)]}},
    )
    out = _check("--policy", str(policy))
    expected = f"tester/sys: the launcher will refuse the rule read {link} and the worker will not start"
    assert expected in out.stdout, out.stdout
    assert f"{link} is a symbolic link owned by uid 4242, not root" in out.stdout
    assert "tester/other: the launcher" not in out.stdout
    async with Supervisor.open(str(policy)) as sup:  # what check said happens
        [error] = [e for e in sup.load_errors() if e.get("toolbox") == "sys"]
        assert f"{link} is a symbolic link owned by uid 4242, not root" in error["message"]
        assert (await sup.call("system_other_date", {})).status == "passed"
