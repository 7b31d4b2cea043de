"""What the benchmark scripts share: the agent file and the policy a benchmark runs (written into a folder the
sandbox uids can traverse), the System toolbox most of them call, and percentiles.

A benchmark's policy is ``policies/strict.yaml`` (every protection on: Landlock with the private view, seccomp,
namespaces, cgroups, a uid per worker, kernel-denial auditing) with the agent file, the state folder and the
benchmark's own keys put over it (a key given as a mapping is merged one level deep, so ``sessions={"max_calls":
None}`` keeps strict's other session bounds); ``base=None`` starts from an empty policy (the defaults) instead.
strict.yaml's ``toolboxes`` settings (of its own agent's toolboxes, which a benchmark does not load) are left out.
Over strict.yaml a benchmark may raise bounds on calls, never change a protection: :func:`write_policy` refuses the
keys of :data:`PROTECTIONS` and strict's resource limits (issue 18: every protection of strict.yaml in every row).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BENCH_ROOT",
    "PROTECTIONS",
    "STRICT",
    "agent_file",
    "bench_folder",
    "percentile",
    "remove_bench_folders",
    "settle",
    "start_http_service",
    "system_toolbox",
    "write_policy",
]

REPO = Path(__file__).resolve().parents[1]
STRICT = REPO / "policies" / "strict.yaml"
#: Where benchmark folders are made: under /tmp, world-traversable (a confined worker's uid must reach its files).
BENCH_ROOT = "/tmp/agents-supervise-bench"


#: strict.yaml's keys that are protections: a benchmark over strict.yaml may not set them.
PROTECTIONS = frozenset(
    {
        "strict",
        "landlock_min_abi",
        "inexact_predicates",
        "kernel_audit",
        "private_view",
        "system_paths",
        "device_paths",
        "worker_env",
        "sandbox_uid",
        "sandbox_gid",
        "worker_uids",
        "network",
        "max_call_depth",
    }
)
#: ``limits`` a benchmark over strict.yaml may change: bounds on calls, not on what a worker's processes may use.
CALL_BOUNDS = frozenset({"max_concurrent_calls", "wall_time_s", "output_bytes"})


_made: list[Path] = []


def bench_folder() -> Path:
    """A fresh folder under :data:`BENCH_ROOT` that every uid may traverse (:func:`remove_bench_folders` removes
    it). The first one also gives this process a host-wide uid registry of its own (``AGENTS_SUPERVISE_UID_REGISTRY``,
    removed with the folders): a benchmark's fresh state dirs would otherwise take uids of the host's registry, which
    never gives a number back."""
    os.makedirs(BENCH_ROOT, exist_ok=True)
    if "AGENTS_SUPERVISE_UID_REGISTRY" not in os.environ:
        os.environ["AGENTS_SUPERVISE_UID_REGISTRY"] = os.path.join(BENCH_ROOT, f"uid-registry-{os.getpid()}")
    os.chmod(BENCH_ROOT, 0o755)
    root = Path(tempfile.mkdtemp(dir=BENCH_ROOT))
    os.chmod(root, 0o755)
    _made.append(root)
    return root


def remove_bench_folders() -> None:
    """Remove every folder :func:`bench_folder` made in this process (their supervisors must be closed): a
    benchmark's state (session stores, traces, work folders) is tens of MiB a supervisor."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
    if os.environ.get("AGENTS_SUPERVISE_UID_REGISTRY", "").startswith(BENCH_ROOT + "/uid-registry-"):
        shutil.rmtree(os.environ["AGENTS_SUPERVISE_UID_REGISTRY"], ignore_errors=True)


def cpu_times() -> tuple[int, int]:
    """``(idle, total)`` jiffies of all CPUs since boot (``/proc/stat``'s ``cpu`` line; idle counts iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def idle_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the CPUs' time that was idle between two :func:`cpu_times` readings (1.0: nothing ran)."""
    total = after[1] - before[1]
    return 1.0 if total <= 0 else (after[0] - before[0]) / total


