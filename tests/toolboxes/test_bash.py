"""The bash toolbox, in process, with real scripts and real processes."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from labkit import describe_json, write_script
from toolboxes import CallContext, ToolSpec, WorkerEnv
from toolboxes.bash import (
    ArgumentError,
    BashToolbox,
    ConfigError,
    DescribeError,
    Invocation,
    ScriptSpec,
    build_invocation,
    input_schema,
    open_toolbox,
    parse_describe,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from toolboxes import ToolResult

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "policies" / "examples"


class FakeChannel:
    """Records ``tools_changed``; ``changed`` is an event a test waits on."""

    def __init__(self) -> None:
        self.changed = threading.Event()
        self.count = 0

    def tools_changed(self) -> None:
        self.count += 1
        self.changed.set()

    def portal(self, ctx: CallContext, tool: str, args: dict[str, Any]) -> ToolResult:
        raise AssertionError("bash never calls the portal")

    def host(self, ctx: CallContext, op: str, args: dict[str, Any]) -> Any:
        raise AssertionError("bash never asks the host")

    def event(self, event: dict[str, Any]) -> None:
        pass


@pytest.fixture
def tools_dir(sandbox_tmp: Path) -> Path:
    folder = sandbox_tmp / "tools"
    folder.mkdir()
    return folder


@pytest.fixture
def workdir(sandbox_tmp: Path) -> Path:
    folder = sandbox_tmp / "work"
    folder.mkdir()
    return folder


class Boxes:
    """Opens toolboxes and closes them at the end of the test."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.opened: list[BashToolbox] = []
        self.channel = FakeChannel()

    def open(self, path: Path, single: bool = False, **policy: Any) -> BashToolbox:
        policy.setdefault("watch_interval_s", 0)
        config = {
            "tag": "SingleTool" if single else "FileSystemDirectory",
            "contents": {"Path": str(path)},
            "policy": policy,
        }
        env = WorkerEnv("bash", str(self.workdir), str(self.workdir), self.channel)
        box = open_toolbox(config, env)
        self.opened.append(box)
        return box


@pytest.fixture
def boxes(workdir: Path) -> Iterator[Boxes]:
    b = Boxes(workdir)
    yield b
    for box in b.opened:
        box.close()


def ctx(tool: str, **kw: Any) -> CallContext:
    return CallContext(call_id=7, tool=tool, **kw)


def names(tools: list[ToolSpec]) -> list[str]:
    return [t.name for t in tools]


def alive(pid: int) -> bool:
    """Whether ``pid`` is still a process (a zombie counts: someone failed to reap it)."""
    return os.path.exists(f"/proc/{pid}")


