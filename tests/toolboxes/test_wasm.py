"""The WASM toolbox's pure parts and its in-process behaviour (no worker): config and sidecar checks, the result
mapping's bounds, the compile cache, and the epoch deadline. The confined, end-to-end behaviour is in
``tests/supervisor/test_wasm_e2e.py``."""

from __future__ import annotations

import json
import resource
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as wc

from labkit import Spec, build_components
from toolboxes import CallContext, WorkerEnv
from toolboxes._result import MAX_ATTACHMENTS, MAX_METADATA_PAIRS
from toolboxes.wasm import ComponentLoadError, WasmConfigError, open_toolbox
from toolboxes.wasm._config import parse_config
from toolboxes.wasm._engine import WASMTIME_VERSION, EpochClock
from toolboxes.wasm._file_size import FileSizeLimit, plan_file_size_limit
from toolboxes.wasm._result_map import to_tool_result
from toolboxes.wasm._sidecar import parse_sidecar
from toolboxes.wasm._toolbox import NO_NETWORK

if TYPE_CHECKING:
    from pathlib import Path


#: how long the ``sleeps`` component blocks in wasi:clocks (no guest code runs meanwhile)
SLEEP_MS = 4000


class _Channel:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.changes = 0

    def event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def tools_changed(self) -> None:
        self.changes += 1


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, state, components = tmp_path / "work", tmp_path / "state", tmp_path / "components"
    work.mkdir()
    state.mkdir()
    build_components(
        [
            Spec("echo", summary="echoed", behaviour="echo"),
            Spec("loops", behaviour="loop"),
            Spec("bigwrite", behaviour="bigwrite"),
            Spec("sleeps", behaviour="sleep", sleep_ms=SLEEP_MS, world="sleeper"),
        ],
        components,
    )
    return work, state, components


def _open(dirs: tuple[Path, Path, Path], **config: Any) -> Any:
    work, state, components = dirs
    entry = {
        "Name": "t",
        "Path": str(components),
        "MaxExecutionTimeSeconds": 0.3,
        "policy": {"watch_interval_s": 0},
        **config,
    }
    return open_toolbox(entry, WorkerEnv("t", str(work), str(state), _Channel()))  # type: ignore[arg-type]


# -- config and sidecar --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"Path": "/x"}, "Name: expected a non-empty string"),
        ({"Name": "t", "Path": "relative"}, "Path: expected an absolute path"),
        ({"Name": "t", "Path": "/x", "MaxMemoryMB": 0}, "MaxMemoryMB: expected a positive number"),
        ({"Name": "t", "Path": "/x", "MaxExecutionTimeSeconds": float("inf")}, "MaxExecutionTimeSeconds"),
        ({"Name": "t", "Path": "/x", "FileSandbox": {"fsbMaxFileSize": 1}}, "FileSandbox"),
        ({"Name": "t", "Path": "/x", "AllowedHosts": "a.test"}, "AllowedHosts: expected a list"),
    ],
)
def test_bad_config_is_refused_naming_the_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(WasmConfigError, match=message):
        parse_config(entry)


def test_config_defaults() -> None:
    cfg = parse_config({"Name": "t", "Path": "/x", "policy": {"env": {"B": "2", "A": "1"}}})
    assert cfg.max_memory_bytes == 64 * 1024 * 1024 and cfg.max_seconds == 30
    assert cfg.env == (("A", "1"), ("B", "2")) and cfg.file_sandbox is None and cfg.allowed_hosts == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"{", "not valid JSON"),
        (b"[]", "expected an object"),
        (b'{"description": "x", "schema": {}}', "unknown keys \\['schema'\\]"),
        (b'{"description": "  "}', "'description' must be a non-empty string"),
        (b'{"description": "x", "inputSchema": {"type": "string"}}', '"type": "object"'),
        (b'{"description": "x", "inputSchema": {"type": "object", "required": 3}}', "not a valid JSON Schema"),
        (b" " * (256 * 1024 + 1), "larger than"),
    ],
)
def test_a_bad_sidecar_says_what_is_wrong(text: bytes, message: str) -> None:
    with pytest.raises(ComponentLoadError, match=message):
        parse_sidecar(text, "x.json")


