"""OpenTelemetry export of the trace (``trace.otel``): spans reach a real OTLP/HTTP receiver on loopback.

The receiver is a real HTTP server that decodes ``POST /v1/traces`` (protobuf) with the official proto classes. A
supervisor's stop flushes the batch processor and waits for the receiver's answers, so the spans are all there once
``Supervisor.open`` returns: no sleeping.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from supervisor._supervisor import Supervisor
from supervisor.config import OtelExport as OtelPolicy
from supervisor.config._errors import ConfigError
from supervisor.config._loader import load_config
from supervisor.config._policy import policy_json_schema
from supervisor.sessions._ids import Owner, root_session_id
from supervisor.traces._otel import REPORT_INTERVAL_S, OtelExport
from supervisor.traces._recorder import TraceRecorder
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[3]
MARKER = "SECRET-ARGUMENT-7f3a"
SCRIPT = f"""
-- {MARKER}
local ok = tools.call("system_sys_hostname", {{}})
local refused = tools.call("system_sys_missing", {{}})
return ok.status, refused.status
"""
OK, ERROR = trace_pb2.Status.STATUS_CODE_OK, trace_pb2.Status.STATUS_CODE_ERROR


@dataclass
class Collector:
    """What the receiver got: decoded requests, raw bodies, request headers."""

    url: str
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def spans(self) -> list[trace_pb2.Span]:
        return [
            span for req in self.requests for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans
        ]

    def service_names(self) -> set[str]:
        return {
            a.value.string_value
            for req in self.requests
            for rs in req.resource_spans
            for a in rs.resource.attributes
            if a.key == "service.name"
        }


@pytest.fixture
def collector() -> Iterator[Collector]:
    got = Collector(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            with lock:
                got.requests.append(request)
                got.bodies.append(body)
                got.headers.append({k.lower(): v for k, v in self.headers.items()})
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _closed_port() -> str:
    """A loopback URL nothing listens on (the collector is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _lua(allowed: list[str]) -> dict[str, Any]:
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 10,
            "AllowedTools": allowed,
            "AllowedHosts": [],
        },
    }


def _policy(root: Path, **policy: Any) -> Path:
    lua = _lua(["system_sys_hostname", "system_sys_missing"])
    tester = agent(builtinToolboxes=[system_toolbox("sys", ["date", "hostname"]), lua])
    return write_policy(root, {"tester": tester}, **policy)


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


def _attrs(item: Any) -> dict[str, Any]:
    out = {}
    for a in item.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind)
    return out