# -- describe parsing and schema (pure) ------------------------------------------------------------------------
def test_parse_describe_reads_the_seed_example() -> None:
    spec = parse_describe(
        b'{"slug": "my-tool", "description": "What this tool does", "args": [{"name": "input",'
        b' "description": "Input parameter", "type": "string", "backing_type": "string", "arity": "single",'
        b' "mode": "dashdashspace"}], "empty-result": {"tag": "AddMessage", "contents": "No results"}}'
    )
    assert spec.slug == "my-tool"
    assert spec.empty_result == "No results"
    assert spec.args[0].mode == "dashdashspace"
    assert input_schema(spec) == {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "Input parameter"}},
        "required": ["input"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "invalid JSON"),
        (b"[1, 2]", "must print a JSON object"),
        (b'{"description": "x", "args": []}', "missing required key 'slug'"),
        (b'{"slug": "a b", "description": "x"}', "describe.slug"),
        (b'{"slug": "a", "description": "x", "args": {}}', "describe.args must be a list"),
        (
            b'{"slug": "a", "description": "x", "args": [{"name": "v", "backing_type": "string", "arity": "many",'
            b' "mode": "positional"}]}',
            "describe.args[0].arity must be one of single, optional, multiple",
        ),
        (
            b'{"slug": "a", "description": "x", "args": [{"name": "v", "backing_type": "string", "arity": "single",'
            b' "mode": "env"}]}',
            "describe.args[0].mode must be one of",
        ),
        (
            b'{"slug": "a", "description": "x", "args": [{"name": "v", "backing_type": "object", "arity": "single",'
            b' "mode": "stdin"}]}',
            "backing_type 'object' is not supported",
        ),
        (b'{"slug": "a", "description": "x", "empty-result": {"tag": "Shout"}}', "AddMessage or DoNothing"),
        (b'{"slug": "a", "description": "x", "output-media-type": "png"}', "media type like image/png"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_parse_describe_refuses_bad_descriptions_with_the_path(raw: bytes, message: str) -> None:
    with pytest.raises(DescribeError) as info:
        parse_describe(raw)
    assert message in str(info.value)


def test_schema_types_and_arities() -> None:
    spec = parse_describe(
        json.dumps(
            {
                "slug": "t",
                "description": "d",
                "args": [
                    {
                        "name": "n",
                        "description": "",
                        "type": "count",
                        "backing_type": "int",
                        "arity": "optional",
                        "mode": "positional",
                    },
                    {
                        "name": "flags",
                        "description": "f",
                        "type": "string",
                        "backing_type": "bool",
                        "arity": "multiple",
                        "mode": "dashdashequal",
                    },
                ],
            }
        ).encode()
    )
    schema = input_schema(spec)
    assert schema["properties"]["n"] == {"type": "integer", "description": "type: count"}
    assert schema["properties"]["flags"] == {"type": "array", "items": {"type": "boolean"}, "description": "f"}
    assert "required" not in schema


def _spec(mode: str, arity: str) -> ScriptSpec:
    return parse_describe(
        describe_json(
            "t",
            [
                {
                    "name": "v",
                    "description": "",
                    "type": "string",
                    "backing_type": "string",
                    "arity": arity,
                    "mode": mode,
                }
            ],
        ).encode()
    )


def test_build_invocation_renders_values_and_refuses_what_cannot_pass() -> None:
    spec = parse_describe(
        describe_json(
            "t",
            [
                {
                    "name": "a",
                    "description": "",
                    "type": "x",
                    "backing_type": "number",
                    "arity": "single",
                    "mode": "positional",
                },
                {
                    "name": "b",
                    "description": "",
                    "type": "x",
                    "backing_type": "boolean",
                    "arity": "single",
                    "mode": "dashdashequal",
                },
            ],
        ).encode()
    )
    assert build_invocation(spec, {"a": 2.0, "b": False}) == Invocation(("2", "--b=false"), None)
    assert build_invocation(spec, {"a": 1.5, "b": True}).argv == ("1.5", "--b=true")
    with pytest.raises(ArgumentError, match="'a' is required"):
        build_invocation(spec, {"b": True})
    with pytest.raises(ArgumentError, match="NUL"):
        build_invocation(spec, {"a": "x\x00y", "b": True})
    with pytest.raises(ArgumentError, match="unknown argument"):
        build_invocation(spec, {"a": 1, "b": True, "c": 1})


# -- every mode x arity, through a real script -------------------------------------------------------------------
ECHO_RUN = 'for a in "$@"; do printf "[%s]" "$a"; done; printf "|"; cat'
CASES = [
    # (arity, args, expected argv for each mode: positional, dashdashspace, dashdashequal, stdin)
    (
        "single",
        {"v": "a b"},
        {
            "positional": "[a b]|",
            "space": "[a b]|",
            "dashdashspace": "[--v][a b]|",
            "dashdashequal": "[--v=a b]|",
            "stdin": "|a b\n",
        },
    ),
    (
        "optional",
        {"v": "x"},
        {
            "positional": "[x]|",
            "space": "[x]|",
            "dashdashspace": "[--v][x]|",
            "dashdashequal": "[--v=x]|",
            "stdin": "|x\n",
        },
    ),
    ("optional", {}, {"positional": "|", "space": "|", "dashdashspace": "|", "dashdashequal": "|", "stdin": "|"}),
    (
        "multiple",
        {"v": ["p", "q r"]},
        {
            "positional": "[p][q r]|",
            "space": "[p][q r]|",
            "dashdashspace": "[--v][p][--v][q r]|",
            "dashdashequal": "[--v=p][--v=q r]|",
            "stdin": "|p\nq r\n",
        },
    ),
    (
        "multiple",
        {"v": []},
        {"positional": "|", "space": "|", "dashdashspace": "|", "dashdashequal": "|", "stdin": "|"},
    ),
]


@pytest.mark.parametrize("mode", ["positional", "space", "dashdashspace", "dashdashequal", "stdin"])
def test_every_mode_and_arity_reaches_the_script(boxes: Boxes, tools_dir: Path, mode: str) -> None:
    for i, (arity, _args, _want) in enumerate(CASES):
        args = [
            {"name": "v", "description": "", "type": "string", "backing_type": "string", "arity": arity, "mode": mode}
        ]
        write_script(tools_dir, f"t{i}", describe_json(f"echo-{i}", args), ECHO_RUN)
    box = boxes.open(tools_dir)
    assert box.load_errors() == []
    assert names(box.tools()) == [f"bash_echo_{i}" for i in range(len(CASES))]
    for i, (_arity, args, want) in enumerate(CASES):
        result = box.call(f"bash_echo_{i}", args, ctx(f"bash_echo_{i}"))
        assert result.status == "passed", result
        assert result.data == want[mode], (i, args)


def test_arguments_keep_describe_order_across_modes(boxes: Boxes, tools_dir: Path) -> None:
    def arg(name: str, mode: str, arity: str = "single", backing: str = "string") -> dict[str, str]:
        return {"name": name, "description": "", "type": backing, "backing_type": backing, "arity": arity, "mode": mode}

    write_script(
        tools_dir,
        "mixed",
        describe_json(
            "mixed",
            [
                arg("first", "positional"),
                arg("n", "dashdashspace", backing="integer"),
                arg("line", "stdin"),
                arg("ok", "dashdashequal", backing="boolean"),
                arg("last", "space", "optional"),
            ],
        ),
        ECHO_RUN,
    )
    box = boxes.open(tools_dir)
    result = box.call("bash_mixed", {"first": "-x", "n": 3, "line": "hello", "ok": True, "last": "z"}, ctx("t"))
    assert result.data == "[-x][--n][3][--ok=true][z]|hello\n"


# -- describe failures ---------------------------------------------------------------------------------------
def test_failing_describes_are_load_errors_and_the_rest_load(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "good", describe_json("good"), "echo fine")
    (tools_dir / "badjson").write_text("#!/bin/bash\necho '{\"slug\": '\n")
    (tools_dir / "hang").write_text("#!/bin/bash\nsleep 300 & sleep 300\n")
    (tools_dir / "huge").write_text("#!/bin/bash\nhead -c 5000000 /dev/zero | tr '\\0' x\n")
    (tools_dir / "exit3").write_text("#!/bin/bash\necho 'no describe here' >&2\nexit 3\n")
    (tools_dir / "noshebang").write_text("echo hi\n")
    (tools_dir / "notexec").write_text("#!/bin/bash\necho never\n")
    for name in ("badjson", "hang", "huge", "exit3", "noshebang"):
        (tools_dir / name).chmod(0o755)
    (tools_dir / "notexec").chmod(0o644)
    started = time.monotonic()
    box = boxes.open(tools_dir, describe_timeout_s=1)
    assert time.monotonic() - started < 5
    assert names(box.tools()) == ["bash_good"]
    errors = {Path(e["source"]).name: e["message"] for e in box.load_errors()}
    assert set(errors) == {"badjson", "hang", "huge", "exit3", "noshebang"}
    assert "invalid JSON" in errors["badjson"]
    assert "did not finish within 1 s" in errors["hang"]
    assert "more than the limit" in errors["huge"]
    assert errors["exit3"] == "describe exited with code 3: no describe here"
    assert "could not start the script" in errors["noshebang"]
    assert box.call("bash_good", {}, ctx("bash_good")).data == "fine\n"


def test_duplicate_slugs_keep_the_first_and_report_the_second(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "a", describe_json("same"), "echo a")
    write_script(tools_dir, "b", describe_json("same"), "echo b")
    box = boxes.open(tools_dir)
    assert names(box.tools()) == ["bash_same"]
    assert box.call("bash_same", {}, ctx("t")).data == "a\n"
    assert [e["message"] for e in box.load_errors()] == [f"slug 'same' is already used by {tools_dir / 'a'}"]


def test_missing_folder_and_bad_config(boxes: Boxes, sandbox_tmp: Path) -> None:
    box = boxes.open(sandbox_tmp / "nope")
    assert box.tools() == []
    assert "cannot be listed" in box.load_errors()[0]["message"]
    single = boxes.open(sandbox_tmp / "nope.sh", single=True)
    assert "cannot be read" in single.load_errors()[0]["message"]
    env = WorkerEnv("bash", str(sandbox_tmp), str(sandbox_tmp), FakeChannel())
    with pytest.raises(ConfigError, match="FileSystemDirectory or SingleTool"):
        open_toolbox({"tag": "Folder", "contents": {"Path": "/x"}}, env)
    with pytest.raises(ConfigError, match="absolute path"):
        open_toolbox({"tag": "SingleTool", "contents": {"Path": "rel/x"}}, env)
    with pytest.raises(ConfigError, match="wall_time_s"):
        open_toolbox({"tag": "SingleTool", "contents": {"Path": "/x"}, "policy": {"limits": {"wall_time_s": -1}}}, env)


# -- running -----------------------------------------------------------------------------------------------------
def test_nonzero_exit_is_failed_with_code_stderr_and_stdout(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "t", describe_json("t"), "echo partial; echo 'it broke' >&2; exit 3")
    result = boxes.open(tools_dir).call("bash_t", {}, ctx("bash_t"))
    assert result.status == "failed"
    assert result.meta("exit_code") == "3"
    assert result.summary == "bash_t exited with code 3"
    assert "it broke" in (result.data or "")
    assert "partial" in (result.data or "")


def test_environment_is_the_policy_env_and_agent_ids_only(
    boxes: Boxes, tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERVISOR_SECRET", "do-not-leak")
    script = tools_dir / "env"
    script.write_text(
        "#!/usr/bin/python3\nimport json, os, sys\n"
        "if sys.argv[1] == 'describe':\n"
        "    print(json.dumps({'slug': 'env', 'description': 'd', 'args': []}))\n"
        "else:\n    print(json.dumps(dict(os.environ)))\n"
    )
    script.chmod(0o755)
    policy_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "FOO": "bar"}
    box = boxes.open(tools_dir, env=policy_env)
    call = ctx("bash_env", session_id="s1", conversation_id="c1", turn_id="t1", agent_id="a1")
    result = box.call("bash_env", {}, call)
    assert json.loads(result.data or "") == {
        **policy_env,
        "AGENT_SESSION_ID": "s1",
        "AGENT_CONVERSATION_ID": "c1",
        "AGENT_TURN_ID": "t1",
        "AGENT_AGENT_ID": "a1",
    }


def test_timeout_kills_the_script_and_all_its_children(boxes: Boxes, tools_dir: Path, workdir: Path) -> None:
    write_script(
        tools_dir,
        "slow",
        describe_json("slow"),
        (
            f"cd {workdir}\n"  # a script runs in its own folder; the pids go to the work folder
            "sleep 300 & echo $! >> pids\n"
            "setsid sleep 300 & echo $! >> pids\n"
            "(setsid sleep 300 & echo $! >> pids)\n"
            "bash -c 'sleep 300 & echo $! >> pids; sleep 300' & echo $! >> pids\n"
            "echo $$ >> pids\necho started\nsleep 300"
        ),
    )
    box = boxes.open(tools_dir, limits={"wall_time_s": 1})
    started = time.monotonic()
    result = box.call("bash_slow", {}, ctx("bash_slow"))
    assert time.monotonic() - started < 5
    assert result.status == "error"
    assert "did not finish within its time limit of 1 s" in (result.summary or "")
    assert "started" in (result.data or "")
    pids = [int(p) for p in (workdir / "pids").read_text().split()]
    assert len(pids) == 6
    assert [p for p in pids if alive(p)] == []


def test_call_deadline_shortens_the_policy_limit(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "slow", describe_json("slow"), "sleep 300")
    box = boxes.open(tools_dir, limits={"wall_time_s": 60})
    started = time.monotonic()
    result = box.call("bash_slow", {}, ctx("bash_slow", deadline=time.monotonic() + 0.5))
    assert result.status == "error"
    assert time.monotonic() - started < 3


def test_children_that_outlive_the_script_are_killed(boxes: Boxes, tools_dir: Path, workdir: Path) -> None:
    write_script(
        tools_dir,
        "fork",
        describe_json("fork"),
        (
            f"cd {workdir}\n"
            "sleep 300 & echo $! >> pids\n"
            "(setsid sleep 300 & echo $! >> pids) \n"
            "nohup sleep 300 >/dev/null 2>&1 & echo $! >> pids\n"
            "echo done"
        ),
    )
    box = boxes.open(tools_dir)
    started = time.monotonic()
    result = box.call("bash_fork", {}, ctx("bash_fork"))
    assert time.monotonic() - started < 3
    assert (result.status, result.data) == ("passed", "done\n")
    pids = [int(p) for p in (workdir / "pids").read_text().split()]
    assert len(pids) == 3
    assert [p for p in pids if alive(p)] == []


def test_stdin_is_closed_so_a_script_reading_it_ends(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "cat", describe_json("cat"), "cat; echo eof")
    arg = {"name": "v", "description": "", "type": "s", "backing_type": "string", "arity": "single", "mode": "stdin"}
    write_script(tools_dir, "read", describe_json("read", [arg]), "cat; cat; echo eof")
    box = boxes.open(tools_dir, limits={"wall_time_s": 10})
    assert box.call("bash_cat", {}, ctx("t")).data == "eof\n"
    assert box.call("bash_read", {"v": "line"}, ctx("t")).data == "line\neof\n"


def test_cancel_kills_the_running_script(boxes: Boxes, tools_dir: Path, sandbox_tmp: Path) -> None:
    fifo = sandbox_tmp / "fifo"
    os.mkfifo(fifo)
    write_script(tools_dir, "wait", describe_json("wait"), f"echo $$ > {fifo}\nsleep 300")
    box = boxes.open(tools_dir, limits={"wall_time_s": 60})
    call = ctx("bash_wait")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(box.call, "bash_wait", {}, call)
        with open(fifo) as f:  # blocks until the script has started and written its pid
            pid = int(f.read())
        call.cancel()
        result = future.result(timeout=10)
    assert result.status == "error"
    assert "was cancelled" in (result.summary or "")
    assert not alive(pid)


def test_output_cap_truncates_and_says_so(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "big", describe_json("big"), "head -c 5000 /dev/zero | tr '\\0' y")
    result = boxes.open(tools_dir, limits={"output_bytes": 1000}).call("bash_big", {}, ctx("t"))
    assert result.status == "passed"
    assert result.truncated
    assert (result.data or "").startswith("y" * 1000 + "\n[note: the output was truncated to the first 1000 of 5000")


def test_non_utf8_output_is_replaced_and_said_so(boxes: Boxes, tools_dir: Path) -> None:
    write_script(tools_dir, "bin", describe_json("bin"), r"printf 'ok \xff\xfe end'")
    result = boxes.open(tools_dir).call("bash_bin", {}, ctx("t"))
    assert result.status == "passed"
    assert (result.data or "").startswith("ok \ufffd\ufffd end")
    assert "not valid UTF-8" in (result.data or "")
    assert "not valid UTF-8" in (result.summary or "")


def test_empty_result_add_message_and_do_nothing(boxes: Boxes, tools_dir: Path) -> None:
    write_script(
        tools_dir,
        "add",
        describe_json("add", **{"empty-result": {"tag": "AddMessage", "contents": "No results"}}),
        "true",
    )
    write_script(tools_dir, "none", describe_json("none", **{"empty-result": {"tag": "DoNothing"}}), "true")
    write_script(
        tools_dir, "space", describe_json("space", **{"empty-result": {"tag": "AddMessage", "contents": "x"}}), "echo"
    )
    box = boxes.open(tools_dir)
    assert box.call("bash_add", {}, ctx("t")).data == "No results"
    assert box.call("bash_none", {}, ctx("t")).data == ""
    assert box.call("bash_space", {}, ctx("t")).data == "\n"  # not exactly empty: kept


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82"
)