def test_a_sidecar_without_a_schema_takes_any_object() -> None:
    side = parse_sidecar(b'{"description": "does x"}', "x.json")
    assert side.description == "does x" and side.input_schema == {"type": "object"}


# -- the result mapping ----------------------------------------------------------------------------------------------
def _record(**fields: Any) -> wc.Record:
    record = wc.Record()
    values = {
        "status": "passed",
        "summary": None,
        "data": None,
        "data-path": None,
        "truncated": False,
        "metadata": [],
        "attachments": [],
        **fields,
    }
    for k, v in values.items():
        setattr(record, k, v)
    return record


def _attachment(path: str, media_type: str = "image/png") -> wc.Record:
    a = wc.Record()
    setattr(a, "media-type", media_type)
    a.path = path
    return a


def test_paths_under_the_work_folder_become_relative() -> None:
    result = to_tool_result(
        _record(**{"data-path": "/w/out/a.txt", "attachments": [_attachment("/w/p.png"), _attachment("/etc/p.png")]}),
        "/w",
        "t",
    )
    assert result.data_path == "out/a.txt"
    assert [a.path for a in result.attachments] == ["p.png", "/etc/p.png"]  # the supervisor refuses the second


def test_more_metadata_than_the_wire_carries_is_an_error() -> None:
    result = to_tool_result(_record(metadata=[("k", "v")] * (MAX_METADATA_PAIRS + 1)), "/w", "t")
    assert result.status == "error" and "more metadata than a result may carry" in result.data


def test_attachments_past_the_limit_are_dropped_with_a_note() -> None:
    result = to_tool_result(
        _record(data="d", attachments=[_attachment(f"{i}.png") for i in range(MAX_ATTACHMENTS + 1)]), "/w", "t"
    )
    assert result.status == "passed" and len(result.attachments) == MAX_ATTACHMENTS
    assert result.data == f"d\n[attachment '{MAX_ATTACHMENTS}.png' refused: more than {MAX_ATTACHMENTS} attachments]"
    assert result.meta("attachment_refused")


def test_an_unknown_status_is_an_error() -> None:
    assert to_tool_result(_record(status="maybe"), "/w", "t").status == "error"


# -- compile cache, time limit -------------------------------------------------------------------------------------
def test_a_restart_takes_the_compiled_component_from_the_cache(dirs: tuple[Path, Path, Path]) -> None:
    first = _open(dirs)
    assert first.loaded("wasm_t_echo").from_cache is False
    first.close()
    cached = sorted((dirs[1] / "wasm-cache").iterdir())
    assert len(cached) == 4 and all(f"-{WASMTIME_VERSION}-" in p.name for p in cached)  # one per component
    second = _open(dirs)
    try:
        assert second.loaded("wasm_t_echo").from_cache is True
        result = second.call("wasm_t_echo", {"q": "x"}, CallContext(1, "wasm_t_echo"))
        assert result.status == "passed" and json.loads(result.data) == {"q": "x"}
    finally:
        second.close()


def test_an_unusable_cache_file_is_compiled_again(dirs: tuple[Path, Path, Path]) -> None:
    _open(dirs).close()
    for p in (dirs[1] / "wasm-cache").iterdir():
        p.write_bytes(b"not a compiled component")
    again = _open(dirs)
    try:
        assert again.loaded("wasm_t_echo").from_cache is False
        assert again.call("wasm_t_echo", {}, CallContext(1, "wasm_t_echo")).status == "passed"
    finally:
        again.close()


