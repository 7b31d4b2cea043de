"""``agents-supervise check-tool-call --tool PATH``: the real command, real scripts, describe run confined."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import describe_json, write_script

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])
EXAMPLES = Path(REPO) / "policies" / "examples"


def check(tool: Path | str, payload: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "check-tool-call", "--tool", str(tool), *extra],
        input=payload,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, "PYTHONPATH": REPO},
    )


def arg(name: str, backing: str, arity: str, mode: str = "dashdashspace") -> dict[str, str]:
    return {"name": name, "description": name, "type": backing, "backing_type": backing, "arity": arity, "mode": mode}


@pytest.fixture
def typed_tool(sandbox_tmp: Path) -> Path:
    return write_script(
        sandbox_tmp,
        "typed",
        describe_json(
            "typed-tool",
            [
                arg("name", "string", "single"),
                arg("count", "integer", "optional"),
                arg("tags", "string", "multiple"),
                arg("verbose", "boolean", "optional"),
            ],
        ),
        "echo ran",
    )


def test_a_valid_payload_exits_0(typed_tool: Path) -> None:
    out = check(typed_tool, json.dumps({"name": "x", "count": 3, "tags": ["a", "b"], "verbose": True}))
    assert (out.returncode, out.stdout, out.stderr) == (0, "Tool call to 'typed-tool' is valid.\n", "")


def test_an_invalid_payload_prints_the_seed_report(typed_tool: Path) -> None:
    # in the schema's order (name, count, tags, verbose), properties the schema does not know last
    out = check(typed_tool, json.dumps({"count": "3", "tags": "a", "extra": 1}))
    assert out.returncode == 1, out.stderr
    assert out.stdout == (
        "Tool call validation failed for 'typed-tool' with 4 errors:\n\n"
        "1. name: Required property missing\n"
        "2. count: Expected integer but got string\n"
        "3. tags: Expected array but got string\n"
        "4. extra: Unknown property\n\n"
        "Please correct these issues and try again.\n"
    )


def test_the_seeds_read_file_example(sandbox_tmp: Path) -> None:
    # the seed: check-tool-call --tool ./tools/read-file.sh -> "... for 'read-file' with 2 errors: 1. filepath ...
    # 2. content ..." (schema order, although "content" sorts first)
    tool = write_script(
        sandbox_tmp,
        "read-file.sh",
        describe_json("read-file", [arg("filepath", "string", "single"), arg("content", "string", "single")]),
        "cat",
    )
    out = check(tool, "{}")
    assert out.returncode == 1, out.stderr
    assert out.stdout == (
        "Tool call validation failed for 'read-file' with 2 errors:\n\n"
        "1. filepath: Required property missing\n"
        "2. content: Required property missing\n\n"
        "Please correct these issues and try again.\n"
    )


def test_a_value_the_command_line_cannot_carry_is_invalid(typed_tool: Path) -> None:
    out = check(typed_tool, json.dumps({"name": "a\u0000b"}))
    assert out.returncode == 1
    assert out.stdout.startswith("Tool call validation failed for 'typed-tool' with 1 error:\n\n1. ")
    assert "NUL" in out.stdout


def test_the_seed_templates_and_the_kimi_tool_check(sandbox_tmp: Path) -> None:
    assert check(EXAMPLES / "kimi" / "tools" / "askuser" / "ask-user.bash", '{"question": "go?"}').returncode == 0
    bad = check(EXAMPLES / "kimi" / "tools" / "askuser" / "ask-user.bash", "{}")
    assert bad.returncode == 1 and "1. question: Required property missing" in bad.stdout
    for template in (EXAMPLES / "tools" / "bash" / "my-tool.bash", EXAMPLES / "tools" / "python" / "my-tool.py"):
        out = check(template, "{}", "--policy", str(Path(REPO) / "policies" / "strict.yaml"))
        assert out.returncode in (0, 1), out.stderr
        assert "'my-tool'" in out.stdout


def test_describe_runs_confined(sandbox_tmp: Path) -> None:
    secret = sandbox_tmp / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o644)  # readable by everyone: only Landlock stands in the way
    spy = sandbox_tmp / "spy"
    spy.write_text(
        "#!/bin/bash\n"
        f"cat {secret} >&2 || echo 'read refused' >&2\n"
        f"touch {sandbox_tmp}/written 2>/dev/null && echo 'wrote' >&2\n"
        "(exec 3<>/dev/tcp/127.0.0.1/22) 2>/dev/null && echo 'connected' >&2\n"
        'echo "uid $(id -u)" >&2\n'
        "exit 3\n"
    )
    spy.chmod(0o755)
    out = check(spy, "{}")
    assert out.returncode == 2
    assert out.stderr.startswith(f"agents-supervise: error: {spy}: describe exited with code 3: ")
    assert "read refused" in out.stderr and "s3cret" not in out.stderr
    assert "wrote" not in out.stderr and not (sandbox_tmp / "written").exists()
    assert "connected" not in out.stderr
    assert "uid 65534" in out.stderr


def _view_spy(sandbox_tmp: Path, other: Path, host_tmp: Path) -> Path:
    spy = sandbox_tmp / "viewspy"
    spy.write_text(
        "#!/bin/bash\n"
        f"for p in /home /root /etc/shadow /run /sys {other} {host_tmp} {sandbox_tmp / 'secret'}; do\n"
        '  [ -e "$p" ] && echo "SEEN $p" >&2\n'
        "done\n"
        "echo \"users $(cut -d: -f1 /etc/passwd | tr '\\n' ,) host $(hostname) \"\\\n"
        "  \"mounts $(wc -l < /proc/self/mountinfo) tmp $(ls -A /tmp | tr '\\n' ,)\" >&2\n"
        "exit 3\n"
    )
    spy.chmod(0o755)
    return spy


@pytest.mark.parametrize("with_policy", [False, True])
def test_describe_sees_only_a_private_view(sandbox_tmp: Path, with_policy: bool) -> None:
    """The one-shot runner gives describe a worker's private view: no /home, /root, host /tmp, other toolboxes'
    work folders, nor the files beside the script exist for it, and /etc names only root and its own account.
    With a policy saying ``private_view: false`` the same probes see the host (the knob does something)."""
    from tests._policies import agent, system_toolbox, write_policy

    (sandbox_tmp / "secret").write_text("s3cret")
    (sandbox_tmp / "secret").chmod(0o644)
    other = sandbox_tmp / "state" / "work" / "other" / "gamma"
    other.mkdir(parents=True)
    host_tmp = Path(f"/tmp/agents-supervise-check-probe-{os.getpid()}")
    host_tmp.write_text("host")
    host_tmp.chmod(0o644)
    try:
        spy = _view_spy(sandbox_tmp, other, host_tmp)
        extra: list[str] = []
        if with_policy:
            policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox("alpha")])})
            extra = ["--policy", str(policy)]
        out = check(spy, "{}", *extra)
        assert out.returncode == 2 and "describe exited with code 3: " in out.stderr, out.stderr
        assert "SEEN" not in out.stderr, out.stderr
        assert "users root,nobody, host sandbox " in out.stderr, out.stderr
        mounts, tmp = out.stderr.split("mounts ")[1].split()[0], out.stderr.split(" tmp ")[1].split()[0]
        assert int(mounts) < 60, out.stderr  # the view's mounts only
        # a fresh /tmp holding only the grants below it: the script's folder and describe's work folder
        assert all(name.startswith("agents-supervise-") for name in tmp.strip(",").split(",")), out.stderr
        if with_policy:
            off = write_policy(
                sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox("alpha")])}, private_view=False
            )
            seen = check(spy, "{}", "--policy", str(off)).stderr
            assert "SEEN /root" in seen and f"SEEN {other}" in seen and f"SEEN {host_tmp}" in seen, seen
    finally:
        host_tmp.unlink()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("echo '{not json'", "describe printed invalid JSON: "),
        (
            'echo \'{"slug": "x", "description": "d", "args": [{"name": "a", "backing_type": "str", '
            '"arity": "twice", "mode": "positional"}]}\'',
            "describe.args[0].arity must be one of",
        ),
        ("sleep 60", "describe did not finish within 5 s and was killed"),
    ],
)
def test_a_bad_describe_is_a_clear_error(sandbox_tmp: Path, body: str, expected: str) -> None:
    script = sandbox_tmp / "bad"
    script.write_text(f"#!/bin/bash\n{body}\n")
    script.chmod(0o755)
    out = check(script, "{}")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("agents-supervise: error: ")
    assert expected in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_input_is_one_line(sandbox_tmp: Path, typed_tool: Path) -> None:
    assert check(typed_tool, "{").stderr.startswith("agents-supervise: error: the payload on stdin is not valid JSON")
    missing = check(sandbox_tmp / "nope", "{}")
    assert (missing.returncode, missing.stderr) == (
        2,
        f"agents-supervise: error: {sandbox_tmp}/nope: no such tool file\n",
    )
    plain = sandbox_tmp / "plain"
    plain.write_text("#!/bin/bash\n")
    not_exec = check(plain, "{}")
    assert not_exec.returncode == 2 and "not executable" in not_exec.stderr