def test_image_output_becomes_an_attachment(boxes: Boxes, tools_dir: Path, workdir: Path) -> None:
    (tools_dir / "pixel.png").write_bytes(PNG)
    write_script(
        tools_dir,
        "chart",
        describe_json("chart", **{"output-media-type": "image/png"}),
        f"cat {tools_dir / 'pixel.png'}",
    )
    write_script(
        tools_dir,
        "b64",
        describe_json("b64", **{"output-media-type": "image/png"}),
        f"base64 {tools_dir / 'pixel.png'}",
    )
    write_script(tools_dir, "liar", describe_json("liar", **{"output-media-type": "image/png"}), "echo text")
    box = boxes.open(tools_dir)
    for tool in ("bash_chart", "bash_b64"):
        result = box.call(tool, {}, ctx(tool))
        assert result.status == "passed", result
        [attachment] = result.attachments
        assert attachment.media_type == "image/png"
        assert not attachment.path.startswith("/")
        assert (workdir / attachment.path).read_bytes() == PNG
    liar = box.call("bash_liar", {}, ctx("t"))  # attached as printed: the supervisor's check refuses it
    assert liar.status == "passed" and (workdir / liar.attachments[0].path).read_bytes() == b"text\n"


def test_other_media_becomes_an_attachment_of_its_type(boxes: Boxes, tools_dir: Path, workdir: Path) -> None:
    write_script(
        tools_dir, "pdf", describe_json("pdf", **{"output-media-type": "application/pdf"}), "printf '%%PDF-1.4 fake'"
    )
    write_script(
        tools_dir,
        "wav",
        describe_json("wav", **{"output-media-type": "audio/wav"}),
        "printf 'RIFF\\0\\0\\0\\0WAVEfmt ' | base64",
    )
    write_script(tools_dir, "notpdf", describe_json("notpdf", **{"output-media-type": "application/pdf"}), "echo hello")
    box = boxes.open(tools_dir)
    result = box.call("bash_pdf", {}, ctx("t"))
    assert result.status == "passed" and result.data_path is None
    [pdf] = result.attachments
    assert (pdf.media_type, pdf.name) == ("application/pdf", "bash_pdf.pdf")
    assert (workdir / pdf.path).read_bytes() == b"%PDF-1.4 fake"
    [wav] = box.call("bash_wav", {}, ctx("t")).attachments  # printed as base64: decoded
    assert wav.media_type == "audio/wav" and (workdir / wav.path).read_bytes() == b"RIFF\0\0\0\0WAVEfmt "
    [notpdf] = box.call("bash_notpdf", {}, ctx("t")).attachments
    assert notpdf.media_type == "application/pdf" and (workdir / notpdf.path).read_bytes() == b"hello\n"