@pytest.mark.root
async def test_nested_calls_are_one_trace_with_parent_links(sandbox_tmp: Path, collector: Collector) -> None:
    otel = {
        "enabled": True,
        "endpoint": collector.url,
        "service_name": "otel-test",
        "headers": {"x-collector-token": "t0k"},
    }
    async with Supervisor.open(_policy(sandbox_tmp, trace={"otel": otel})) as sup:
        nested = await sup.call("lua_lua_execute", {"script": SCRIPT}, session_id="s1")
        failing = await sup.call("lua_lua_execute", {"script": 'error("boom")'}, session_id="s1")
        missing = await sup.call("no_such_tool", {}, session_id="s2")
    assert nested.status == "passed", nested.data
    assert nested.structured["values"] == ["ok", "error"]
    assert failing.status != "passed" and missing.status == "error"

    assert collector.service_names() == {"otel-test"}
    assert all(h.get("x-collector-token") == "t0k" for h in collector.headers)
    spans = collector.spans()
    calls = {r["call_id"]: r for r in _trace(sandbox_tmp) if r["event"] == "call_end"}
    by_call = {_attrs(s).get("call_id"): s for s in spans if "call_id" in _attrs(s)}
    assert set(by_call) == set(calls)  # one span per call, no more

    outer = next(s for s in by_call.values() if s.name == "lua_lua_execute" and s.status.code == OK)
    inner = next(s for s in by_call.values() if s.name == "system_sys_hostname")
    assert inner.trace_id == outer.trace_id and inner.parent_span_id == outer.span_id
    assert not outer.parent_span_id
    a_out, a_in = _attrs(outer), _attrs(inner)
    assert a_out["toolbox"] == "lua" and a_out["agent"] == "tester"
    assert a_out["session"] == root_session_id(Owner("tester"), "s1") and a_out["conversation"] and a_out["turn"]
    assert a_out["depth"] == 1 and a_out["caller"] == "frontend" and a_out["status"] == "passed"
    assert a_in["toolbox"] == "sys" and a_in["depth"] == 2 and a_in["caller"] == "toolbox lua"
    assert a_in["parent_call_id"] == a_out["call_id"] and a_in["status"] == "passed" and inner.status.code == OK
    assert a_in["summary"] == calls[a_in["call_id"]]["summary"]
    assert inner.start_time_unix_nano >= outer.start_time_unix_nano
    assert inner.end_time_unix_nano <= outer.end_time_unix_nano

    # The refused portal call (AllowedTools names a tool that does not exist) is an event on the span of the call
    # that made it.
    [refusal] = [e for e in outer.events if e.name == "portal_refusal"]
    assert _attrs(refusal)["kind"] == "PortalToolNotFound" and _attrs(refusal)["tool"] == "system_sys_missing"
    assert _attrs(refusal)["caller"] == "toolbox lua" and _attrs(refusal)["depth"] == 2

    # A failed call: span status ERROR, its status attribute as the result's.
    bad = next(s for s in by_call.values() if s.name == "lua_lua_execute" and s is not outer)
    assert bad.status.code == ERROR and _attrs(bad)["status"] == failing.status and bad.trace_id != outer.trace_id

    # A frontend refusal has no call span to hang on: a span of its own.
    [lone] = [s for s in spans if s.name == "portal_refusal"]
    assert _attrs(lone)["tool"] == "no_such_tool" and _attrs(lone)["kind"] == "PortalToolNotFound"
    assert lone.status.code == ERROR

    # Worker lifecycle records are spans too (the workers' exits at stop).
    assert {_attrs(s)["toolbox"] for s in spans if s.name == "worker_exit"} == {"sys", "lua"}

    # Arguments are not exported by default: the script's text is in no request.
    assert all(MARKER.encode() not in body for body in collector.bodies)
    assert "args" not in a_out
    assert not [r for r in _trace(sandbox_tmp) if r["event"] == "otel_export_failed"]


@pytest.mark.root
async def test_arguments_are_exported_only_when_the_policy_says_so(sandbox_tmp: Path, collector: Collector) -> None:
    otel = {"enabled": True, "endpoint": collector.url + "/v1/traces", "include_arguments": True}
    async with Supervisor.open(_policy(sandbox_tmp, trace={"otel": otel})) as sup:
        result = await sup.call("lua_lua_execute", {"script": SCRIPT})
    assert result.status == "passed", result.data
    [outer] = [s for s in collector.spans() if s.name == "lua_lua_execute"]
    assert json.loads(_attrs(outer)["args"]) == {"script": SCRIPT}
    assert collector.service_names() == {"agents-supervise"}


@pytest.mark.root
async def test_a_collector_that_is_down_never_fails_a_call(sandbox_tmp: Path) -> None:
    otel = {"enabled": True, "endpoint": _closed_port(), "timeout_s": 1}
    async with Supervisor.open(_policy(sandbox_tmp, trace={"otel": otel})) as sup:
        results = [await sup.call("lua_lua_execute", {"script": SCRIPT}) for _ in range(3)]
        results.append(await sup.call("system_sys_date", {}))
    assert [r.status for r in results] == ["passed"] * 4
    [failed] = [r for r in _trace(sandbox_tmp) if r["event"] == "otel_export_failed"]
    assert failed["failures"] >= 1 and failed["spans_lost"] >= 1 and failed["endpoint"].endswith("/v1/traces")
    assert failed["error"]


def test_export_failures_are_recorded_at_most_once_a_minute(tmp_path: Path) -> None:
    now = [1000.0]
    trace = TraceRecorder(str(tmp_path / "trace.jsonl"))
    export = OtelExport(
        OtelPolicy(enabled=True, endpoint=_closed_port(), timeout_s=0.5),
        trace,
        clock=lambda: now[0],
        schedule_delay_s=3600,
    )

    def one_failed_export(n: int) -> None:
        export.observe("call_start", {"call_id": f"c{n}", "tool": "t", "toolbox": "b", "depth": 1})
        export.observe("call_end", {"call_id": f"c{n}", "tool": "t", "toolbox": "b", "status": "passed"})
        export._processor.force_flush()  # a real export to a closed port, on this thread

    try:
        one_failed_export(1)
        export.poll()
        one_failed_export(2)
        now[0] += REPORT_INTERVAL_S / 2
        export.poll()  # within the minute: nothing written
        one_failed_export(3)
        now[0] += REPORT_INTERVAL_S / 2
        export.poll()
    finally:
        export.close()
        trace.close()
    records = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [(r["event"], r["failures"], r["total_failures"]) for r in records] == [
        ("otel_export_failed", 1, 1),
        ("otel_export_failed", 2, 3),
    ]


