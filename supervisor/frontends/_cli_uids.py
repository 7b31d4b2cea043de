"""``agents-supervise uids list`` and ``agents-supervise uids release --state-dir-id ID``: the host-wide uid
registry shown, and the uids of a state dir that is gone given back (``supervisor/plan/_uid_release.py``).

The registry is the policy's ``worker_uids.registry`` (``--policy``), else ``--registry``, else the environment's
``AGENTS_SUPERVISE_UID_REGISTRY``, else ``/var/lib/agents-supervise-uids``: the one a supervisor started with the
same policy and environment uses.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["add_uids_parser", "run_uids"]


def add_uids_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``uids`` command and its two actions."""
    uids = sub.add_parser("uids", help="show the host-wide uid registry; release the uids of a state dir that is gone")
    actions = uids.add_subparsers(dest="uids_action", required=True)
    listing = actions.add_parser("list", help="every state dir the registry holds uids for, and whether it exists")
    listing.add_argument("--json", action="store_true")
    release = actions.add_parser(
        "release", help="free the uids of a state dir that no longer exists (no supervisor may hold it)"
    )
    release.add_argument("--state-dir-id", required=True, metavar="ID", help="its id, as 'uids list' shows it")
    for p in (listing, release):
        p.add_argument("--policy", default=None, help="take the registry from this policy's worker_uids.registry")
        p.add_argument("--registry", default=None, metavar="DIR", help="the registry directory")


def _registry(args: argparse.Namespace) -> str:
    from supervisor._face import registry_dir

    chosen = args.registry
    if args.policy:
        from supervisor.config import load_config

        uids = load_config(args.policy, []).policy.worker_uids
        chosen = (uids.registry if uids is not None else None) or chosen
    return registry_dir(chosen, os.environ)


def run_uids(args: argparse.Namespace) -> int:
    """Run ``uids list`` or ``uids release``; 0 when done, ``EXIT_ERROR`` when refused (the reason on stderr)."""
    from supervisor._errors import PolicyRefused
    from supervisor._face import files_warning, list_state_dirs, release_state_dir, uid_ranges

    from ._cli_errors import fail

    path = _registry(args)
    if args.uids_action == "list":
        records = list_state_dirs(path)
        if args.json:
            rows = [
                {
                    "state_id": r.state_id,
                    "path": r.path,
                    "status": r.status,
                    "uids": list(r.numbers),
                    "toolboxes": list(r.toolboxes),
                }
                for r in records
            ]
            print(json.dumps({"registry": path, "state_dirs": rows}, indent=2))
            return 0
        print(f"uid registry {path}: {sum(len(r.numbers) for r in records)} uids held by {len(records)} state dirs")
        for r in records:
            boxes = f"; toolboxes {', '.join(r.toolboxes)}" if r.toolboxes else ""
            print(
                f"  state dir id {r.state_id}: {r.path or '(path unknown)'} ({r.status}): {len(r.numbers)} uids "
                f"({uid_ranges(r.numbers) or 'none'}){boxes}"
            )
        if any(not r.present and not r.held for r in records):
            print(
                "the uids of a state dir that is gone stay claimed until released: agents-supervise uids release "
                "--state-dir-id ID (a state dir moved elsewhere is known at its new place once a supervisor starts "
                "there: start it before releasing anything)"
            )
        return 0
    try:
        record = release_state_dir(path, args.state_dir_id)
    except PolicyRefused as exc:  # refused, or the registry is damaged or not root's: the reason, no traceback
        return fail(f"{exc}; nothing was released")
    print(
        f"released {len(record.numbers)} uids of the state dir id {args.state_dir_id} (last seen at "
        f"{record.path or 'an unknown path'}): {uid_ranges(record.numbers)}; new toolboxes on this host may get them"
    )
    print(f"warning: {files_warning(record.numbers)}")
    return 0
