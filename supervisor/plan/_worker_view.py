"""A worker's private view of the filesystem, as planned for its spec and shown by ``check`` (pure; one step of
``_worker_plan.plan_worker``).

The view itself is planned again by the launcher from the host as it is at each start (``sandbox/_view_plan.py``,
mounted by ``sandbox/_view.py``); here it is planned from what the host says now (:class:`~._host_view.HostView`)
so that ``check`` can show it and a rule that cannot be shown as a view is known before anything starts.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sandbox import NEUTRAL_HOSTNAME, ViewSpec
from supervisor._errors import PolicyRefused

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox import FsRule
    from supervisor.config import ToolboxConfig

    from ._host_view import HostView

__all__ = ["plan_worker_view"]


def plan_worker_view(
    tb: ToolboxConfig,
    rules: Sequence[FsRule],
    host: HostView,
    *,
    strict: bool,
    hostname: str | None,
    made_at_start: Sequence[str],
    made_files: Sequence[str] = (),
    system: Sequence[str] = (),
    root: bool = True,
    warnings: list[str],
) -> tuple[ViewSpec, list[str]] | None:
    """The worker's private view and what ``check`` shows of it; ``None`` when it cannot be planned under a
    permissive policy (a warning says so: the worker sees the host's tree).

    ``hostname``: the host's own name when the worker shows it (System's ``hostname`` capability), else ``None``
    (the neutral name). ``made_at_start`` (work folders, staged code, clones) are shown as the folders they will
    be, ``made_files`` (the CA's certificate) as the files they will be. ``system``: the paths no worker or agent
    file writes, shown with inodes of the worker's own (``ViewSpec.system_paths``). ``root``: the launcher runs as
    root (without root, entries with locked mounts beneath are bound plainly, ``ViewPlan.locked``).

    Raises:
        PolicyRefused: a strict policy and rules that cannot be shown as a view (a rule on ``/``).
    """
    from sandbox import PathInfo, ViewError, plan_view, view_files

    def probe(path: str) -> PathInfo:
        found = host.probe(path)
        if found.kind != "missing":
            return found
        if path in made_files:
            return PathInfo("file")
        below = path.rstrip("/") + "/"
        if any(m == path or m.startswith(below) for m in made_at_start) or any(m.startswith(below) for m in made_files):
            return PathInfo("dir")
        return found

    spec = ViewSpec(
        hostname=(hostname or NEUTRAL_HOSTNAME)[:64] if hostname is not None else NEUTRAL_HOSTNAME,
        system_paths=tuple(dict.fromkeys(system)),
        directories=(os.path.dirname(tb.agent_file),),  # where execute-command runs (docs/FILES.md)
    )
    files = view_files(uid=0, gid=0, account="", home="", hostname=spec.hostname, resolv_conf=None)
    try:
        lines = plan_view(list(rules), spec, files, probe, host.mount_points(), locked=not root).describe()
    except ViewError as exc:
        message = f"toolbox {tb.name} (agent {tb.agent_slug}): {exc}"
        if strict:
            raise PolicyRefused(message + "; a strict policy needs the view (or private_view: false)") from exc
        warnings.append(message + "; this worker sees the host's tree")
        return None
    return spec, lines
