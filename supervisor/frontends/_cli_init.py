"""``agents-supervise init DIR``: a starting policy and the example agents, written into a new folder.

What it writes (from the files an install ships, ``supervisor/shipped/``: the checkout's ``policies/`` and
``examples/``):

- ``DIR/policy.yaml``: the shipped ``strict.yaml``, every key and comment as it is, with its agents list naming the
  system agent and the seed's ``coder`` (``file-agent`` listed, commented out: it needs services of its own), and a
  local HTTP tenant (``frontends.http.listen: 127.0.0.1:8765``) that may use both;
- ``DIR/agents/system.json``, ``DIR/coder/``, ``DIR/file-agent/``: the agent files and the folders they name;
- ``DIR/token``: the tenant's bearer token (mode 0600; the policy holds only its ``sha256:`` hash).

``DIR`` must be new or empty: nothing is overwritten. Every file is created with ``O_EXCL | O_NOFOLLOW`` and every
folder with ``mkdir``, so a link planted in ``DIR`` is never followed; folders are 0755 and files 0644 (0755 when
executable), readable by the workers' uids as the supervisor requires.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from ._http_auth import hash_token

__all__ = ["InitRefused", "init_folder", "run_init", "shipped_dir"]

#: what the written policy's agents list holds instead of strict.yaml's
_AGENTS = """agents:
  - agents/system.json         # facts about the machine (uptime, date, ...)
  - coder/agent.json           # the seed's coder: dev and lua toolboxes on coder/src, system's attach-file
  # - file-agent/agent.json    # the seed's file-agent: needs GITHUB_TOKEN (its OpenAPI toolbox), a PostgREST at
  #                            # localhost:3000, /usr/bin/mcp-filesystem and its CommandFilter script; without them
  #                            # those toolboxes are load errors and the rest serves
"""
_STRICT_AGENTS = "agents:\n  - agents/system.json\n"

_HTTP = """
# MCP over Streamable HTTP (`agents-supervise serve --http --policy policy.yaml`, docs/HTTP.md): this host only,
# one tenant whose bearer token is in the file `token` beside this policy (the policy keeps only its hash;
# `agents-supervise hash-token` makes the hash of another).
frontends:
  http:
    listen: 127.0.0.1:8765
tenants:
  local:
    tokens: ["{hash}"]
    agents: [system, coder]
"""


class InitRefused(Exception):
    """Raised when ``init`` cannot write into the folder (not empty, not a folder); nothing was written."""


def shipped_dir() -> Path:
    """The shipped policies and examples: ``supervisor/shipped/`` of this install (links into a checkout)."""
    return Path(__file__).resolve().parents[1] / "shipped"


def policy_text(strict: str, token_hash: str) -> str:
    """``strict.yaml``'s text with the example agents and the local HTTP tenant (pure)."""
    if _STRICT_AGENTS not in strict:
        raise InitRefused("the shipped strict.yaml has no agents list to extend (a broken install?)")
    return strict.replace(_STRICT_AGENTS, _AGENTS, 1).rstrip("\n") + "\n" + _HTTP.replace("{hash}", token_hash)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        os.write(fd, data)
    finally:
        os.close(fd)


def _copy_tree(source: Path, target: Path) -> None:
    os.mkdir(target, 0o755)
    os.chmod(target, 0o755, follow_symlinks=False)
    for entry in sorted(source.iterdir()):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        elif entry.is_file():
            executable = os.access(entry, os.X_OK)
            _write(target / entry.name, entry.read_bytes(), 0o755 if executable else 0o644)


def init_folder(folder: str) -> list[tuple[str, str]]:
    """Write the starting policy and the examples into ``folder`` (made when missing); returns (path, what) of
    each thing written, for the operator. Raises :class:`InitRefused` (nothing written) or ``OSError``."""
    target = Path(os.path.abspath(folder))
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise InitRefused(f"{target} is not a folder; init writes into a new or empty folder (nothing was written)")
    if target.exists() and any(target.iterdir()):
        raise InitRefused(f"{target} is not empty; init writes into a new or empty folder (nothing was written)")
    shipped = shipped_dir()
    token = secrets.token_urlsafe(32)
    text = policy_text((shipped / "policies" / "strict.yaml").read_text(), hash_token(token))
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(target, 0o755)
    _write(target / "policy.yaml", text.encode(), 0o644)
    os.mkdir(target / "agents", 0o755)
    _write(target / "agents" / "system.json", (shipped / "policies" / "agents" / "system.json").read_bytes(), 0o644)
    for example in ("coder", "file-agent"):
        _copy_tree(shipped / "examples" / example, target / example)
    _write(target / "token", (token + "\n").encode(), 0o600)
    return [
        (f"{target}/policy.yaml", "strict.yaml serving the agents system and coder; HTTP tenant local"),
        (f"{target}/agents/system.json", "the system agent: facts about the machine"),
        (f"{target}/coder/", "the seed's coder: dev, lua and system toolboxes on coder/src"),
        (f"{target}/file-agent/", "the seed's file-agent (commented out in policy.yaml: it needs services)"),
        (f"{target}/token", "the bearer token of tenant local (mode 0600)"),
    ]


def run_init(folder: str) -> int:
    """``agents-supervise init FOLDER``: write, say what was written and what to run next; the exit status."""
    try:
        written = init_folder(folder)
    except InitRefused as exc:
        print(f"agents-supervise: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"agents-supervise: error: {exc.strerror or exc}: {exc.filename or folder}", file=sys.stderr)
        return 2
    width = max(len(path) for path, _ in written)
    for path, what in written:
        print(f"wrote {path.ljust(width)}  {what}")
    print(f"next: agents-supervise tools --policy {written[0][0]} --agent coder")
    return 0
