#!/opt/agents-supervise/venv/bin/python
"""Floor of the idle-memory row of ``scripts/bench`` (row 9): the memory an idle toolbox must cost at least when
workers are forks of one process that has the worker code imported.

``floor_idle.py THREADS MODULE...``: this interpreter imports the launcher's step modules and ``MODULE...`` (what
the supervisor has its zygote preload), freezes them out of the collector's way (``gc.freeze``, as the zygote
does), then forks ``--children`` children (default 4); each starts ``THREADS - 1`` threads that block on a pipe
(an idle worker's readers), says ready and sits idle with them. Once all are ready it reads each child's
``/proc/<pid>/smaps_rollup`` and prints, as JSON, the median of their private pages (``Private_Clean`` +
``Private_Dirty``: what one more such process adds, whatever it shares with its parent) and of their PSS, in MiB.
Not included: anything confinement or a toolbox writes (the page tables and kernel objects of the namespaces and
mounts, the toolbox's own objects), the PID namespace's outer process.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

__all__ = ["idle_private_mib"]


def _rollup_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def _measure(threads: int, children: int, modules: list[str]) -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    import sandbox._launcher as launcher

    for name in (*launcher.STEP_MODULES, *modules):
        importlib.import_module(name)
    gc.freeze()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(hold_w)
            for _ in range(max(0, threads - 1)):
                threading.Thread(target=os.read, args=(hold_r, 1), daemon=True).start()
            os.write(ready_w, b"!")
            os.read(hold_r, 1)  # idle until the parent closes the pipe
            os._exit(0)
        pids.append(pid)
    os.close(ready_w)
    got = b""
    while len(got) < children:
        chunk = os.read(ready_r, children)
        if not chunk:
            raise SystemExit("floor_idle: a child died before it was ready")
        got += chunk
    rollups = [_rollup_kib(pid) for pid in pids]
    os.close(hold_w)
    for pid in pids:
        os.waitpid(pid, 0)
    private = [(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)) / 1024 for r in rollups]
    return {"private_mib": statistics.median(private), "pss_mib": statistics.median(r["Pss"] / 1024 for r in rollups)}


def idle_private_mib(threads: int, modules: list[str], children: int = 4) -> dict[str, float]:
    """Run this harness in a fresh interpreter; its figures (``private_mib``, ``pss_mib``)."""
    out = subprocess.run(
        [sys.executable, __file__, "--children", str(children), str(threads), *modules],
        capture_output=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"floor_idle.py failed: {out.stderr.decode()[-2000:]}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("threads", type=int)
    parser.add_argument("modules", nargs="*")
    args = parser.parse_args()
    print(json.dumps(_measure(args.threads, args.children, args.modules)))


if __name__ == "__main__":
    main()
