"""The WASM toolbox for real: components built from WAT at set-up, run by wasmtime in a confined worker, every result
asserted from the outside through the MCP frontend (the official SDK client over stdio) and the trace.

The components (``tests/_wasm_components.py``) each do one thing: pass (echoing their input), fail, return
``error``, trap, return an image, return bad attachments, write their log, loop forever, allocate without bound,
measure how much memory they can get, open a file outside their preopens, try the network, and list their
environment. ``context.images.max_bytes`` is 2048 so that one of them can be too large.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mcp.types as mcp_types
import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from labkit import Spec, build_components, png_bytes
from tests._policies import agent, write_policy
from tests._workers import pid_one

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
MAX_IMAGE = 2048
NOBODY = 65534

SPECS = [
    Spec(
        "echo",
        summary="echoed the input",
        behaviour="echo",
        metadata=[("state_effect", "read"), ("resource_id", "echo:input"), ("continuation_id", "")],
    ),
    Spec(
        "fails",
        status="failed",
        summary="2 of 5 checks failed",
        data="check 3: expected 4, got 5",
        data_path="reports/checks.txt",
        truncated=True,
        metadata=[("state_effect", "mutate")],
    ),
    Spec("errs", status="error", summary="the input names no project", data="no project"),
    Spec("traps", behaviour="trap"),
    Spec("image", summary="one picture", files=[("pic.png", png_bytes())], attachments=[("image/png", "pic.png")]),
    Spec(
        "bad_attachments",
        summary="four pictures",
        data="see the pictures",
        files=[
            ("pic.png", png_bytes()),
            ("fake.png", b"GIF89a" + b"\x00" * 32),
            ("big.png", png_bytes(padding=MAX_IMAGE * 2)),
            ("logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>'),
        ],
        attachments=[
            ("image/png", "fake.png"),
            ("image/png", "big.png"),
            ("image/png", "link.png"),
            ("image/svg+xml", "logo.svg"),  # seed 000: attachments are png, jpeg, gif or webp
            ("image/png", "pic.png"),
        ],
    ),
    Spec("logs", summary="logged", behaviour="log"),
    Spec("loops", behaviour="loop"),
    Spec("sleeps", behaviour="sleep", sleep_ms=25_000, world="sleeper"),
    Spec("allocates", behaviour="alloc"),
    Spec("measures", behaviour="measure"),
    Spec("opens", behaviour="open"),
    Spec("opens_inside", behaviour="open", open_path="inside.txt"),
    Spec("opens_link", behaviour="open", open_path="escape/hostname"),
    Spec("connects", behaviour="net"),
    Spec("environ", behaviour="env"),
]


def _wasm(**contents: Any) -> dict[str, Any]:
    return {
        "tag": "WasmToolbox",
        "contents": {
            "Name": "probe",
            "Description": "test components",
            "Path": "./components",
            "MaxMemoryMB": 16,
            "MaxExecutionTimeSeconds": 1,
            "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./shared"}},
            **contents,
        },
    }


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    build_components(SPECS, sandbox_tmp / "components")
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)
    return write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[_wasm()])},
        landlock_min_abi=6,
        context={"images": {"max_bytes": MAX_IMAGE}},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )


@contextlib.asynccontextmanager
async def _session(policy: Path, handler: Any = None) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(policy)],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write, message_handler=handler) as s:
        await s.initialize()
        yield s


def _trace(policy: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (policy.parent / "t.jsonl").read_text().splitlines()]


def _ends(policy: Path) -> dict[str, dict[str, Any]]:
    """The last ``call_end`` record of each tool."""
    return {r["tool"]: r for r in _trace(policy) if r["event"] == "call_end"}


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def _workdir(policy: Path) -> Path:
    return policy.parent / "state" / "work" / "tester" / "probe"


async def test_every_component_is_a_tool_with_its_sidecar(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {f"wasm_probe_{spec.name}" for spec in SPECS}
    assert tools["wasm_probe_echo"].description == "test component echo"
    assert tools["wasm_probe_echo"].input_schema["properties"] == {"q": {"type": "string"}}


async def test_passes_fails_and_errors_map_field_by_field(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            ok = await s.call_tool("wasm_probe_echo", {"q": "héllo"})
            failed = await s.call_tool("wasm_probe_fails", {})
            errored = await s.call_tool("wasm_probe_errs", {})
            refused = await s.call_tool("wasm_probe_echo", {"q": 7})
    # tool-input.data is the call's arguments as JSON text; data comes back as the text the model sees
    assert not ok.is_error and json.loads(_text(ok)) == {"q": "héllo"}
    assert failed.is_error and _text(failed).startswith("check 3: expected 4, got 5")
    assert "[output truncated]" in _text(failed)
    assert errored.is_error and _text(errored) == "no project"
    assert refused.is_error and "validation failed" in _text(refused)  # the sidecar's schema, by the supervisor
    ends = _ends(policy)
    assert ends["wasm_probe_echo"]["status"] == "passed"
    assert ends["wasm_probe_echo"]["summary"] == "echoed the input"
    assert ends["wasm_probe_echo"]["metadata"] == [
        ["state_effect", "read"],
        ["resource_id", "echo:input"],
        ["continuation_id", ""],
    ]
    assert ends["wasm_probe_fails"]["status"] == "failed"
    assert ends["wasm_probe_fails"]["metadata"] == [["state_effect", "mutate"]]
    assert ends["wasm_probe_errs"]["status"] == "error"
    assert ends["wasm_probe_errs"]["summary"] == "the input names no project"


async def test_a_trap_is_an_error_naming_it(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            trapped = await s.call_tool("wasm_probe_traps", {})
    assert trapped.is_error and "trapped: wasm trap: wasm `unreachable` instruction executed" in _text(trapped)


async def test_an_image_attachment_reaches_the_client(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            result = await s.call_tool("wasm_probe_image", {})
    assert not result.is_error
    [image] = [c for c in result.content if isinstance(c, mcp_types.ImageContent)]
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data) == png_bytes()
    # written by the component through its preopened work folder, as the worker's uid
    assert (_workdir(policy) / "pic.png").stat().st_uid == NOBODY


async def test_bad_attachments_are_refused_with_notes_and_status_unchanged(policy: Path, sandbox_tmp: Path) -> None:
    outside = sandbox_tmp / "outside.png"
    outside.write_bytes(png_bytes())
    with trio.fail_after(60):
        async with _session(policy) as s:
            (_workdir(policy) / "link.png").symlink_to(outside)  # the work folder exists once the worker started
            result = await s.call_tool("wasm_probe_bad_attachments", {})
    assert not result.is_error  # a refused attachment never changes the status
    images = [c for c in result.content if isinstance(c, mcp_types.ImageContent)]
    assert [base64.b64decode(i.data) for i in images] == [png_bytes()]  # only pic.png
    notes = {line.split("'")[1]: line for line in _text(result).splitlines() if line.startswith("[attachment ")}
    assert set(notes) == {"fake.png", "big.png", "link.png", "logo.svg"}
    assert (
        "the murmur:tool world's attachments are images: image/png, image/jpeg, image/gif, image/webp"
        in (notes["logo.svg"])
    )
    assert "not image/png" in notes["fake.png"] and "image/gif" in notes["fake.png"]
    assert (
        f"it is {len(png_bytes(padding=MAX_IMAGE * 2))} bytes, more than the limit of {MAX_IMAGE}" in notes["big.png"]
    )
    assert "the path goes through a symbolic link" in notes["link.png"]
    assert _ends(policy)["wasm_probe_bad_attachments"]["status"] == "passed"


async def test_the_log_is_traced_and_removed(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            result = await s.call_tool("wasm_probe_logs", {})
    assert not result.is_error
    [event] = [r for r in _trace(policy) if r["event"] == "worker_event" and r["data"]["event"] == "wasm_log"]
    assert event["toolbox"] == "probe"
    assert event["data"]["tool"] == "wasm_probe_logs"
    assert event["data"]["log"] == "a line from the component's log\n"
    assert event["data"]["log_bytes"] == len("a line from the component's log\n")
    assert list((_workdir(policy) / ".wasm-logs").iterdir()) == []


async def test_a_component_that_loops_forever_is_stopped_and_the_worker_keeps_serving(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            start = trio.current_time()
            looped = await s.call_tool("wasm_probe_loops", {})
            took = trio.current_time() - start
            after = await s.call_tool("wasm_probe_echo", {"q": "still here"})
    assert looped.is_error
    assert "ran longer than its time limit of 1 s (MaxExecutionTimeSeconds" in _text(looped)
    assert took < 10
    assert not after.is_error and json.loads(_text(after)) == {"q": "still here"}
    spawns = [r for r in _trace(policy) if r["event"] == "worker_spawn" and r["toolbox"] == "probe"]
    assert len(spawns) == 1  # the same worker answered both calls


@pytest.mark.slow
async def test_a_component_blocked_in_a_host_call_is_stopped_at_its_limit_and_the_next_call_does_not_wait(
    policy: Path,
) -> None:
    """Issue 24 item 5: ``sleeps`` blocks 25 s in wasi:clocks (subscribe-duration, then pollable.block), host code
    the epoch deadline never reaches. Four of them at once under a 1 s limit: each ends ``error`` near the limit
    (its executor process killed), and the next call is answered at once, by the same worker."""
    durations: list[float] = []
    answers: list[Any] = []
    with trio.fail_after(90):
        async with _session(policy) as s:
            await s.call_tool("wasm_probe_echo", {"q": "warm"})
            worker = pid_one(next(r["pid"] for r in _trace(policy) if r["event"] == "worker_spawn"))
            own = Path(f"/proc/{worker}/cmdline").read_bytes()
            executors = Path(f"/proc/{worker}/task/{worker}/children").read_text().split()
            # the first executors were forked from the worker as it opened the toolbox (one thread then): the
            # worker's own command line, no interpreter start on the path of its first answer
            assert executors and all(Path(f"/proc/{e}/cmdline").read_bytes() == own for e in executors)

            async def sleeper() -> None:
                start = trio.current_time()
                answers.append(await s.call_tool("wasm_probe_sleeps", {}))
                durations.append(trio.current_time() - start)

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(sleeper)
            start = trio.current_time()
            after = await s.call_tool("wasm_probe_echo", {"q": "next"})
            next_took = trio.current_time() - start
    for answer in answers:
        assert answer.is_error
        assert "ran longer than its time limit of 1 s" in _text(answer) and "waiting in a host call" in _text(answer)
    # 1 s and the grace of 0.5 s; executors started for the calls that found none ready add their start (under a
    # second here, a few on a loaded machine): far from the 25 s the component asked for
    assert all(1.0 <= d < 8.0 for d in durations), durations
    assert not after.is_error and json.loads(_text(after)) == {"q": "next"}
    assert next_took < 2.0, next_took  # a spare executor was ready
    assert len([r for r in _trace(policy) if r["event"] == "worker_spawn" and r["toolbox"] == "probe"]) == 1


async def test_memory_is_capped_by_the_store_limit(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            measured = await s.call_tool("wasm_probe_measures", {})
            exhausted = await s.call_tool("wasm_probe_allocates", {})
            after = await s.call_tool("wasm_probe_echo", {"q": "x"})
    # memory.grow fails at MaxMemoryMB (16 MiB = 256 pages of 64 KiB), whatever the worker's own limits
    assert not measured.is_error and _text(measured) == "256"
    assert exhausted.is_error and "MaxMemoryMB" in _text(exhausted) and "16 MiB" in _text(exhausted)
    assert not after.is_error
    assert len([r for r in _trace(policy) if r["event"] == "worker_spawn" and r["toolbox"] == "probe"]) == 1


async def test_only_the_work_folder_and_the_file_sandbox_are_preopened(policy: Path, sandbox_tmp: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            (_workdir(policy) / "inside.txt").write_text("in the work folder")
            (_workdir(policy) / "escape").symlink_to("/etc")
            opened = await s.call_tool("wasm_probe_opens", {})
            inside = await s.call_tool("wasm_probe_opens_inside", {})
            linked = await s.call_tool("wasm_probe_opens_link", {})
    # open-at of ../../../etc/hostname from the work folder: wasi:filesystem error-code 31, not-permitted
    assert _text(opened) == "31"
    assert _text(inside) == "opened"  # the same open-at of a file that is in the work folder works
    assert _text(linked) == "31"  # a symlink in the work folder that leads out is refused the same way
    preopens = [v for k, v in _ends(policy)["wasm_probe_opens"]["metadata"] if k == "preopen"]
    assert preopens == [str(_workdir(policy)), str(sandbox_tmp / "shared")]


async def test_a_write_past_fsb_max_file_size_is_refused_by_the_kernel_and_reported(sandbox_tmp: Path) -> None:
    """fsbMaxFileSize is the worker's RLIMIT_FSIZE once the toolbox is open: a component's write past it fails in
    the kernel (EFBIG, file-too-large inside), and the call ends ``error`` naming the key, whatever the component
    claims; the same worker serves the next calls, and a call that writes nothing is untouched."""
    build_components(
        [Spec("writes_big", behaviour="bigwrite", summary="wrote big.bin"), SPECS[0]], sandbox_tmp / "components"
    )
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./shared"}, "fsbMaxFileSize": 4096}
    (sandbox_tmp / "shared").mkdir()
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[_wasm(FileSandbox=fsb)])},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )
    changes = _Changes()
    components = sandbox_tmp / "components"
    with trio.fail_after(60):
        async with _session(path, changes.handler) as s:
            first = await s.call_tool("wasm_probe_writes_big", {})
            size = (_workdir(path) / "big.bin").stat().st_size
            echoed = await s.call_tool("wasm_probe_echo", {"q": "x"})
            again = await s.call_tool("wasm_probe_writes_big", {})
            # a component loaded after the limit applies, whose initial memory (8 KiB) is larger than the limit,
            # still runs: the engine makes no memfd image of it (that file would count against RLIMIT_FSIZE)
            build_components([Spec("later", data="x" * 6000)], components)
            await changes.event.wait()
            later = await s.call_tool("wasm_probe_later", {})
    for result in (first, again):
        assert result.is_error
        assert "file size limit of 4096 bytes (FileSandbox.fsbMaxFileSize)" in _text(result)
        # the component's own answer: passed, with wasi:filesystem error-code 8 (file-too-large) from its write
        assert "status passed" in _text(result) and "data '8'" in _text(result)
    assert size == 4096  # the kernel cut the file at the limit
    assert not echoed.is_error and json.loads(_text(echoed)) == {"q": "x"}
    assert not later.is_error and _text(later) == "x" * 6000
    assert _ends(path)["wasm_probe_writes_big"]["status"] == "error"
    assert len([r for r in _trace(path) if r["event"] == "worker_spawn" and r["toolbox"] == "probe"]) == 1


async def test_a_write_past_the_policy_file_size_limit_names_limits_file_size_bytes(sandbox_tmp: Path) -> None:
    """Without a FileSandbox the worker's own RLIMIT_FSIZE (the policy's limits.file_size_bytes) is the limit, and a
    component's write past it is reported the same way, naming that key."""
    build_components([Spec("writes_big", behaviour="bigwrite")], sandbox_tmp / "components")
    path = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[_wasm(FileSandbox=None)])}, limits={"file_size_bytes": 8192}
    )
    with trio.fail_after(60):
        async with _session(path) as s:
            result = await s.call_tool("wasm_probe_writes_big", {})
            size = (_workdir(path) / "big.bin").stat().st_size
    assert result.is_error and "file size limit of 8192 bytes (limits.file_size_bytes)" in _text(result)
    assert size == 8192


