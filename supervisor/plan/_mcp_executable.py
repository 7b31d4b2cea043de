"""What an MCP server's ``executable`` needs to run in its worker, found by the supervisor without being led by a
worker (issue 25).

A server installed the way its README says (``npm install @modelcontextprotocol/server-filesystem`` in a folder)
is run as ``node_modules/.bin/mcp-server-filesystem``: a relative symlink into its package, owned by whoever ran
``npm``, and the package needs its whole ``node_modules`` tree (its dependencies are hoisted there). A ``pip``
install is ``venv/bin/<server>``, a script whose interpreter is the venv's. So the supervisor, as root:

- resolves the executable through directory fds that follow no link before it was judged
  (``sandbox._path_walk.resolve_path``), and refuses it, naming the component, when any folder, link or file on
  the way is one a worker could change (:func:`worker_writable_judge`: owned by a worker's uid, writable by every
  user, or by a worker's or a shared group): a worker must never choose what another toolbox runs or is granted;
- grants, read-only and to this toolbox alone, the file it leads to and the package tree it belongs to: the
  outermost ``node_modules`` folder on the way (the package and everything it can ``import``), or the virtual
  environment holding ``pyvenv.cfg`` (:func:`package_trees`, pure);
- lets the worker run the path as given when the launcher can follow its links itself (links root owns: the
  launcher follows no other) and the view will show them; otherwise the link's own location when a granted tree
  holds it (``.bin`` is in ``node_modules``: the program keeps its name), else the file it leads to.

Where the supervisor does not run as root, workers run as its own uid and owners tell nothing apart: the path is
resolved without the owner tests (the launcher then follows any link outside the writable trees).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox import READ, FsRule, UnsafeTreeError, resolve_path

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from sandbox import Judge

__all__ = ["ServerFiles", "package_trees", "plan_server_files", "worker_writable_judge"]


@dataclass(frozen=True)
class ServerFiles:
    """What the worker of an MCP server gets for its executable."""

    #: the path the worker executes
    run: str
    #: read-only rules: the executable, the file it leads to, its package tree
    rules: tuple[FsRule, ...]
    #: the package trees granted (for ``check``)
    trees: tuple[str, ...] = ()


def worker_writable_judge(worker_uid: Callable[[int], bool], worker_gid: Callable[[int], bool]) -> Judge:
    """A judge for ``resolve_path`` that refuses a component a worker could change: owned by a uid
    ``worker_uid`` says is a worker's, a folder writable by every user (without the sticky bit, which keeps others'
    entries theirs) or by a group ``worker_gid`` says workers are in (their own groups, the shared groups), a file
    writable by every user or by such a group. Links are judged by owner (their mode means nothing; their folder is
    judged as a component before them)."""

    def judge(asked: str, location: str, st: os.stat_result) -> None:
        mode = st.st_mode
        why = ""
        if worker_uid(st.st_uid):
            why = f"belongs to uid {st.st_uid}, a worker's"
        elif not stat.S_ISLNK(mode):
            sticky_dir = stat.S_ISDIR(mode) and mode & stat.S_ISVTX
            if mode & stat.S_IWOTH and not sticky_dir:
                why = f"is writable by every user (mode {stat.S_IMODE(mode):04o})"
            elif mode & stat.S_IWGRP and worker_gid(st.st_gid):
                why = f"is writable by group {st.st_gid}, which workers are in"
        if why:
            raise UnsafeTreeError(
                f"{asked}: {location} {why}: a worker could change what this MCP server runs, so it is not "
                "resolved or granted. Install the server where only root or its operator can write (run npm or "
                "pip as them, outside every worker's folders and shared groups), and restart"
            )

    return judge


def package_trees(paths: Iterable[str], is_venv: Callable[[str], bool]) -> list[str]:
    """The package trees ``paths`` (canonical: the link's location, the file it leads to) belong to (pure):
    the outermost ``node_modules`` folder on each path (Node looks for a module in every ``node_modules`` above the
    file that imports it), else the nearest folder above it that ``is_venv`` (holds ``pyvenv.cfg``). Never ``/``."""
    out: list[str] = []
    for path in paths:
        parts = path.split("/")
        if "node_modules" in parts[:-1]:
            out.append("/".join(parts[: parts.index("node_modules") + 1]))
            continue
        folder = os.path.dirname(path)
        while folder not in ("/", ""):
            if is_venv(folder):
                out.append(folder)
                break
            folder = os.path.dirname(folder)
    return list(dict.fromkeys(out))


def _is_venv(folder: str) -> bool:
    """``folder`` (canonical, every folder on the way judged) holds a ``pyvenv.cfg`` file (not followed)."""
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, "pyvenv.cfg")).st_mode)
    except OSError:
        return False


def _under(path: str, tops: Iterable[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


def plan_server_files(
    executable: str, *, judge: Judge | None, system_paths: Collection[str], is_venv: Callable[[str], bool] = _is_venv
) -> ServerFiles:
    """What the worker needs to run ``executable`` (absolute; see the module docstring). ``judge``: the
    worker-writable test (``None``: not root, no owner tests). ``system_paths``: trees every worker sees already.

    Raises:
        FileNotFoundError: the executable or a folder on its way is missing.
        UnsafeTreeError: a component a worker could change (the message names it and what to do).
        OSError: anything else of the walk (``ENOTDIR``, too many links).
    """

    def accept(asked: str, location: str, st: os.stat_result) -> None:
        return None

    check = judge or accept
    folder = resolve_path(os.path.dirname(executable) or "/", check)
    location = os.path.join(folder.canonical, os.path.basename(executable))
    target = resolve_path(location, check)
    trees = package_trees([location, target.canonical], is_venv)
    links = (*folder.links, *target.links)
    if judge is None or all(owner == 0 for _, owner in links):
        # the launcher follows these links itself, and the view recreates them: run the path as written
        rules = [FsRule(executable, READ), FsRule(target.canonical, READ)]
        return ServerFiles(executable, tuple(rules + [FsRule(t, READ) for t in trees]), tuple(trees))
    shown = [*trees, *(os.path.realpath(p) for p in system_paths)]
    run = location if _under(location, shown) else target.canonical
    rules = [FsRule(target.canonical, READ), *(FsRule(t, READ) for t in trees)]
    return ServerFiles(run, tuple(rules), tuple(trees))
