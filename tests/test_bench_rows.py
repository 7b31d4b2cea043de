"""The pure parts of ``scripts/bench`` (``scripts/_bench_rows.py``): whether a figure meets its row's target, "met in
k of N" over repeated runs, the table, and the replacement of BENCHMARKS.md's generated section between its markers
(the hand-written text around it kept byte for byte). No benchmark runs here."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from _bench_rows import (  # noqa: E402
    BEGIN,
    END,
    GOAL,
    ROWS,
    Figure,
    Row,
    ahead,
    fmt,
    ratio,
    render_section,
    replace_section,
    summarize,
    within_goal,
)

LATENCY = Row("seq", "1", "a sequential call", "lower", "us", "a relay")
THROUGHPUT = Row("many", "5", "calls in flight", "higher", "calls/s", "echo processes")
OTHER = Row("start", "7a", "a start", "lower", "s", "the zygote's start", goal=False)


def _section(runs: list[dict[str, Figure]], rows: tuple[Row, ...] = (LATENCY, THROUGHPUT, OTHER)) -> str:
    return render_section(
        [summarize(r, runs) for r in rows],
        command="scripts/bench --runs 2",
        date="2026-12-01 20:00 UTC",
        commit="abc1234",
        load_before="0.1 0.2 0.3",
        load_after="0.4 0.5 0.6",
        wall_s=90,
        notes=["a note"],
        extra=["### Peers\n\n| way |\n|---|\n"],
    )


def test_ours_against_the_floor_is_a_ratio_that_reads_the_same_way_for_latency_and_throughput() -> None:
    assert ratio(LATENCY, Figure(300.0, 200.0)) == 1.5  # ours / floor
    assert ratio(THROUGHPUT, Figure(8000.0, 12000.0)) == 1.5  # floor / ours
    assert ratio(THROUGHPUT, Figure(15000.0, 12000.0)) == 0.8  # past the floor: under 1
    for broken in (Figure(300.0), Figure(300.0, 0.0), Figure(0.0, 200.0), Figure(math.nan, 200.0)):
        assert math.isnan(ratio(LATENCY, broken))


def test_the_goal_is_within_one_and_a_half_times_the_floor() -> None:
    assert GOAL == 1.5
    assert within_goal(LATENCY, Figure(300.0, 200.0))  # exactly 1.5x: within
    assert not within_goal(LATENCY, Figure(301.0, 200.0))
    assert within_goal(THROUGHPUT, Figure(8000.0, 12000.0))
    assert not within_goal(THROUGHPUT, Figure(7999.0, 12000.0))
    assert not within_goal(LATENCY, Figure(100.0))  # no floor measured: never within


def test_ahead_of_a_peer_is_faster_or_more_calls_per_second() -> None:
    assert ahead(LATENCY, 900.0, 1300.0) and not ahead(LATENCY, 1300.0, 900.0)
    assert ahead(THROUGHPUT, 1700.0, 900.0) and not ahead(THROUGHPUT, 900.0, 1700.0)
    assert not ahead(LATENCY, 900.0, 900.0)  # a tie is not ahead
    assert not ahead(LATENCY, math.nan, 900.0)


def test_a_row_with_an_unknown_direction_is_refused() -> None:
    with pytest.raises(ValueError, match="better must be one of"):
        Row("x", "1", "x", "faster", "us", "")


def test_within_the_goal_in_k_of_n_and_the_verdict_asks_for_8_of_10() -> None:
    eight = [{"seq": Figure(250.0 if i < 8 else 400.0, floor=200.0)} for i in range(10)]
    s = summarize(LATENCY, eight)
    assert (s.met_in, s.runs, s.verdict) == (8, 10, "met")
    seven = [{"seq": Figure(250.0 if i < 7 else 400.0, floor=200.0)} for i in range(10)]
    assert summarize(LATENCY, seven).verdict == "not met"
    # A run whose step failed has no figure for the row: it counts among the N, never among the k.
    gaps = [{"seq": Figure(250.0, floor=200.0)} if i < 8 else {} for i in range(10)]
    s = summarize(LATENCY, gaps)
    assert (s.met_in, s.runs, len(s.figures), s.verdict) == (8, 10, 8, "met")
    gaps[0] = {}
    assert summarize(LATENCY, gaps).verdict == "not met"
    assert summarize(LATENCY, [{}, {}]).verdict == "not measured"


def test_the_medians_over_the_runs_and_the_peers_ahead_in_k_of_n() -> None:
    runs = [
        {"seq": Figure(v, floor=f, peers=p)}
        for v, f, p in ((100.0, 40.0, {"sdk": 150.0}), (300.0, None, {}), (200.0, 60.0, {"sdk": 180.0}))
    ]
    s = summarize(LATENCY, runs)
    assert s.median == 200.0
    assert s.floor_median == 50.0  # of the runs that measured a floor
    assert s.ratios == [2.5, 200.0 / 60.0]
    assert s.peer_names() == ["sdk"]
    assert s.peer_median("sdk") == 165.0
    assert s.ahead_in("sdk") == 1  # 100 < 150; 200 > 180; the run without the peer is not counted


def test_the_verdict_table_has_ours_the_floor_the_ratio_and_k_of_n_for_every_row() -> None:
    runs = [
        {"seq": Figure(300.0, 200.0, {"SDK": 400.0}), "many": Figure(6000.0, 12000.0), "start": Figure(0.5, 0.2)},
        {"seq": Figure(500.0, 200.0, {"SDK": 450.0}), "many": Figure(9000.0, 12000.0)},
    ]
    text = _section(runs)
    assert text.startswith(BEGIN + "\n") and text.endswith(END + "\n")
    assert "`scripts/bench --runs 2`" in text and "abc1234" in text and "0.1 0.2 0.3" in text
    assert (
        "| 1 | a sequential call | 400 us (300 us - 500 us) | 200 us | 2.00x (1.50x - 2.50x) | 1 of 2: **not met** |"
        in (text)
    )
    assert (
        "| 5 | calls in flight | 7,500 calls/s (6,000 calls/s - 9,000 calls/s) | 12,000 calls/s "
        "| 1.67x (1.33x - 2.00x) | 1 of 2: **not met** |"
    ) in text
    # a row outside issue 29's table comes after it, under its own heading
    others = text.index("Also measured beside their floors")
    assert text.index("| 7a | a start | 0.50 s | 0.20 s | 2.50x | 0 of 2: **not met** |") > others
    assert text.index("| 5 | calls in flight") < others
    assert "| 1 | SDK | 400 us | 425 us | 1 of 2 |" in text  # ahead in the first run only
    assert "| 1 | a sequential call | not measured | - | not measured | not measured |" in _section(
        [{}], rows=(LATENCY,)
    )
    assert "- 7a: the zygote's start" in text and "- a note" in text and "### Peers" in text


HAND = "# Benchmarks\n\nIntro, by hand.\n\n## Egress proxy\n\nHand-written table.\n"


def test_the_section_goes_before_the_first_heading_when_there_is_none_yet() -> None:
    section = _section([{"seq": Figure(300.0, 200.0)}])
    out = replace_section(HAND, section)
    assert out.startswith("# Benchmarks\n\nIntro, by hand.\n\n" + BEGIN)
    assert out.endswith(END + "\n\n## Egress proxy\n\nHand-written table.\n")
    assert out.replace(section + "\n", "") == HAND


def test_a_new_run_replaces_only_the_generated_section() -> None:
    first = replace_section(HAND, _section([{"seq": Figure(250.0, 200.0)}]))
    second_section = _section([{"seq": Figure(500.0, 200.0)}])
    second = replace_section(first, second_section)
    assert second_section in second and "1 of 1: **met**" not in second
    assert second.replace(second_section + "\n", "") == HAND  # the hand-written text, byte for byte
    assert replace_section(second, second_section) == second  # the same section again: nothing changes


def test_broken_markers_are_refused_rather_than_a_hand_written_section_eaten() -> None:
    with pytest.raises(ValueError, match="one marker"):
        replace_section(HAND + BEGIN + "\n", "x")
    with pytest.raises(ValueError, match="one marker"):
        replace_section(END + "\n" + HAND + BEGIN + "\n", "x")
    with pytest.raises(ValueError, match="more than one"):
        replace_section(f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n", "x")


def test_issue_29s_rows_are_the_goal_and_every_row_has_a_floor() -> None:
    keys = [r.key for r in ROWS]
    assert len(keys) == len(set(keys))
    goal = [r.number for r in ROWS if r.goal]
    assert goal == ["1", "3", "4", "5", "6a", "7b", "8", "10"]
    assert {r.key for r in ROWS if not r.goal} == {"stdio_16", "start_8", "idle_100", "idle_1000"}
    assert all(r.floor for r in ROWS)
    assert [r.key for r in ROWS if r.opt_in] == ["idle_1000"]
    assert {r.key for r in ROWS if r.better == "higher"} == {"throughput", "http_64", "stdio_16"}


def test_figures_are_shown_with_their_units() -> None:
    assert fmt(2.345, "x") == "2.35x"
    assert fmt(15234.4, "calls/s") == "15,234 calls/s"
    assert fmt(79.6, "us") == "80 us"
    assert fmt(0.284, "s") == "0.28 s"
    assert fmt(6.74, "MiB") == "6.74 MiB"
    assert fmt(math.nan, "ms") == "n/a"


def test_a_benchmark_over_strict_yaml_may_raise_call_bounds_but_not_change_a_protection(tmp_path: Path) -> None:
    import yaml
    from _bench_common import write_policy

    written = yaml.safe_load(
        write_policy(
            tmp_path, [], limits={"max_concurrent_calls": 256}, sessions={"max_calls": None, "max_concurrent_calls": 64}
        ).read_text()
    )
    assert written["limits"]["max_concurrent_calls"] == 256
    assert written["limits"]["cpus"] == 1 and written["limits"]["memory_bytes"] == "1GiB"  # strict's, kept
    assert written["sessions"]["max_calls"] is None and written["sessions"]["keep_days"] == 30
    assert written["private_view"] is True and written["kernel_audit"] == "enable" and written["strict"] is True
    assert "toolboxes" not in written  # strict.yaml's own agent's settings: they would apply to nothing, warned
    with pytest.raises(ValueError, match="private_view"):
        write_policy(tmp_path, [], private_view=False)
    with pytest.raises(ValueError, match=r"limits\.cpus"):
        write_policy(tmp_path, [], limits={"cpus": None})
    assert (
        yaml.safe_load(write_policy(tmp_path, [], base=None, kernel_audit="off").read_text())["kernel_audit"] == "off"
    )


def test_the_benchmark_command_and_every_harness_it_calls_import() -> None:
    """``scripts/bench --help`` imports every harness and floor it calls, and the supervisor names they use (a
    rename elsewhere breaks the benchmark here, not in the lead's last run)."""
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--runs" in out.stdout and "--thousand" in out.stdout


@pytest.mark.root
async def test_the_confinement_and_idle_floors_start_from_a_real_supervisor() -> None:
    """The inputs of rows 7-9's floors come from a running supervisor (its worker's plan and cgroup, its zygote's
    modules), and the floors run on them: a real confinement of that plan, a real idle fork."""
    import bench_scale
    import floor_confine
    import floor_idle

    from supervisor._supervisor import Supervisor

    async with Supervisor.open(bench_scale.policy(1)) as sup:
        frame, cgroup, modules = floor_confine.worker_inputs(sup)
        times = floor_confine.confine_times(frame, 2, cgroup)
    assert len(times) == 2
    assert all(0 < t < 60 for t in times)
    assert "toolboxes.system" in modules
    idle = floor_idle.idle_private_mib(3, modules, children=1)
    assert 0 < idle["private_mib"] <= idle["pss_mib"]


async def test_the_stdio_floor_relay_answers_both_clients() -> None:
    """Rows 1-3's floor, ``floor_pipes.py relay``, serves the raw client and the official SDK client."""
    import bench_mcp
    from mcp import StdioServerParameters

    argv = [sys.executable, str(REPO / "scripts" / "floor_pipes.py"), "relay"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with bench_mcp.raw_caller(argv, env, "date") as call:
        await call()
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(REPO))
    async with bench_mcp.sdk_client_caller(params, "date") as call:
        figures = await bench_mcp.interleaved({"relay": call}, 10, 1, rounds=2, warmup=1)
    assert figures["relay"]["calls_per_s"] > 0


@pytest.mark.root
def test_the_folders_a_benchmark_made_are_removed_and_no_others() -> None:
    from _bench_common import BENCH_ROOT, bench_folder, remove_bench_folders

    other = Path(BENCH_ROOT) / "not-made-by-bench-folder"
    other.mkdir(parents=True, exist_ok=True)
    made = [bench_folder(), bench_folder()]
    (made[0] / "state").mkdir()
    (made[0] / "state" / "trace.jsonl").write_text("{}\n")
    remove_bench_folders()
    assert not any(p.exists() for p in made)
    assert other.is_dir()
    other.rmdir()


def test_the_profile_is_summed_by_process_and_function() -> None:
    from bench_profile import summarize

    sup = 'process 10:"/venv/bin/python -m supervisor --policy p.yaml"'
    worker = (
        'process 11:"/venv/bin/python -I -B -c import sys; sys.path[:0] = ["/x"]; from sandbox._zygote import main"'
    )
    collapsed = "\n".join(
        [
            f"{sup};main (supervisor/frontends/_cli.py:3);Portal.call (supervisor/calls/_portal.py:10) 30",
            f"{sup};main (supervisor/frontends/_cli.py:3);Portal.call (supervisor/calls/_portal.py:12) 10",
            f"{sup};main (supervisor/frontends/_cli.py:3);dumps (json/__init__.py:231) 40",
            # a child's stacks come under its parent's process frame; the command holds semicolons
            f"{sup};{worker};thread 0x1;read (toolboxes/_worker.py:80) 20",
            "not a stack line",
        ]
    )
    table = summarize(collapsed, top=2)
    assert "| supervisor | 80 % | `Portal.call (supervisor/calls/_portal.py)` | 50.0 % | 50.0 % |" in table
    assert "|  |  | `dumps (json/__init__.py)` | 50.0 % | 50.0 % |" in table
    assert "|  |  | `main (supervisor/frontends/_cli.py)` | 0.0 % | 100.0 % |" in table  # ours, inclusive
    assert "| worker (forked by the zygote) | 20 % | `read (toolboxes/_worker.py)` | 100.0 % | 100.0 % |" in table
    assert summarize("") == "No samples (py-spy recorded nothing)."
    # 80 samples at 100 a second over 4 calls: 0.2 s of Python a call
    assert "| supervisor | 80 % (200000 us a call) |" in summarize(collapsed, top=2, calls=4, rate=100)


def test_the_settle_step_reads_idle_time_from_proc_stat() -> None:
    """``settle`` waits on the CPUs' idle share between two ``/proc/stat`` readings: the arithmetic, and that the
    readings are real counters that only grow."""
    from _bench_common import cpu_times, idle_fraction

    assert idle_fraction((100, 1000), (190, 1100)) == 0.9
    assert idle_fraction((100, 1000), (100, 1100)) == 0.0
    assert idle_fraction((100, 1000), (100, 1000)) == 1.0  # no tick between the readings: nothing ran
    first = cpu_times()
    sum(i * i for i in range(200_000))
    second = cpu_times()
    assert 0 <= first[0] <= first[1] and second[0] >= first[0] and second[1] >= first[1]


def test_the_call_cost_sums_functions_by_room_and_counts_builtins_for_their_caller() -> None:
    """``scripts/call_cost.py``'s pure part: cProfile's stats per call, by room; a plain built-in counts for the room
    that called it (in proportion to its callers), a library's built-ins (SQLite, system calls) for that library."""
    from call_cost import AREAS, area_of, render, summarize

    repo = "/r"
    assert area_of("/r/supervisor/calls/_portal.py", "call") == "calls (portal, records)"
    assert area_of("/r/supervisor/_supervisor.py", "call") == "supervisor (root)"
    assert area_of("/r/supervisor/frontends/_mcp_stdio.py", "serve") == "frontends (MCP)"
    assert area_of("/r/toolboxes/_protocol.py", "feed") == "toolboxes (protocol, results)"
    assert area_of("/venv/lib/python3.11/site-packages/trio/_core/_run.py", "reschedule") == "trio"
    assert area_of("/usr/lib/python3.11/json/encoder.py", "iterencode") == "json"
    assert area_of("~", "<method 'execute' of 'sqlite3.Connection' objects>") == "sqlite3"
    assert area_of("~", "<built-in method posix.write>") == "system calls (os, select)"
    assert area_of("~", "<method 'poll' of 'select.epoll' objects>") == "system calls (os, select)"
    assert area_of("~", "<built-in method builtins.len>") == "other (stdlib, builtins)"
    assert area_of("/venv/lib/python3.11/site-packages/h11/_readers.py", "_decode_header_lines") == "h11"
    portal = ("/r/supervisor/calls/_portal.py", 10, "call")
    trace = ("/r/supervisor/traces/_recorder.py", 5, "record")
    stats = {
        portal: (200, 200, 0.002, 0.01, {}),
        trace: (400, 400, 0.001, 0.002, {portal: (400, 400, 0, 0)}),
        # 600 len() calls, a third from the portal, two thirds from the trace
        ("~", 0, "<built-in method builtins.len>"): (
            600,
            600,
            0.0006,
            0.0006,
            {portal: (200, 200, 0, 0), trace: (400, 400, 0, 0)},
        ),
        ("~", 0, "<method 'execute' of 'sqlite3.Connection' objects>"): (
            300,
            300,
            0.003,
            0.003,
            {trace: (300, 300, 0, 0)},
        ),
    }
    cost = summarize("api", stats, calls=100, repo=repo)
    assert cost.functions == 15.0  # (200 + 400 + 600 + 300) / 100
    assert cost.by_area == {"calls (portal, records)": 4.0, "traces": 8.0, "sqlite3": 3.0}
    assert list(cost.by_area) == [a for a in AREAS if a in cost.by_area]  # in the table's order
    assert round(cost.cpu_us, 3) == 66.0  # 6.6 ms over 100 calls
    assert cost.top[0] == ("<built-in method builtins.len>", 6.0)
    assert ("record (supervisor/traces/_recorder.py)", 4.0) in cost.top
    table = render([cost])
    assert "| calls (portal, records) | 4 (22) |" in table  # 2 ms + a third of len()'s 0.6 ms
    assert "| **all** | **15** (66) |" in table
    assert "system calls" not in table  # not counted: no row


def test_the_call_cost_reads_strace_summaries() -> None:
    from call_cost import CallCost, parse_strace_summary, render

    text = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 55.00    0.001000           1      6900           pwrite64
 30.00    0.000500           1      6150           fcntl
 15.00    0.000100           1      2000         3 read
------ ----------- ----------- --------- --------- ----------------
100.00    0.001600           1     15050         3 total
"""
    assert parse_strace_summary(text) == {"pwrite64": 6900, "fcntl": 6150, "read": 2000}
    cost = CallCost(
        "api",
        1000,
        500.0,
        {"trio": 500.0},
        100.0,
        {"trio": 100.0},
        syscalls=15.05,
        syscalls_by_name={"pwrite64": 6.9, "fcntl": 6.15, "read": 2.0},
    )
    assert "| system calls of the trio thread | 15.1 (pwrite64 6.90, fcntl 6.15, read 2.00) |" in render([cost])