async def test_no_network_without_allowed_hosts(policy: Path) -> None:
    with trio.fail_after(60):
        async with _session(policy) as s:
            connected = await s.call_tool("wasm_probe_connects", {})
    # 100 + wasi:sockets error-code 1: create-tcp-socket answers access-denied, no socket is made at all
    assert _text(connected) == "101"


async def test_allowed_hosts_give_components_no_sockets_in_this_build(sandbox_tmp: Path) -> None:
    """wasmtime-py's WASI p2 refuses sockets even with the network inherited (docs/WASM.md): the check says so and
    a component aiming at the worker's own egress proxy still gets no socket. Should a wasmtime release change
    this, this test fails and the docs and the compile warning must change with it."""
    from sandbox import BridgePorts

    build_components(
        [Spec("proxy", behaviour="net", connect=((127, 0, 0, 1), BridgePorts().proxy))], sandbox_tmp / "components"
    )
    agents = {"tester": agent(builtinToolboxes=[_wasm(FileSandbox=None, AllowedHosts=["api.example.test"])])}
    path = write_policy(sandbox_tmp, agents, strict=False, trace={"path": str(sandbox_tmp / "t.jsonl")})
    with trio.fail_after(60):
        async with _session(path) as s:
            connected = await s.call_tool("wasm_probe_proxy", {})
    assert _text(connected) == "101"
    write_policy(sandbox_tmp, agents, strict=True)
    check = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=120,
    )
    assert check.returncode != 0
    assert "AllowedHosts gives WASM components nothing in this build" in check.stderr
    assert "has no call that allows TCP or UDP" in check.stderr and "Remove AllowedHosts" in check.stderr
    assert "A strict policy refuses a setting that cannot hold" in check.stderr