def test_the_deadline_of_the_call_lowers_the_time_limit(dirs: tuple[Path, Path, Path]) -> None:
    tb = _open(dirs, MaxExecutionTimeSeconds=30)
    try:
        ctx = CallContext(1, "wasm_t_loops", deadline=time.monotonic() + 0.2)
        start = time.monotonic()
        result = tb.call("wasm_t_loops", {}, ctx)
        assert result.status == "error" and "ran longer than its time limit" in result.data
        assert time.monotonic() - start < 5
    finally:
        tb.close()


def test_epoch_ticks_round_up() -> None:
    assert EpochClock.ticks(0) == 1 and EpochClock.ticks(1.0) == 101


def test_logs_a_dead_worker_left_are_removed_at_open(dirs: tuple[Path, Path, Path]) -> None:
    logs = dirs[0] / ".wasm-logs"
    logs.mkdir()
    (logs / "echo-7-0000.log").write_text("from a worker killed mid-call")
    (logs / "link.log").symlink_to(dirs[2] / "echo.json")
    _open(dirs).close()
    assert list(logs.iterdir()) == []
    assert (dirs[2] / "echo.json").exists()  # the link was removed, not what it points to


# -- the file size limit (its enforcement by the kernel: tests/supervisor/test_wasm_e2e.py) ------------------------
def test_the_file_size_limit_is_the_smaller_setting_and_names_its_key() -> None:
    inf = resource.RLIM_INFINITY
    assert plan_file_size_limit(4096, inf) == FileSizeLimit(4096, "FileSandbox.fsbMaxFileSize")
    assert plan_file_size_limit(4096, 4096) == FileSizeLimit(4096, "FileSandbox.fsbMaxFileSize")
    assert plan_file_size_limit(4096, 1024) == FileSizeLimit(1024, "limits.file_size_bytes")
    assert plan_file_size_limit(None, 1024) == FileSizeLimit(1024, "limits.file_size_bytes")
    assert plan_file_size_limit(None, inf) is None
    assert "4096 bytes (FileSandbox.fsbMaxFileSize)" in FileSizeLimit(4096, "FileSandbox.fsbMaxFileSize").message("t")