def test_json_and_text_output_are_the_results_data(boxes: Boxes, tools_dir: Path) -> None:
    """``output-media-type`` application/json and text/*: delivered as data, not as a file."""
    write_script(
        tools_dir, "js", describe_json("js", **{"output-media-type": "application/json"}), "echo '{\"rows\": [1, 2]}'"
    )
    write_script(
        tools_dir, "badjs", describe_json("badjs", **{"output-media-type": "application/json"}), "echo 'not json'"
    )
    write_script(tools_dir, "csv", describe_json("csv", **{"output-media-type": "text/csv"}), "printf 'a,b\\n1,2\\n'")
    box = boxes.open(tools_dir)
    js = box.call("bash_js", {}, ctx("t"))
    assert (js.status, js.structured, js.attachments, js.data_path) == ("passed", {"rows": [1, 2]}, [], None)
    assert js.meta("media_type") == "application/json"
    bad = box.call("bash_badjs", {}, ctx("t"))
    assert bad.status == "passed" and bad.structured is None
    assert bad.data is not None and bad.data.startswith("not json") and "is not JSON" in bad.data
    csv = box.call("bash_csv", {}, ctx("t"))
    assert (csv.status, csv.data, csv.attachments) == ("passed", "a,b\n1,2\n", [])


def test_unknown_tool_and_missing_argument_are_refused(boxes: Boxes, tools_dir: Path) -> None:
    arg = {
        "name": "v",
        "description": "",
        "type": "s",
        "backing_type": "string",
        "arity": "single",
        "mode": "positional",
    }
    write_script(tools_dir, "t", describe_json("t", [arg]), "echo $1")
    box = boxes.open(tools_dir)
    assert box.call("bash_nope", {}, ctx("t")).status == "error"
    missing = box.call("bash_t", {}, ctx("t"))
    assert (missing.status, missing.summary) == ("error", "bash_t: argument 'v' is required")