async def test_the_environment_is_only_what_the_policy_sets(sandbox_tmp: Path) -> None:
    build_components(SPECS, sandbox_tmp / "components")
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[_wasm(FileSandbox=None)])},
        worker_env={"GREETING": "hello", "LANG": "C.UTF-8"},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )
    os.environ["WASM_TEST_LEAK"] = "must not be seen"
    try:
        with trio.fail_after(60):
            async with _session(path) as s:
                await s.call_tool("wasm_probe_environ", {})
    finally:
        del os.environ["WASM_TEST_LEAK"]
    env = dict(map(tuple, _ends(path)["wasm_probe_environ"]["metadata"]))
    workdir = str(_workdir(path))
    # the policy's worker_env and what every worker gets (HOME, TMPDIR, SHELL); nothing of the supervisor's own
    assert env == {
        "GREETING": "hello",
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": f"{workdir}/tmp",
        "SHELL": "/bin/sh",
    }


class _Changes:
    def __init__(self) -> None:
        self.event = trio.Event()

    async def handler(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.event.set()


async def test_load_errors_and_the_folder_is_watched(sandbox_tmp: Path) -> None:
    components = sandbox_tmp / "components"
    build_components([SPECS[0], Spec("http", world="http")], components)
    (components / "nosidecar.wasm").write_bytes((components / "echo.wasm").read_bytes())
    (components / "badsidecar.wasm").write_bytes((components / "echo.wasm").read_bytes())
    (components / "badsidecar.json").write_text('{"description": "", "inputSchema": {"type": "array"}}')
    (components / "notwasm.wasm").write_bytes(b"\x00asm\x01\x00\x00\x00")  # a core module, not a component
    (components / "notwasm.json").write_text('{"description": "x"}')
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[_wasm(FileSandbox=None)])},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "tools", "--policy", str(path), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=120,
        check=True,
    )
    listed = json.loads(out.stdout)
    assert [t["name"] for t in listed["tools"]] == ["wasm_probe_echo"]
    errors = {os.path.basename(e["source"]): e["message"] for e in listed["load_errors"]}
    assert "no sidecar nosidecar.json beside it" in errors["nosidecar.wasm"]
    assert "badsidecar.json: 'description' must be a non-empty string" in errors["badsidecar.wasm"]
    assert "not a WebAssembly component wasmtime can compile" in errors["notwasm.wasm"]
    # wasi:http is not linked (its outgoing handler would dial hosts directly, not through the egress proxy)
    assert "does not instantiate here" in errors["http.wasm"] and "wasi:http/outgoing-handler" in errors["http.wasm"]

    changes = _Changes()
    with trio.fail_after(60):
        async with _session(path, changes.handler) as s:
            build_components([Spec("later", summary="new", behaviour="echo")], sandbox_tmp / "staging")
            (sandbox_tmp / "staging" / "later.json").rename(components / "later.json")
            (sandbox_tmp / "staging" / "later.wasm").rename(components / "later.wasm")
            while "wasm_probe_later" not in {t.name for t in (await s.list_tools()).tools}:
                await changes.event.wait()
                changes.event = trio.Event()
            result = await s.call_tool("wasm_probe_later", {"q": "fresh"})
    assert json.loads(_text(result)) == {"q": "fresh"}


