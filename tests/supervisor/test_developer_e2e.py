"""The Developer toolbox in a real confined worker, through ``Supervisor.open``: files, refusals, crashes.

The worker's FileSandbox is ``DirectoryRecursive <tmp>/project`` (granted read-write by the kernel). Beside it,
``<tmp>/secret.txt`` is world-readable and world-writable on purpose: Unix permissions would let uid 65534 read
and write it, so only the in-worker check and Landlock stand in the way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import trio

from sandbox import WRITE, FsRule
from supervisor._supervisor import Supervisor
from supervisor.workers._launch import plan_frame
from tests._policies import agent, write_policy
from tests._workers import pid_one

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from toolboxes import ToolResult

pytestmark = pytest.mark.root

NOBODY = 65534
SECRET = "top-secret-value\n"
CAPS = [
    "read-file-range",
    "write-file-range",
    "patch-file",
    "restore-file",
    "create-tool",
    "validate-tool",
    "show-spec",
    "validate-agent",
]


def _worker_pid(sup: Supervisor, toolbox: str) -> int:
    """The worker process proper: PID 1 of its namespace (``tests._workers.pid_one``)."""
    worker = sup.runner(toolbox).worker
    assert worker is not None and worker.pid is not None
    return pid_one(worker.pid)


def _own(path: Path) -> None:
    os.chown(path, NOBODY, NOBODY)


@pytest.fixture
def project(sandbox_tmp: Path) -> Path:
    project = sandbox_tmp / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    for p in (project, project / "src", project / "src" / "f.txt"):
        _own(p)
    secret = sandbox_tmp / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o666)
    (project / "src" / "planted-link").symlink_to(secret)
    return project


@pytest.fixture
async def sup(sandbox_tmp: Path, project: Path) -> AsyncIterator[Supervisor]:
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": "project"}
    dev = {
        "tag": "DeveloperToolbox",
        "contents": {"Name": "dev", "Description": "dev tools", "Capabilities": CAPS, "FileSandbox": fsb},
    }
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[dev])},
        landlock_min_abi=6,
        limits={"wall_time_s": 60},
        supervision={"restart_backoff_initial_s": 0.05, "restart_backoff_max_s": 0.2, "crash_loop_max_restarts": 40},
    )
    async with Supervisor.open(policy) as s:
        yield s


def _v(res: ToolResult) -> dict[str, Any]:
    assert res.status == "passed", (res.status, res.data)
    assert isinstance(res.structured, dict)
    return res.structured


async def dev(sup: Supervisor, cap: str, session: str = "s1", **args: Any) -> ToolResult:
    return await sup.call(f"developer_dev_{cap.replace('-', '_')}", args, session_id=session)


# --- inside the sandbox ---------------------------------------------------------------------------------------


async def test_read_write_patch_restore_through_the_worker(sup: Supervisor, project: Path) -> None:
    path = str(project / "src" / "f.txt")
    read = await dev(sup, "read-file-range", path=path, ranges="2-3")
    v = _v(read)
    assert v["content"] == "2\tline 2\n3\tline 3\n"
    assert v["snapshotRef"] == hashlib.md5((project / "src" / "f.txt").read_bytes()).hexdigest()
    assert dict(read.metadata) == {"state_effect": "read", "resource_id": f"file:{path}"}
    original = v["snapshotRef"]

    write = await dev(
        sup,
        "write-file-range",
        path=path,
        ranges="head,5,tail",
        contentBlocks=["top", "FIVE", "end"],
        expected_snapshot_ref=original,
    )
    w = _v(write)
    assert dict(write.metadata) == {"state_effect": "mutate", "resource_id": f"file:{path}"}
    lines = (project / "src" / "f.txt").read_text().splitlines()
    assert lines[0] == "top" and lines[5] == "FIVE" and lines[-1] == "end" and len(lines) == 12
    stale = await dev(
        sup, "write-file-range", path=path, ranges="1", contentBlocks=["x"], expected_snapshot_ref=original
    )
    assert stale.status == "error" and "changed since snapshot" in (stale.data or "")

    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -2,3 +2,3 @@\n line 1\n-line 2\n+LINE TWO\n line 3\n"
    patched = await dev(sup, "patch-file", path=path, patch=patch)
    assert _v(patched)["hunksApplied"] == 1
    assert (project / "src" / "f.txt").read_text().splitlines()[2] == "LINE TWO"
    mismatch = await dev(sup, "patch-file", path=path, patch=patch)
    assert mismatch.status == "failed"
    assert mismatch.structured["message"] == "Context doesn't match"

    restored = await dev(sup, "restore-file", path=path, snapshot_ref=original)
    _v(restored)
    assert hashlib.md5((project / "src" / "f.txt").read_bytes()).hexdigest() == original
    assert w["beforeSnapshotRef"] == original
    # New files are created by the sandbox uid, inside the tree, and can be validated (describe runs confined).
    tool = str(project / "src" / "hello.sh")
    _v(await dev(sup, "create-tool", path=tool, language="bash", slug="hello"))
    assert os.stat(tool).st_uid == NOBODY and os.access(tool, os.X_OK)
    checked = await dev(sup, "validate-tool", path=tool)
    assert _v(checked)["valid"] is True, checked.data
    # Nothing was left beside the files: edits rewrite them in place (through a journal in the state folder).
    assert sorted(os.listdir(project / "src")) == ["f.txt", "hello.sh", "planted-link"]


async def test_show_spec_and_validate_agent_read_the_shipped_schema_in_the_worker(
    sup: Supervisor, project: Path
) -> None:
    """The agent file's schema is staged with the worker code and read there (issue 26: one schema): show-spec
    agent is written from it, and validate-agent checks a file against it (jsonschema in the confined worker)."""
    spec = await dev(sup, "show-spec", spec_name="agent")
    assert spec.status == "passed" and "\nPostgrestContents:\n" in (spec.data or "")
    assert "- AllowedMethods: " in (spec.data or "")
    good, bad = project / "src" / "good.json", project / "src" / "bad.json"
    good.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": {"slug": "helper"}}))
    bad.write_text(json.dumps({"slug": "helper", "builtinToolboxes": [{"tag": "Nope", "contents": {}}]}))
    assert _v(await dev(sup, "validate-agent", path=str(good)))["valid"] is True
    refused = await dev(sup, "validate-agent", path=str(bad))
    assert refused.status == "failed"
    [error] = refused.structured["errors"]
    assert error["path"] == "builtinToolboxes[0].tag" and 'unknown tag "Nope"' in error["message"]


# --- outside the sandbox: the in-worker check ------------------------------------------------------------------


async def test_paths_outside_are_refused_naming_the_rule(sup: Supervisor, sandbox_tmp: Path, project: Path) -> None:
    secret = sandbox_tmp / "secret.txt"
    rule = f"rule DirectoryRecursive({project})"
    for cap, path, extra in (
        ("read-file-range", str(secret), {}),
        ("read-file-range", str(project / ".." / "secret.txt"), {}),
        ("read-file-range", str(project / "src" / "planted-link"), {}),
        ("write-file-range", str(secret), {"ranges": "1", "contentBlocks": ["pwned"]}),
        ("patch-file", str(sandbox_tmp / "new.txt"), {"patch": "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n"}),
        ("create-tool", str(sandbox_tmp / "evil.sh"), {"language": "bash"}),
    ):
        res = await dev(sup, cap, path=path, **extra)
        assert res.status == "error", (cap, path, res)
        assert "not allowed by the file sandbox 'project'" in (res.data or ""), res.data
        assert rule in (res.data or ""), res.data
        assert str(secret) not in (res.data or "") or path == str(secret)  # a symlink's target is not revealed
    assert secret.read_text() == SECRET
    assert sorted(os.listdir(sandbox_tmp)) == ["policy.yaml", "project", "secret.txt", "state", "tester.json"]


async def test_relative_paths_start_at_the_agent_file_directory(
    sup: Supervisor, sandbox_tmp: Path, project: Path
) -> None:
    """The agent file is ``<tmp>/tester.json``: ``project/src/f.txt`` names the file its FileSandbox allows."""
    read = await dev(sup, "read-file-range", path="project/src/f.txt", ranges="1")
    assert _v(read)["content"] == "1\tline 1\n"
    assert read.meta("resource_id") == f"file:{project / 'src' / 'f.txt'}"
    dotted = await dev(sup, "read-file-range", path="./project/src/../src/f.txt", ranges="1")
    assert _v(dotted)["path"] == str(project / "src" / "f.txt")
    outside = await dev(sup, "read-file-range", path="project/../secret.txt")
    assert outside.status == "error"
    # The message shows the path as resolved (against the agent file's folder), never where a symlink leads.
    assert f"'{sandbox_tmp}/project/../secret.txt' is not allowed by the file sandbox 'project'" in (outside.data or "")
    assert f"Relative paths start at the agent file's folder, {sandbox_tmp}." in (outside.data or "")
    assert outside.meta("resource_id") == "file:project/../secret.txt"


# --- outside the sandbox: the kernel ---------------------------------------------------------------------------

_PROBE = textwrap.dedent("""
    import json, os, sys
    project, secret = sys.argv[1], sys.argv[2]
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "allowed"
        except OSError as exc:
            out[name] = type(exc).__name__
    def write(path, text):
        with open(path, "w") as f:
            f.write(text)
    attempt("read_inside", lambda: open(os.path.join(project, "src", "f.txt")).read())
    attempt("write_inside", lambda: write(os.path.join(project, "src", "probe.txt"), "ok"))
    attempt("read_secret", lambda: open(secret).read())
    attempt("read_link", lambda: open(os.path.join(project, "src", "planted-link")).read())
    attempt("write_secret", lambda: write(secret, "pwned"))
    attempt("create_beside", lambda: write(secret + ".new", "pwned"))
    print(json.dumps(out))
