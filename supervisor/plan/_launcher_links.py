"""The rule paths a worker's launcher will refuse, found before anything starts (``agents-supervise check``).

The launcher opens every Landlock rule's path through ``sandbox._path_walk.open_rule_path``, which follows a symlink
only when root owns it and it lies outside the worker's writable trees (a link anyone else could have planted must
never choose a grant). A rule reached through any other link stops that worker's start ("rule path refused"). This
walks the same paths the same way, with ``O_PATH`` opens only (nothing is read, made or changed), so ``check`` can
say so ahead, naming the link and what to do.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sandbox import WRITE, UnsafeTreeError, open_rule_path

if TYPE_CHECKING:
    from sandbox import ConfinementPlan

__all__ = ["launcher_refusals"]


def launcher_refusals(plan: ConfinementPlan, *, root: bool | None = None) -> list[str]:
    """One warning per rule path of ``plan`` the launcher will refuse (``root``: whether the launcher runs as
    root, default: as this process does; without root owners are not tested, as in the launcher). A path that does
    not exist (yet) is not this function's: the plan says so already."""
    root = os.geteuid() == 0 if root is None else root
    writable = tuple(dict.fromkeys(r.path for r in plan.fs_rules if r.mode == WRITE))
    out: list[str] = []
    for rule in plan.fs_rules:
        try:
            os.close(open_rule_path(rule.path, writable_trees=writable, root_links_only=root))
        except UnsafeTreeError as exc:
            out.append(
                f"{plan.toolbox}: the launcher will refuse the rule {rule.mode} {rule.path} and the worker will not "
                f"start: {exc}"
            )
        except OSError:  # missing, or not a folder on the way: reported where the rule was planned
            continue
    return out