_PROBE = """
import sys, trio
from supervisor._supervisor import Supervisor

async def main():
    async with Supervisor.open(sys.argv[1]) as sup:
        print((await sup.call("system_sys_date", {})).status)
    print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))

trio.run(main)
"""


@pytest.mark.root
@pytest.mark.parametrize("otel", [None, False, {"enabled": True, "timeout_s": 1}])
def test_no_opentelemetry_import_unless_enabled(sandbox_tmp: Path, otel: Any) -> None:
    policy = (
        {}
        if otel is None
        else {"trace": {"otel": otel if not isinstance(otel, dict) else {**otel, "endpoint": _closed_port()}}}
    )
    path = _policy(sandbox_tmp, **policy)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "passed"
    modules = eval(out[-1])  # a printed list of str
    if isinstance(otel, dict):
        assert "opentelemetry.sdk.trace" in modules  # the probe would see an import
    else:
        assert modules == []
        assert not [r for r in _trace(sandbox_tmp) if r["event"] == "otel_export_failed"]


def test_policy_otel_section(tmp_path: Path) -> None:
    def otel_of(value: Any) -> OtelPolicy:
        path = write_policy(tmp_path, {}, trace={"otel": value})
        return load_config(str(path)).policy.trace.otel

    assert otel_of(False) == OtelPolicy() and not OtelPolicy().enabled
    assert otel_of(True) == OtelPolicy(enabled=True)
    section = otel_of(
        {
            "enabled": True,
            "endpoint": "https://collector.example:4318/",
            "service_name": "svc",
            "headers": {"authorization": "Bearer x"},
        }
    )
    assert section.endpoint == "https://collector.example:4318" and section.headers == {"authorization": "Bearer x"}
    assert not section.include_arguments
    for bad in (
        {"enabled": True, "bogus": 1},
        {"endpoint": "ftp://x"},
        "yes",
        {"headers": {"a b": "c"}},
        {"headers": {"a": "b\r\nc: d"}},
    ):
        with pytest.raises(ConfigError):
            otel_of(bad)
    schema = policy_json_schema()
    assert schema["$defs"]["Trace"]["properties"]["otel"]["anyOf"][0] == {"type": "boolean"}
    assert schema["$defs"]["OtelExport"]["additionalProperties"] is False
    for shipped in ("strict", "permissive"):
        otel = load_config(str(REPO / "policies" / f"{shipped}.yaml")).policy.trace.otel
        assert not otel.enabled and not otel.include_arguments


@pytest.mark.root
async def test_a_reload_turns_the_export_on_and_changes_it(sandbox_tmp: Path, collector: Collector) -> None:
    """``trace.otel`` is applied by a policy reload: off, then on (the calls after it exported), then another
    ``service_name`` (the old export sends what it holds and stops; the calls after go out under the new name)."""
    import yaml

    policy = _policy(sandbox_tmp)

    def otel(**settings: Any) -> None:
        data = yaml.safe_load(policy.read_text())
        data["trace"] = {"otel": {"enabled": True, "endpoint": collector.url, **settings}}
        policy.write_text(yaml.safe_dump(data))

    async with Supervisor.open(policy) as sup:
        assert (await sup.call("system_sys_hostname", {})).status == "passed"  # not exported: off
        otel(service_name="before")
        outcome = await sup.reload()
        assert outcome.refused is None and f"OpenTelemetry export to {collector.url}/v1/traces" in outcome.applied
        assert not outcome.plan.restarted, outcome.describe()  # the workers go on
        assert (await sup.call("system_sys_date", {})).status == "passed"
        otel(service_name="after")
        assert (await sup.reload()).refused is None
        assert (await sup.call("system_sys_date", {})).status == "passed"
    by_service: dict[str, list[str]] = {}
    for req in collector.requests:
        for rs in req.resource_spans:
            [name] = [a.value.string_value for a in rs.resource.attributes if a.key == "service.name"]
            calls = [s.name for ss in rs.scope_spans for s in ss.spans if s.name.startswith("system_")]
            by_service.setdefault(name, []).extend(calls)
    assert by_service == {"before": ["system_sys_date"], "after": ["system_sys_date"]}