def test_concurrent_calls_each_get_their_own_output(boxes: Boxes, tools_dir: Path) -> None:
    arg = {
        "name": "v",
        "description": "",
        "type": "s",
        "backing_type": "integer",
        "arity": "single",
        "mode": "positional",
    }
    write_script(tools_dir, "t", describe_json("t", [arg]), "echo $1")
    box = boxes.open(tools_dir)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: box.call("bash_t", {"v": i}, ctx("t")), range(24)))
    assert [r.data for r in results] == [f"{i}\n" for i in range(24)]


# -- watching ------------------------------------------------------------------------------------------------------
def test_added_changed_and_removed_scripts_update_the_tools_within_two_seconds(boxes: Boxes, tools_dir: Path) -> None:
    box = boxes.open(tools_dir, watch_interval_s=0.2)
    changed = boxes.channel.changed
    assert box.tools() == []

    def wait_change() -> float:
        started = time.monotonic()
        assert changed.wait(2), "no tools_changed within 2 s"
        changed.clear()
        return time.monotonic() - started

    started = time.monotonic()
    write_script(tools_dir, "new", describe_json("new"), "echo one")
    wait_change()
    assert time.monotonic() - started < 2
    assert names(box.tools()) == ["bash_new"]
    assert box.call("bash_new", {}, ctx("t")).data == "one\n"

    tmp = tools_dir / ".new.tmp"  # replaced atomically, as editors do
    write_script(tools_dir, ".new.tmp", describe_json("renamed"), "echo two")
    os.replace(tmp, tools_dir / "new")
    wait_change()
    assert names(box.tools()) == ["bash_renamed"]
    assert box.call("bash_renamed", {}, ctx("t")).data == "two\n"

    (tools_dir / "new").unlink()
    wait_change()
    assert box.tools() == []
    assert box.call("bash_renamed", {}, ctx("t")).status == "error"


