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

from _bench_rows import BEGIN, END, ROWS, Figure, Row, fmt, met, render_section, replace_section, summarize  # noqa: E402

AT_LEAST = Row("speedup", "1", "a speed-up", ">=", 3.0, "x", "a relay")
BELOW = Row("start", "7", "a start", "<", 0.3, "s", "the zygote's start")


def _section(runs: list[dict[str, Figure]], rows: tuple[Row, ...] = (AT_LEAST, BELOW)) -> str:
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


def test_a_figure_meets_its_target_by_the_rows_comparison() -> None:
    assert met(AT_LEAST, 3.0) and met(AT_LEAST, 3.5)
    assert not met(AT_LEAST, 2.99)
    assert met(BELOW, 0.29)
    assert not met(BELOW, 0.3)  # "under 0.3 s": the bound itself is not under it
    assert not met(AT_LEAST, math.nan) and not met(BELOW, math.nan)


def test_a_row_with_an_unknown_comparison_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown comparison"):
        Row("x", "1", "x", "=>", 1.0, "x", "")


def test_met_in_k_of_n_and_the_verdict_asks_for_8_of_10() -> None:
    eight = [{"speedup": Figure(4.0 if i < 8 else 2.0, floor=5.0)} for i in range(10)]
    s = summarize(AT_LEAST, eight)
    assert (s.met_in, s.runs, s.verdict) == (8, 10, "met")
    seven = [{"speedup": Figure(4.0 if i < 7 else 2.0)} for i in range(10)]
    assert summarize(AT_LEAST, seven).verdict == "not met"
    # A run whose step failed has no figure for the row: it counts among the N, never among the k.
    gaps = [{"speedup": Figure(4.0)} if i < 8 else {} for i in range(10)]
    s = summarize(AT_LEAST, gaps)
    assert (s.met_in, s.runs, len(s.figures), s.verdict) == (8, 10, 8, "met")
    gaps[0] = {}
    assert summarize(AT_LEAST, gaps).verdict == "not met"
    assert summarize(AT_LEAST, [{}, {}]).verdict == "not measured"


def test_the_median_and_the_floor_median_over_the_runs() -> None:
    runs = [{"speedup": Figure(v, floor=f)} for v, f in ((1.0, 4.0), (3.0, None), (2.0, 6.0))]
    s = summarize(AT_LEAST, runs)
    assert s.median == 2.0
    assert s.floor_median == 5.0  # of the runs that measured a floor


def test_the_table_has_target_measured_floor_and_k_of_n_for_every_row() -> None:
    runs = [{"speedup": Figure(4.0, 5.0), "start": Figure(0.5, 0.2)}, {"speedup": Figure(2.0, 5.0)}]
    text = _section(runs)
    assert text.startswith(BEGIN + "\n") and text.endswith(END + "\n")
    assert "`scripts/bench --runs 2`" in text and "abc1234" in text and "0.1 0.2 0.3" in text
    assert "| 1 | a speed-up | >= 3.00x | 3.00x (2.00x - 4.00x) | 5.00x | yes | 1 of 2: **not met** |" in text
    assert "| 7 | a start | < 0.30 s | 0.50 s | 0.20 s | yes | 0 of 2: **not met** |" in text
    past = _section([{"speedup": Figure(2.0, 2.5)}, {"speedup": Figure(2.0)}], rows=(AT_LEAST,))
    assert "| 2.50x | **no**: the target is past the floor | 0 of 2: **not met** |" in past
    assert "| 1 | a speed-up | >= 3.00x | not measured | - | - | not measured |" in _section([{}], rows=(AT_LEAST,))
    assert "- 7: the zygote's start" in text and "- a note" in text and "### Peers" in text


HAND = "# Benchmarks\n\nIntro, by hand.\n\n## Egress proxy\n\nHand-written table.\n"


def test_the_section_goes_before_the_first_heading_when_there_is_none_yet() -> None:
    section = _section([{"speedup": Figure(4.0)}])
    out = replace_section(HAND, section)
    assert out.startswith("# Benchmarks\n\nIntro, by hand.\n\n" + BEGIN)
    assert out.endswith(END + "\n\n## Egress proxy\n\nHand-written table.\n")
    assert out.replace(section + "\n", "") == HAND


def test_a_new_run_replaces_only_the_generated_section() -> None:
    first = replace_section(HAND, _section([{"speedup": Figure(4.0)}]))
    second_section = _section([{"speedup": Figure(1.5)}])
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


def test_every_row_of_issue_18_is_in_the_table_with_a_floor() -> None:
    keys = [r.key for r in ROWS]
    assert len(keys) == len(set(keys))
    for key in ("stdio_seq", "stdio_16", "stdio_sdk", "api_p50", "throughput", "bash_direct", "bash_bwrap"):
        assert key in keys
    for key in ("start_8", "start_100", "spawn", "idle_100", "idle_1000", "http_64"):
        assert key in keys
    assert all(r.floor for r in ROWS)
    assert [r.key for r in ROWS if r.opt_in] == ["idle_1000"]


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