def test_a_compiled_file_past_the_file_size_limit_is_not_written(dirs: tuple[Path, Path, Path]) -> None:
    """With an RLIMIT_FSIZE smaller than any compiled component (as a worker's fsbMaxFileSize may be), nothing is
    cached, and the engine runs without memfd memory images (their ftruncate would fail with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        tb = _open(dirs)
        try:
            assert tb.load_errors() == []
            assert tb.call("wasm_t_echo", {}, CallContext(1, "wasm_t_echo")).status == "passed"
            assert not (dirs[1] / "wasm-cache").exists() or not list((dirs[1] / "wasm-cache").iterdir())
        finally:
            tb.close()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_the_file_size_limit_holds_in_the_executor_and_leaves_the_worker_alone(dirs: tuple[Path, Path, Path]) -> None:
    """The limit lives in the executors (each applies it to itself and counts SIGXFSZ on its main thread), so the
    toolbox may be opened on any thread, and the process that opened it keeps its own limit and signal handling."""
    before = resource.getrlimit(resource.RLIMIT_FSIZE), signal.getsignal(signal.SIGXFSZ)
    opened: list[Any] = []
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(dirs[0])}, "fsbMaxFileSize": 4096}
    thread = threading.Thread(target=lambda: opened.append(_open(dirs, FileSandbox=fsb)))
    thread.start()
    thread.join()
    tb = opened[0]
    try:
        assert tb.load_errors() == []
        result = tb.call("wasm_t_bigwrite", {}, CallContext(1, "wasm_t_bigwrite"))
        assert result.status == "error" and "file size limit of 4096 bytes (FileSandbox.fsbMaxFileSize)" in result.data
        assert (dirs[0] / "big.bin").stat().st_size == 4096
        assert tb.call("wasm_t_echo", {}, CallContext(2, "wasm_t_echo")).status == "passed"  # its own call only
        assert (resource.getrlimit(resource.RLIMIT_FSIZE), signal.getsignal(signal.SIGXFSZ)) == before
    finally:
        tb.close()


# -- stopping a call whatever the component does -------------------------------------------------------------------
def test_a_component_blocked_in_a_host_call_is_stopped_at_its_limit_and_the_next_call_runs_at_once(
    dirs: tuple[Path, Path, Path],
) -> None:
    """``sleeps`` blocks 4 s in wasi:clocks (subscribe-duration, pollable.block): host code, where the epoch deadline
    cannot reach it. Under a 1 s limit its executor is killed at the limit (plus the grace), the call ends
    ``error`` saying so, and the component never gets to write the file it would write after its sleep; the next
    call finds a spare executor ready."""
    tb = _open(dirs, MaxExecutionTimeSeconds=1)
    try:
        assert tb.load_errors() == []
        assert tb.call("wasm_t_echo", {}, CallContext(1, "wasm_t_echo")).status == "passed"  # warm
        start = time.monotonic()
        result = tb.call("wasm_t_sleeps", {}, CallContext(2, "wasm_t_sleeps"))
        took = time.monotonic() - start
        assert result.status == "error" and "ran longer than its time limit of 1 s" in result.data
        assert "waiting in a host call" in result.data
        assert 1.0 <= took < 3.0, took  # the limit, plus the grace of 0.5 s, plus a loaded machine
        start = time.monotonic()
        assert tb.call("wasm_t_echo", {}, CallContext(3, "wasm_t_echo")).status == "passed"
        assert time.monotonic() - start < 1.0  # a spare was ready: no executor start on this call's path
        time.sleep(SLEEP_MS / 1000)  # as long as the component would have slept: it must not wake up and write
        assert not (dirs[0] / "after-sleep.txt").exists()
    finally:
        tb.close()


def test_a_cancelled_call_stops_its_component(dirs: tuple[Path, Path, Path]) -> None:
    tb = _open(dirs, MaxExecutionTimeSeconds=30)
    try:
        ctx = CallContext(1, "wasm_t_sleeps")
        threading.Timer(0.3, ctx.cancel).start()
        start = time.monotonic()
        result = tb.call("wasm_t_sleeps", {}, ctx)
        assert result.status == "error" and "cancelled" in result.data
        assert time.monotonic() - start < 2.0
    finally:
        tb.close()


# -- the network (the behaviour from inside a worker: tests/supervisor/test_wasm_e2e.py) ---------------------------
def test_wasmtime_py_offers_no_way_to_give_components_sockets() -> None:
    """Pins what docs/WASM.md "Network" rests on. wasmtime's WASI p2 allows TCP and UDP only through
    ``WasiCtxBuilder::allow_tcp``/``allow_udp`` (off by default); wasmtime-py's C library exports no call that sets
    them, and its ``WasiConfig`` has no network setting at all. When this fails, a wasmtime release can give
    components sockets: AllowedHosts through the worker's proxy can then be built (and the refusal in ``check``
    must go)."""
    dll = ffi.dll
    assert hasattr(dll, "wasi_config_inherit_network") and hasattr(dll, "wasi_config_allow_ip_name_lookup")
    for name in (
        "wasi_config_allow_tcp",
        "wasi_config_allow_udp",
        "wasi_config_socket_addr_check",
        "wasi_config_set_socket_addr_check",
    ):
        assert not hasattr(dll, name), name
    words = ("net", "sock", "tcp", "udp", "ip_", "http")
    assert [n for n in dir(wasmtime.WasiConfig) if any(w in n.lower() for w in words)] == []


def test_allowed_hosts_is_a_load_error_saying_components_get_no_network(dirs: tuple[Path, Path, Path]) -> None:
    tb = _open(dirs, AllowedHosts=["api.example.test"])
    try:
        assert {"source": "AllowedHosts", "message": NO_NETWORK} in tb.load_errors()
        assert "create-tcp-socket answers access-denied" in NO_NETWORK and "remove AllowedHosts" in NO_NETWORK
        assert tb.call("wasm_t_echo", {}, CallContext(1, "wasm_t_echo")).status == "passed"
    finally:
        tb.close()
