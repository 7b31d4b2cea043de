"""The Developer toolbox on real files: ranges, edit sessions, patches against patch(1), crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from toolboxes import CallContext, WorkerEnv
from toolboxes._test_pause import PAUSE_ENV
from toolboxes.developer import CAPABILITIES, DeveloperToolbox, open_toolbox
from toolboxes.developer._validate import check_describe

if TYPE_CHECKING:
    from pathlib import Path

    from toolboxes import ToolResult

ALL = list(CAPABILITIES)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(
    root: Path, caps: list[str] | None = None, sandbox: Any = "root", clock: Clock | None = None, **policy: Any
) -> DeveloperToolbox:
    state = root / ".state"
    state.mkdir(exist_ok=True)
    fsb = (
        {
            "fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(root / "src")},
            "fsbMaxFileSize": None,
            "fsbName": "dev",
        }
        if sandbox == "root"
        else sandbox
    )
    config = {"Name": "dev", "Description": "d", "Capabilities": caps or ALL, "FileSandbox": fsb, "policy": policy}
    env = WorkerEnv("dev", str(root), str(state), None)  # type: ignore[arg-type]
    if clock is None:
        return open_toolbox(config, env)
    return DeveloperToolbox(config, env, clock)


def call(tb: DeveloperToolbox, cap: str, session: str = "s1", **args: Any) -> ToolResult:
    ctx = CallContext(call_id=1, tool="", session_id=session)
    return tb.call(f"developer_dev_{cap.replace('-', '_')}", args, ctx)


@pytest.fixture
def root(sandbox_tmp: Path) -> Path:
    (sandbox_tmp / "src").mkdir()
    (sandbox_tmp / "src" / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    (sandbox_tmp / "secret.txt").write_text("no\n")
    return sandbox_tmp


def text(root: Path) -> str:
    return (root / "src" / "f.txt").read_text()


# --- tools and sandbox ---------------------------------------------------------------------------------------


def test_only_listed_capabilities_exist(root: Path) -> None:
    tb = make(root, ["read-file-range", "patch-file"])
    assert [t.name for t in tb.tools()] == ["developer_dev_read_file_range", "developer_dev_patch_file"]
    assert tb.call("developer_dev_write_file_range", {}, CallContext(1, "")).status == "error"
    with pytest.raises(ValueError, match="unknown capabilities"):
        make(root, ["read-file-range", "format-disk"])


def test_every_path_goes_through_the_sandbox(root: Path) -> None:
    tb = make(root)
    res = call(tb, "read-file-range", path=str(root / "secret.txt"))
    assert res.status == "error"
    assert "not allowed by the file sandbox 'dev'" in (res.summary or "")
    escape = root / "src" / "link"
    escape.symlink_to(root / "secret.txt")
    assert call(tb, "read-file-range", path=str(escape)).status == "error"
    assert call(tb, "read-file-range", path=str(root / "src" / ".." / "secret.txt")).status == "error"
    assert (
        call(tb, "write-file-range", path=str(root / "secret.txt"), ranges="1", contentBlocks=["x"]).status == "error"
    )
    assert (root / "secret.txt").read_text() == "no\n"
    assert "absolute" in (call(tb, "read-file-range", path="src/f.txt").summary or "")  # no base_dir: refused
    based = make(root, base_dir=str(root))  # the supervisor passes the agent file's directory
    assert based.call(
        "developer_dev_read_file_range", {"path": "src/f.txt", "ranges": "1"}, CallContext(1, "", session_id="s1")
    ).structured["path"] == str(root / "src" / "f.txt")
    rel = based.call("developer_dev_read_file_range", {"path": "src/../secret.txt"}, CallContext(1, ""))
    assert rel.status == "error" and f"'{root}/src/../secret.txt' is not allowed by the file sandbox 'dev'" in (
        rel.data or ""
    )
    assert f"Relative paths start at the agent file's folder, {root}." in (rel.data or "")
    with pytest.raises(ValueError, match="base_dir must be an absolute path"):
        make(root, base_dir="relative")
    default_deny = make(root, sandbox=None)
    res = call(default_deny, "read-file-range", path=str(root / "src" / "f.txt"))
    assert res.status == "error"
    assert res.meta("state_effect") == "read"


# --- read-file-range ------------------------------------------------------------------------------------------


def test_read_ranges_and_metadata(root: Path) -> None:
    tb = make(root)
    path = str(root / "src" / "f.txt")
    res = call(tb, "read-file-range", path=path, ranges="2-3,9")
    assert res.status == "passed", res
    v = res.structured
    assert v["content"] == "2\tline 2\n3\tline 3\n9\tline 9\n"
    assert v["linesRead"] == 3
    assert v["totalLineCount"] == 10
    assert v["rangesParsed"] == ["2-3", "9-9"]
    assert v["snapshotRef"] == hashlib.md5((root / "src" / "f.txt").read_bytes()).hexdigest()
    assert res.meta("state_effect") == "read"
    assert res.meta("resource_id") == f"file:{path}"
    assert call(tb, "read-file-range", path=path).structured["linesRead"] == 10
    meta = call(tb, "read-file-range", path=path, metadata_only=True).structured
    assert meta["content"] == ""
    assert meta["metadataOnly"] is True


@pytest.mark.parametrize(
    ("ranges", "words"),
    [
        ("0", "numbered from 1"),
        ("5-2", "end is before the start"),
        ("a-b", "not N or N-M"),
        ("11", "past the end"),
        ("3-12", "past the end"),
        ("1,,2", "empty item"),
    ],
)
def test_bad_read_ranges_say_what_to_fix(root: Path, ranges: str, words: str) -> None:
    res = call(make(root), "read-file-range", path=str(root / "src" / "f.txt"), ranges=ranges)
    assert res.status == "error"
    assert words in (res.summary or "")


def test_binary_files_are_refused(root: Path) -> None:
    (root / "src" / "b.bin").write_bytes(b"\x89PNG\x00\x01")
    (root / "src" / "l1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    tb = make(root)
    assert "binary" in (call(tb, "read-file-range", path=str(root / "src" / "b.bin")).summary or "")
    assert "UTF-8" in (
        call(tb, "patch-file", path=str(root / "src" / "l1.txt"), patch="@@ -1 +1 @@\n-a\n+b\n").summary or ""
    )


# --- write-file-range --------------------------------------------------------------------------------------------


def test_write_replace_insert_delete(root: Path) -> None:
    tb = make(root)
    path = str(root / "src" / "f.txt")
    ref = call(tb, "read-file-range", path=path).structured["snapshotRef"]
    res = call(
        tb,
        "write-file-range",
        path=path,
        ranges="head,2,4-5,7+,tail",
        contentBlocks=["top", "two\nTWO", "", "after seven", "end"],
        expected_snapshot_ref=ref,
    )
    assert res.status == "passed", res
    assert text(root) == ("top\nline 1\ntwo\nTWO\nline 3\nline 6\nline 7\nafter seven\nline 8\nline 9\nline 10\nend\n")
    v = res.structured
    assert v["rangesModified"] == 5
    assert v["beforeSnapshotRef"] == ref
    assert v["afterSnapshotRef"] == hashlib.md5(text(root).encode()).hexdigest()
    assert v["sessionStatus"] == "committed"
    assert res.meta("state_effect") == "mutate"
    # optimistic lock: the old ref no longer matches
    stale = call(tb, "write-file-range", path=path, ranges="1", contentBlocks=["x"], expected_snapshot_ref=ref)
    assert stale.status == "error"
    assert "changed since snapshot" in (stale.summary or "")
    assert not [p for p in os.listdir(root / "src") if p.endswith(".tmp")]


@pytest.mark.parametrize(
    ("ranges", "blocks", "words"),
    [
        ("1,2", ["x"], "2 range(s) but 1 content block"),
        ("0", ["x"], "numbered from 1"),
        ("11+", ["x"], "cannot insert after line 11"),
        ("2-4,3", ["x", "y"], "overlap"),
        ("3+,3+", ["x", "y"], "overlap"),
        ("x", ["x"], "not N, N-M, N+"),
    ],
)
def test_bad_writes_change_nothing(root: Path, ranges: str, blocks: list[str], words: str) -> None:
    before = text(root)
    res = call(make(root), "write-file-range", path=str(root / "src" / "f.txt"), ranges=ranges, contentBlocks=blocks)
    assert res.status == "error"
    assert words in (res.summary or "")
    assert text(root) == before


def test_edit_session_keeps_original_numbering_and_survives_restart(root: Path) -> None:
    path = str(root / "src" / "f.txt")
    tb = make(root)
    r1 = call(tb, "write-file-range", path=path, ranges="2+", contentBlocks=["a\nb\nc"], session_id="e1")
    assert r1.structured["sessionStatus"] == "staged"
    assert r1.meta("state_effect") == "read"
    assert text(root).startswith("line 1\nline 2\nline 3\n"), "staged edits must not touch the file"
    tb = make(root)  # a new worker: the session is in the state folder
    overlap = call(tb, "write-file-range", path=path, ranges="1-3", contentBlocks=["z"], session_id="e1")
    assert overlap.status == "error"
    assert "overlap" in (overlap.summary or "")
    other = call(tb, "write-file-range", path=path, ranges="5", contentBlocks=["x"], session_id="e1", session="s2")
    assert other.structured["sessionNetDelta"] == 0, "another caller session must not see e1"
    r2 = call(tb, "write-file-range", path=path, ranges="5", contentBlocks=["FIVE"], session_id="e1", commit=True)
    assert r2.status == "passed", r2
    assert r2.structured["sessionNetDelta"] == 3
    assert r2.structured["sessionCommitted"] is True
    lines = text(root).splitlines()
    assert lines[:6] == ["line 1", "line 2", "a", "b", "c", "line 3"]
    assert lines[7] == "FIVE"
    again = call(tb, "write-file-range", path=path, ranges="1", contentBlocks=["q"], session_id="e1")
    assert "already committed" in (again.summary or "")


def test_edit_session_refuses_to_commit_over_a_changed_file(root: Path) -> None:
    path = str(root / "src" / "f.txt")
    tb = make(root)
    call(tb, "write-file-range", path=path, ranges="1", contentBlocks=["mine"], session_id="e")
    (root / "src" / "f.txt").write_text("someone else\n")
    res = call(tb, "write-file-range", path=path, ranges="", contentBlocks=[], session_id="e", commit=True)
    assert res.status == "error"
    assert "changed on disk" in (res.summary or "")
    assert text(root) == "someone else\n"


def test_edit_session_expires_after_an_idle_hour(root: Path) -> None:
    path = str(root / "src" / "f.txt")
    clock = Clock()
    tb = make(root, clock=clock)
    call(tb, "write-file-range", path=path, ranges="1", contentBlocks=["x"], session_id="e")
    clock.now += 3599
    assert call(tb, "write-file-range", path=path, ranges="2", contentBlocks=["y"], session_id="e").status == "passed"
    clock.now += 3601
    res = call(tb, "write-file-range", path=path, ranges="", contentBlocks=[], session_id="e", commit=True)
    assert res.status == "error"
    assert "expired" in (res.summary or "")
    assert text(root).startswith("line 1\n")


def test_restore_file_and_its_session_scope(root: Path) -> None:
    path = str(root / "src" / "f.txt")
    tb = make(root)
    ref = call(tb, "read-file-range", path=path).structured["snapshotRef"]
    original = text(root)
    call(tb, "write-file-range", path=path, ranges="1-10", contentBlocks=["gone"])
    assert call(tb, "restore-file", path=path, snapshot_ref=ref, session="other").status == "error"
    res = call(tb, "restore-file", path=path, snapshot_ref=ref)
    assert res.status == "passed", res
    assert text(root) == original
    assert call(tb, "restore-file", path=path, snapshot_ref="../../x").status == "error"


# --- patch-file ------------------------------------------------------------------------------------------------

ORIGINALS = {
    "code.py": "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40)),
    "noeol.txt": "alpha\nbeta\ngamma",
    "short.md": "# Title\n\nSome text.\n",
}


def _modify(name: str, content: str) -> str:
    if name == "code.py":
        lines = content.splitlines(keepends=True)
        lines[1] = "    return x * 1\n"
        lines.insert(0, "import os\n")
        del lines[50:53]
        lines[100:100] = ["# middle\n", "# more\n"]
        lines.append("def tail():\n    pass\n")
        return "".join(lines)
    if name == "noeol.txt":
        return "alpha\nBETA\ngamma\ndelta"
    return "Intro\n# Title\n\nSome text.\nMore.\n"


def test_patch_file_matches_patch1_on_git_diffs(root: Path) -> None:
    tb = make(root)
    work = root / "work"
    work.mkdir()
    for name, content in ORIGINALS.items():
        a, b = work / f"a_{name}", work / f"b_{name}"
        a.write_text(content)
        b.write_text(_modify(name, content))
        diff = subprocess.run(
            ["git", "diff", "--no-index", "--no-color", str(a), str(b)], capture_output=True, text=True, check=False
        ).stdout
        assert diff.count("@@ -") >= 1
        ours = root / "src" / name
        ours.write_text(content)
        theirs = work / f"p_{name}"
        theirs.write_text(content)
        subprocess.run(["patch", "-s", str(theirs)], input=diff, text=True, check=True)
        res = call(tb, "patch-file", path=str(ours), patch=diff)
        assert res.status == "passed", res
        assert ours.read_bytes() == theirs.read_bytes() == b.read_bytes(), name
        assert res.structured["hunksApplied"] == diff.count("\n@@ -") + diff.startswith("@@ -")
        assert res.meta("state_effect") == "mutate"


def test_patch_file_finds_a_shifted_hunk_like_patch1(root: Path) -> None:
    path = root / "src" / "f.txt"
    tb = make(root)
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -3,2 +3,2 @@\n line 5\n-line 6\n+six\n"
    assert call(tb, "patch-file", path=str(path), patch=patch).status == "passed"
    assert text(root).splitlines()[5] == "six"


def test_a_patch_from_dev_null_creates_the_file_once(root: Path) -> None:
    """``--- /dev/null`` creates the file (DEVELOPER.md); before, the write went to a file that did not exist and the
    call failed with ENOENT (found by the chaos mix of ``scripts/chaos``)."""
    path = root / "src" / "new.txt"
    tb = make(root)
    patch = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    created = call(tb, "patch-file", path=str(path), patch=patch)
    assert created.status == "passed", created
    assert path.read_text() == "one\ntwo\n"
    again = call(tb, "patch-file", path=str(path), patch=patch)
    assert again.status == "error" and "already exists" in (again.data or "")
    (root / "src" / "empty.txt").write_text("")
    empty = call(tb, "patch-file", path=str(root / "src" / "empty.txt"), patch=patch.replace("new.txt", "empty.txt"))
    assert empty.status == "error" and "already exists" in (empty.data or "")


def test_patch_mismatch_reports_line_expected_actual_and_applies_nothing(root: Path) -> None:
    path = root / "src" / "f.txt"
    before = text(root)
    patch = (
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+two\n"
        "@@ -8,2 +8,2 @@\n line 8\n-line NINE\n+nine\n"
    )
    res = call(make(root), "patch-file", path=str(path), patch=patch)
    assert res.status == "failed"
    body = res.structured
    assert body["error"].startswith("Context mismatch at line 8")
    assert body["expected"] == ["line 8", "line NINE"]
    assert body["actual"] == ["line 8", "line 9"]
    assert text(root) == before, "a failing hunk must stop every hunk"


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\r\n line 1\r\n-line 2\r\n+two\r\n", "CRLF"),
        ("--- a/f\n+++ b/f\n@@ -1,3 +1,2 @@\n line 1\n-line 2\n+two\n", "header counts"),
        ("--- a/f\n+++ b/f\n@@ one two @@\n line 1\n", "bad hunk header"),
        ("--- a/f\n@@ -1 +1 @@\n-line 1\n+x\n", "must be followed by '+++"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-line 1\n+x\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-y\n+z\n", "more than one file"),
        ("--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n line 2\n-line 3\n+x\n@@ -3,2 +3,2 @@\n-line 3\n+y\n line 4\n", "overlap"),
        ("just words\n", "no hunks"),
        ("--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-line 1\n", "deletes the file"),
    ],
)
def test_bad_patches_say_what_to_fix(root: Path, patch: str, words: str) -> None:
    before = text(root)
    res = call(make(root), "patch-file", path=str(root / "src" / "f.txt"), patch=patch)
    assert res.status in ("error", "failed")
    assert words in (res.summary or ""), res.summary
    assert text(root) == before


def test_patch_without_final_newline_in_the_patch_text(root: Path) -> None:
    res = call(make(root), "patch-file", path=str(root / "src" / "f.txt"), patch="@@ -10 +10 @@\n-line 10\n+ten")
    assert res.status == "passed", res
    assert text(root).endswith("line 9\nten\n")


# --- specs, templates, validation ------------------------------------------------------------------------------


def test_show_spec(root: Path) -> None:
    tb = make(root)
    assert "describe" in (call(tb, "show-spec", spec_name="bash-tools").data or "")
    assert "fsbPredicate" in (call(tb, "show-spec", spec_name="agent").data or "")
    assert call(tb, "show-spec", spec_name="nope").status == "error"


@pytest.mark.parametrize("language", ["bash", "python"])
def test_create_tool_then_validate_it_for_real(root: Path, language: str) -> None:
    if language == "python" and not shutil.which("python3"):
        pytest.skip("no python3 on PATH for the template's #! line")
    tb = make(root)
    path = root / "src" / f"hello.{'sh' if language == 'bash' else 'py'}"
    res = call(tb, "create-tool", path=str(path), language=language, slug="hello")
    assert res.status == "passed", res
    assert os.access(path, os.X_OK)
    assert call(tb, "create-tool", path=str(path), language=language).status == "error"
    res = call(tb, "validate-tool", path=str(path))
    assert res.status == "passed", res
    assert res.structured["describe"]["slug"] == "hello"
    bad = root / "src" / "bad.sh"
    bad.write_text('#!/bin/bash\necho \'{"slug": "b", "args": [{"name": "x", "arity": "sometimes"}]}\'\n')
    bad.chmod(0o755)
    res = call(tb, "validate-tool", path=str(bad))
    assert res.status == "failed"
    paths = {e["path"] for e in res.structured["errors"]}
    assert {"description", "args[0].arity", "args[0].mode"} <= paths


def test_validate_tool_runs_describe_as_the_bash_toolbox_does(root: Path) -> None:
    """One worker-side child runner: describe runs through the bash toolbox's runner (``_bounded_run``), so its
    output is capped and it is killed, with its children, at the time limit of the same policy keys."""
    tb = make(root, describe_timeout_s=1, describe_output_bytes=1000)
    loud, slow = root / "src" / "loud.sh", root / "src" / "slow.sh"
    loud.write_text("#!/bin/sh\nhead -c 5000 /dev/zero | tr '\\0' x\n")
    slow.write_text("#!/bin/sh\nsleep 30 &\necho $! > child.pid\nsleep 30\n")
    for script in (loud, slow):
        script.chmod(0o755)
    res = call(tb, "validate-tool", path=str(loud))
    assert res.status == "failed" and "printed 5000 bytes, more than the limit of 1000" in res.data, res.data
    res = call(tb, "validate-tool", path=str(slow))
    assert res.status == "failed" and "did not finish within 1 s; it was killed with its children" in res.data
    child = int((root / "src" / "child.pid").read_text())
    try:
        with open(f"/proc/{child}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    assert state in ("gone", "Z"), state  # killed with the script, not left running
    tb.close()


def test_validate_tool_judges_a_describe_as_the_bash_toolbox_loads_it() -> None:
    """One validator: the spellings bash loads (``str``, ``double``) validate; what it refuses is an error with the
    path bash names."""
    from toolboxes.bash import DescribeError, parse_describe

    def describe(backing: str) -> dict[str, Any]:
        return {
            "slug": "t",
            "description": "d",
            "args": [
                {
                    "name": "x",
                    "description": "",
                    "type": backing,
                    "backing_type": backing,
                    "arity": "single",
                    "mode": "positional",
                }
            ],
        }

    for backing in ("str", "double", "string", "int"):
        assert check_describe(describe(backing)) == [], backing
        parse_describe(json.dumps(describe(backing)).encode())
    [error] = check_describe(describe("object"))
    assert error["path"] == "args[0].backing_type" and "'object' is not supported" in error["message"]
    with pytest.raises(DescribeError, match="'object' is not supported"):
        parse_describe(json.dumps(describe("object")).encode())


def test_create_and_validate_agent(root: Path) -> None:
    tb = make(root)
    path = root / "src" / "helper.json"
    assert call(tb, "create-agent", path=str(path), slug="helper").status == "passed"
    res = call(tb, "validate-agent", path=str(path))
    assert res.status == "passed", res
    assert res.structured["slug"] == "helper"
    data = json.loads(path.read_text())
    data["contents"]["colour"] = "blue"
    del data["contents"]["slug"]
    path.write_text(json.dumps(data))
    res = call(tb, "validate-agent", path=str(path))
    assert res.status == "failed"
    assert {e["path"] for e in res.structured["errors"]} == {"contents.colour", "contents.slug"}
    assert call(tb, "create-agent", path=str(root / "outside.json"), slug="x").status == "error"


# --- crash safety ------------------------------------------------------------------------------------------------


def test_sigkill_mid_write_is_recovered_when_the_toolbox_opens_again(root: Path) -> None:
    """A writer process stopped (test hook) with half of the new content in the file, then killed: the file holds a
    mix until the toolbox opens again and replays its journal. (The real-worker version of this is in
    tests/supervisor/test_developer_journal_e2e.py.)"""
    big = root / "src" / "big.txt"
    old = "old 1\nold 2\n"
    new = "n" * 100 + "\n"
    new = new * 3000
    big.write_text(old)
    marker = root / "paused"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.environ[PAUSE_ENV] = f"in-place-write:{marker}"
            tb = make(root)
            os.write(w, b"go")
            call(tb, "write-file-range", path=str(big), ranges="1-2", contentBlocks=[new.removesuffix("\n")])
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 2) == b"go"
    os.close(r)
    while not marker.exists():  # the child reaches the pause: bounded by the child's own progress
        done, _ = os.waitpid(pid, os.WNOHANG)
        assert not done, "the writer ended without reaching the pause"
        os.sched_yield()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    mixed = big.read_text()
    assert mixed not in (old, new) and mixed.startswith(new[: len(new) // 2])
    make(root)  # opening the toolbox replays the journal
    assert big.read_text() == new
    assert os.listdir(root / ".state" / "write-journal") == []