""")


async def test_kernel_holds_the_sandbox_without_the_in_worker_check(
    sup: Supervisor, sandbox_tmp: Path, project: Path
) -> None:
    """The developer worker's exact plan, running a plain Python probe instead of the toolbox."""
    spec = sup.runner("dev").spec
    rules = spec.plan.fs_rules
    assert FsRule(str(project), WRITE) in rules
    tmp = str(sandbox_tmp)
    assert not [r for r in rules if tmp == r.path or tmp.startswith(r.path.rstrip("/") + "/")], (
        "a rule covers the directory holding the secret"
    )
    plan = dataclasses.replace(
        spec.plan,
        entry="sandbox._launcher:exec_argv",
        payload={"argv": [spec.argv[0], "-I", "-c", _PROBE, str(project), str(sandbox_tmp / "secret.txt")]},
    )
    proc = await trio.run_process(
        spec.argv,
        stdin=plan_frame(plan),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=spec.env,
        cwd=spec.cwd,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["read_inside"] == "allowed" and out["write_inside"] == "allowed", out
    # In the private view the secret does not exist; its folder is the view's own (root's, mode 0755).
    unseen = "FileNotFoundError" if plan.view is not None else "PermissionError"
    for name in ("read_secret", "read_link"):
        assert out[name] == unseen, f"BREACH: {name}: {out[name]}"
    for name in ("write_secret", "create_beside"):
        assert out[name] == "PermissionError", f"BREACH: {name}: {out[name]}"
    assert (sandbox_tmp / "secret.txt").read_text() == SECRET


# --- edit sessions survive a restart -----------------------------------------------------------------------------


async def test_edit_session_survives_a_worker_restart(sup: Supervisor, sandbox_tmp: Path, project: Path) -> None:
    path = str(project / "src" / "f.txt")
    before = (project / "src" / "f.txt").read_text()
    staged = await dev(
        sup, "write-file-range", session="caller-A", path=path, ranges="2", contentBlocks=["TWO"], session_id="edit-1"
    )
    assert _v(staged)["sessionStatus"] == "staged"
    assert (project / "src" / "f.txt").read_text() == before  # staged, not written
    state = sandbox_tmp / "state" / "toolbox-state" / "tester" / "dev" / "developer"
    session_files = list(state.glob("*/edits/*.json"))
    assert len(session_files) == 1
    assert json.loads(session_files[0].read_text())["edits"] == [["2", "TWO"]]

    pid = _worker_pid(sup, "dev")
    old = sup.runner("dev").worker
    assert old is not None
    os.kill(pid, signal.SIGKILL)
    with trio.fail_after(10):
        await old.dead.wait()  # the supervisor saw it die; the next call waits for the restarted worker
    # The restarted worker finds the staged edits in its state folder; numbering is still the original's.
    more = await dev(
        sup, "write-file-range", session="caller-A", path=path, ranges="4-5", contentBlocks=[""], session_id="edit-1"
    )
    assert _v(more)["sessionNetDelta"] == -2
    assert _worker_pid(sup, "dev") != pid
    overlap = await dev(
        sup, "write-file-range", session="caller-A", path=path, ranges="2", contentBlocks=["x"], session_id="edit-1"
    )
    assert overlap.status == "error" and "overlap" in (overlap.data or "").lower()
    other_caller = await dev(
        sup,
        "write-file-range",
        session="caller-B",
        path=path,
        ranges="",
        contentBlocks=[],
        session_id="edit-1",
        commit=True,
    )
    assert other_caller.status == "passed" and (project / "src" / "f.txt").read_text() == before  # B's own, empty
    done = await dev(
        sup,
        "write-file-range",
        session="caller-A",
        path=path,
        ranges="",
        contentBlocks=[],
        session_id="edit-1",
        commit=True,
    )
    assert _v(done)["sessionStatus"] == "committed"
    lines = (project / "src" / "f.txt").read_text().splitlines()
    assert lines == ["line 1", "TWO", "line 3", "line 6", "line 7", "line 8", "line 9", "line 10"]