def test_a_broken_edit_becomes_a_load_error_and_a_fix_restores_the_tool(boxes: Boxes, tools_dir: Path) -> None:
    script = write_script(tools_dir, "t", describe_json("t"), "echo ok")
    box = boxes.open(tools_dir, watch_interval_s=0.2)
    assert names(box.tools()) == ["bash_t"]
    changed = boxes.channel.changed
    script.write_text("#!/bin/bash\necho '{broken'\n")
    assert changed.wait(2)
    changed.clear()
    assert box.tools() == []
    assert "invalid JSON" in box.load_errors()[0]["message"]
    write_script(tools_dir, "t", describe_json("t"), "echo ok")
    assert changed.wait(2)
    assert names(box.tools()) == ["bash_t"]
    assert box.load_errors() == []


# -- shipped examples ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", ["bash", "python"])
def test_the_seed_templates_work_unchanged(boxes: Boxes, folder: str) -> None:
    box = boxes.open(EXAMPLES / "tools" / folder)
    assert box.load_errors() == []
    assert names(box.tools()) == ["bash_my_tool"]
    result = box.call("bash_my_tool", {}, ctx("bash_my_tool"))
    assert (result.status, result.data) == ("passed", "Tool my-tool executed\n")


def test_kimi_ask_user_registers_as_bash_ask_user(boxes: Boxes) -> None:
    agent = json.loads((EXAMPLES / "kimi" / "kimi.json").read_text())
    [entry] = agent["contents"]["bashToolboxes"]
    path = (EXAMPLES / "kimi" / entry["contents"]["Path"]).resolve()
    box = boxes.open(path, single=True)
    assert names(box.tools()) == ["bash_ask_user"]
    assert box.tools()[0].input_schema["required"] == ["question"]
    result = box.call("bash_ask_user", {"question": "Which colour?"}, ctx("bash_ask_user"))
    assert result.status == "passed"
    assert 'No user is available to answer "Which colour?"' in (result.data or "")