def settle(threshold: float = 0.9, window_s: float = 0.5, limit_s: float = 60.0) -> float:
    """Wait until the machine's CPUs were at least ``threshold`` idle over one ``window_s`` window (what a step
    left behind, such as the kernel tearing down a thousand namespaces, no longer runs), at most ``limit_s``; the
    seconds waited. So that each row is measured on a machine as quiet as the run began on, not on the tail of
    the step before it."""
    begin = time.monotonic()
    while time.monotonic() - begin < limit_s:
        before = cpu_times()
        time.sleep(window_s)
        if idle_fraction(before, cpu_times()) >= threshold:
            break
    return time.monotonic() - begin


def system_toolbox(name: str = "system", capabilities: tuple[str, ...] = ("date",)) -> dict[str, Any]:
    """A ``SystemToolbox`` entry of an agent file (its ``date`` tool is ``system_<name>_date``)."""
    return {
        "tag": "SystemToolbox",
        "contents": {"Name": name, "Description": "bench", "Capabilities": list(capabilities)},
    }


def agent_file(root: Path, slug: str = "bench", **sections: Any) -> Path:
    """Write ``<root>/<slug>.json``, an OpenAI agent description with ``sections`` (``builtinToolboxes=[...]``,
    ``bashToolboxes=[...]``); its path."""
    contents = {
        "slug": slug,
        "apiKeyId": "none",
        "flavor": "openai",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "none",
        "announce": slug,
        "systemPrompt": [slug],
        **sections,
    }
    path = root / f"{slug}.json"
    path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
    return path


def write_policy(
    root: Path,
    agents: list[Path],
    *,
    name: str = "policy.yaml",
    state: Path | None = None,
    base: Path | None = STRICT,
    **keys: Any,
) -> Path:
    """Write ``<root>/<name>``: ``base`` (strict.yaml; ``None``: nothing) with ``agents``, the state folder
    (``state``, default ``<root>/state``) and ``keys`` over it; its path."""
    if base == STRICT:
        changed = sorted(PROTECTIONS & keys.keys()) + [
            f"limits.{k}" for k in sorted(keys.get("limits", {}).keys() - CALL_BOUNDS)
        ]
        if changed:
            raise ValueError(f"a benchmark over strict.yaml may not change its protections: {', '.join(changed)}")
    policy: dict[str, Any] = yaml.safe_load(base.read_text()) if base is not None else {}
    if base == STRICT:
        policy.pop("toolboxes", None)  # strict.yaml's settings of its own agent's toolboxes: not the benchmark's
    policy["agents"] = [str(a) for a in agents]
    policy["state_dir"] = str(state or root / "state")
    for key, value in keys.items():
        if isinstance(value, dict) and isinstance(policy.get(key), dict):
            policy[key] = {**policy[key], **value}
        else:
            policy[key] = value
    path = root / name
    path.write_text(yaml.safe_dump(policy))
    return path


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_http_service(policy: Path, checkout: Path = REPO) -> tuple[subprocess.Popen[bytes], str]:
    """``agents-supervise serve --http`` on ``policy`` (the code of ``checkout``, by default this one), once it
    serves: the process and its MCP URL for the agent ``bench``. Warnings it prints first are passed over; its later
    lines are read and dropped (a full pipe would stall the service). Raises ``SystemExit`` with what it said when it
    ends without serving."""
    process = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "serve", "--http", "--policy", str(policy)],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    said: list[str] = []
    while "serving MCP over HTTP at " not in (line := process.stderr.readline().decode()):
        said.append(line)
        if not line:  # it ended without serving
            raise SystemExit(f"agents-supervise did not start: {''.join(said)[-2000:]}")
    threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True).start()
    return process, line.split(" at ", 1)[1].strip().replace("<slug>", "bench")