async def test_calls_in_flight_each_get_their_own_store(policy: Path) -> None:
    """Eight echo calls while another call loops: each gets back its own input, and the loop ends on time."""
    answers: dict[int, Any] = {}
    with trio.fail_after(60):
        async with _session(policy) as s:

            async def echo(i: int) -> None:
                answers[i] = json.loads(_text(await s.call_tool("wasm_probe_echo", {"q": f"call {i}"})))

            async def loop() -> None:
                answers[-1] = await s.call_tool("wasm_probe_loops", {})

            async with trio.open_nursery() as nursery:
                nursery.start_soon(loop)
                for i in range(8):
                    nursery.start_soon(echo, i)
    assert {i: answers[i] for i in range(8)} == {i: {"q": f"call {i}"} for i in range(8)}
    assert answers[-1].is_error and "time limit" in _text(answers[-1])


async def test_a_restart_does_not_compile_again(policy: Path) -> None:
    cache = policy.parent / "state" / "toolbox-state" / "tester" / "probe" / "wasm-cache"
    with trio.fail_after(60):
        async with _session(policy) as s:
            assert not (await s.call_tool("wasm_probe_echo", {})).is_error
    first = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir()}
    assert len(first) == len(SPECS)  # one compiled file per component, written by the worker
    assert all(p.stat().st_uid == NOBODY and p.stat().st_mode & 0o077 == 0 for p in cache.iterdir())
    with trio.fail_after(60):
        async with _session(policy) as s:
            assert not (await s.call_tool("wasm_probe_echo", {})).is_error
    # the second worker deserialized every file: none was written again
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir()} == first