# -- as PID 1 of a PID namespace whose /proc is the host's (how the launcher runs a worker) ---------------------
PID1_PROGRAM = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from toolboxes._bounded_run import run_bounded
from toolboxes._reaper import Reaper
reaper = Reaper(subreaper=True)
script = "setsid sleep 300 & echo $!; sleep 300 & echo $!; (setsid sleep 300 & echo $!); echo done"
out = run_bounded(reaper, ["/bin/bash", "-c", script], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                  stdin=None, deadline=time.monotonic() + 10, stdout_cap=4096, stderr_cap=4096)
pids = [int(x) for x in out.stdout.split()[:-1]]
left = []
for pid in pids:
    try:
        os.kill(pid, 0)
        left.append(pid)
    except ProcessLookupError:
        pass
print(json.dumps({"pid": os.getpid(), "wipe": reaper.wipe_when_idle, "pids": pids, "left": left,
                  "exit": out.exit_code, "elapsed": out.elapsed_s}))
"""


@pytest.mark.root
def test_as_pid_1_leftovers_are_killed_and_reaped_without_proc() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", PID1_PROGRAM, str(REPO)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["pid"] == 1
    assert report["wipe"] is True
    assert len(report["pids"]) == 3
    assert report["exit"] == 0
    assert report["elapsed"] < 5
    assert report["left"] == []
