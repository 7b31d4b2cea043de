"""The shortened versions of the reliability harnesses (issue 19: "the shortened versions run in CI"): the chaos mix
across every toolbox kind with its killer, the durability check (``kill -9`` of the supervisor right after an
acknowledged write) and a short soak, each run as the operator runs it (``scripts/chaos``, ``scripts/soak``) and
judged from the figures it prints. The long runs and their figures are in RELIABILITY.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolboxes import KINDS

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_chaos_mix_answers_every_call_once_with_its_own_answer() -> None:
    f = _run("chaos", "chaos", "--calls", "400", "--concurrency", "32", "--seed", "7")
    assert f["calls"] == f["answered"] == 400
    assert f.get("lost", 0) == 0 and f["duplicated"] == 0 and f.get("cross_wired", 0) == 0
    assert f["missing"] == {"sqlite": 0, "developer": 0}
    assert f["left"] == 0
    assert set(f["passed_by_kind"]) == set(KINDS)  # every kind served calls, not only answered them with errors
    assert f.get("chaos_kill", 0) + f.get("chaos_stop", 0) + f.get("chaos_oom", 0) > 0


def test_kill_9_right_after_an_acknowledged_write_loses_nothing() -> None:
    d = _run("chaos", "durability", "--rounds", "3")
    assert d["rounds"] == 3 and d["problems"] == 0
    assert d["acked_files"] == d["acked_rows"] == 3
    assert d["lost_files"] == d["lost_rows"] == 0
    assert d["acked_records"] == 6 and d["lost_records"] == 0  # each answer's record was committed before it
    assert d["corrupt"] == 0 and d["torn_trace_ends"] == 0 and d["survivors"] == 0 and d["temporaries"] == 0


@pytest.mark.slow
def test_a_short_soak_answers_everything_and_keeps_the_trace_within_its_rotation() -> None:
    s = _run("soak", "--minutes", "0.25", "--sample", "2", "--keep-minutes", "0.1", "--trace-max-mb", "0.5")
    assert s["calls"] == s["answered"] > 100
    assert s.get("lost", 0) == 0 and s.get("error", 0) == 0 and s.get("cross_wired", 0) == 0
    assert s["sessions"] > 64  # sessions came and went
    assert s["max_trace_mb"] < 2 * 0.5 + 0.3  # the file and its .1, each about max_bytes
    # the breakdown from /proc/self/smaps accounts for the whole RSS (each class sampled the same moment)
    classes = sum(s[f"end_{c}_mb"] for c in ("heap", "malloc_arenas", "stacks", "anon", "file"))
    assert s["end_heap_mb"] > 0 and s["end_anon_mb"] > 0 and s["end_file_mb"] > 0
    assert abs(classes - s["end_rss_mb"]) < 0.05 * s["end_rss_mb"], (classes, s["end_rss_mb"])


@pytest.mark.slow
def test_the_http_service_under_every_fault_at_once_answers_every_call_and_stops_cleanly() -> None:
    """``scripts/chaos http`` (issue 27): a tenant's calls beside a load past the server's work bound, a slowloris,
    mid-call disconnects, a stream reopened, oversized bodies and worker kills."""
    f = _run("chaos", "http", "--seconds", "15", "--sessions", "8", "--flood", "48", "--max-in-flight", "16")
    assert f["calls"] > 0 and f.get("lost", 0) == 0 and f.get("cross_wired", 0) == 0
    assert f.get("server_errors", 0) == f.get("flood_server_errors", 0) == f.get("client_errors", 0) == 0
    assert f.get("passed", 0) > 0 and f.get("flood_answered", 0) > 0
    shed = sum(v for k, v in f.items() if k.endswith("_refused_503"))
    assert shed > 0 and f.get("refused_without_retry_after", 0) == 0  # past the bound: 503 with Retry-After
    assert f["slowloris_closed_by_server"] > 0 and f["slowloris_longest_s"] < 3 + 5  # head_timeout_s 3, and slack
    assert f.get("streams_opened", 0) >= 2 and f.get("stream_errors", 0) == 0
    assert not [k for k in f if k.startswith("stream_http_")]  # every reopened stream answered 200
    assert f.get("oversized_413", 0) + f.get("oversized_closed", 0) > 0
    assert not [k for k in f if k.startswith("oversized_") and k not in ("oversized_413", "oversized_closed")]
    assert f.get("disconnects", 0) > 0 and f.get("chaos_kill", 0) + f.get("chaos_stop", 0) > 0
    assert f["served_after"] == 1 and f["healthz_after"] == 200
    assert f["unanswered_calls"] == 0 and f["duplicated"] == 0
    assert f["exit_status"] == 0 and f["left"] == 0
