"""Which agent file a slug belongs to: its path and its owner (uid), with device and inode recorded.

A slug names a tenant's uids, work folders and HOME (``_identities.py``), so the file that first claims it keeps it:
another path claiming the slug, or a file of another owner put at the bound path once the first was removed (a
folder other users may write), is a conflict, until the operator hands the slug over (``agents-supervise
rebind-agent``). A new inode of the same owner at the bound path is the same principal saving its file anew (an
editor that writes a copy and renames it over the old one): accepted and recorded. :func:`bind_agents` is pure.

The path bound (:func:`agent_file_identity`) is the file's canonical path, except when the path the policy names
leads there only through links root alone could have made or can move (root's links in folders only root changes,
or on a read-only mount: ``sandbox._path_walk.ResolvedPath.links_fixed``): then it is the name. A Kubernetes
ConfigMap volume is such a name: the kubelet updates it by swapping its ``..data`` link, which moves every file's
canonical path while the name stays, and the slug stays with the name. A link anyone else could change binds the
canonical path, as before, so that no link a worker or another user controls moves a slug. A binding made by the
canonical path of the very file a name now leads to (a table from before, or a policy that named the file
directly) moves to the name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sandbox import resolve_path
from supervisor.config import ConfigProblem, display_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.config import LoadedAgent

__all__ = ["AgentFile", "agent_file_identity", "agent_file_or_path", "bind_agents", "loaded_agent_claim"]


@dataclass(frozen=True)
class AgentFile:
    """An agent file as the identity table binds it: its path (module docstring), owner uid, device and inode
    (``None``: not known, as in a table from before owners were recorded)."""

    file: str
    owner: int | None = None
    device: int | None = None
    inode: int | None = None
    #: of a claim bound by a name: the canonical path it leads to now (not recorded)
    real: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file}
        if self.owner is not None:
            out.update(owner=self.owner, device=self.device, inode=self.inode)
        return out

    @classmethod
    def from_json(cls, data: Any) -> AgentFile:
        owner = data.get("owner")
        return cls(
            str(data["file"]),
            None if owner is None else int(owner),
            None if owner is None else int(data["device"]),
            None if owner is None else int(data["inode"]),
        )


def _accept(asked: str, location: str, st: os.stat_result) -> None:
    return None


def agent_file_identity(path: str) -> AgentFile:
    """The binding of the agent file ``path`` names (absolute, as the policy or the command line gives it): the
    name itself when every link on its way is root's alone to change and it has no ``.`` or ``..`` component, else
    its canonical path (module docstring); with the file's owner, device and inode as it is now (the entry itself:
    a link put there is a link, never its target).

    Raises:
        OSError: the file cannot be reached."""
    resolved = resolve_path(path, _accept)  # the walk of sandbox._path_walk: directory fds, no link unseen
    st = os.stat(resolved.canonical, follow_symlinks=False)
    named = path.startswith("/") and os.path.normpath(path) == path and resolved.links and resolved.links_fixed
    if named and path != resolved.canonical:
        return AgentFile(path, st.st_uid, st.st_dev, st.st_ino, real=resolved.canonical)
    return AgentFile(resolved.canonical, st.st_uid, st.st_dev, st.st_ino)


def agent_file_or_path(path: str) -> AgentFile:
    """:func:`agent_file_identity`, or the path alone when the file cannot be read now (it was read a moment ago:
    the binding is not changed for a passing error)."""
    try:
        return agent_file_identity(path)
    except OSError:
        return AgentFile(path, real=os.path.realpath(path))


def loaded_agent_claim(agent: LoadedAgent) -> AgentFile:
    """The claim of a loaded agent file: the path bound as :func:`agent_file_or_path` says, with the owner, device
    and inode of the file whose text was loaded (``fstat`` of its descriptor), whatever the path leads to now: a
    file swapped in between the read and this look is not the one whose owner is judged."""
    claim = agent_file_or_path(agent.named or agent.file)
    if agent.owner is None or agent.device is None or agent.inode is None:
        return claim
    return replace(claim, owner=agent.owner, device=agent.device, inode=agent.inode)


def bind_agents(
    bound_agents: dict[str, AgentFile],
    agents: Mapping[str, AgentFile | str],
    table_path: str,
    agent_prefix: Mapping[str, str],
) -> list[ConfigProblem]:
    """Bind each slug of ``agents`` in ``bound_agents`` (changed in place) and return the conflicts (module
    docstring). A bare path (``str``) or a binding without an owner (a table from before owners were recorded) binds
    by path, and takes the owner as soon as one is known; a claim whose owner is not known now (the file could not
    be read a moment after it was loaded) changes nothing of a binding of its name or its canonical path."""
    conflicts: list[ConfigProblem] = []
    for slug, given in agents.items():
        claim = given if isinstance(given, AgentFile) else AgentFile(given)
        bound = bound_agents.get(slug)
        prefix = agent_prefix.get(slug, "$")
        rebind = (
            f"another slug, or, if this file replaces that one, hand the slug over: agents-supervise "
            f"rebind-agent {slug} {display_path(claim.file)} --policy POLICY"
        )
        if bound is None:
            bound_agents[slug] = claim if claim.owner is not None else AgentFile(claim.real or claim.file)
        elif claim.owner is None and bound.file in (claim.file, claim.real):
            pass  # nothing is known of the file now: the binding stays
        elif bound.file == claim.file and bound.owner is None:
            bound_agents[slug] = claim
        elif bound.file == claim.real and bound.owner in (None, claim.owner):
            bound_agents[slug] = claim  # bound by the canonical path of the file its name leads to: to the name
        elif bound.file != claim.file:
            conflicts.append(
                ConfigProblem(
                    claim.file,
                    f"{prefix}.slug",
                    f"agent slug {slug!r} belongs to {display_path(bound.file)} "
                    f"(identity table {display_path(table_path)}): "
                    "its uids, work folders and HOME are that file's, so this file cannot claim them",
                    rebind,
                )
            )
        elif bound.owner != claim.owner:
            conflicts.append(
                ConfigProblem(
                    claim.file,
                    f"{prefix}.slug",
                    f"agent slug {slug!r} is bound to this path as the file of uid {bound.owner} (identity table "
                    f"{display_path(table_path)}); the file there now belongs to uid {claim.owner}: a file another "
                    "user puts at a path once freed does not inherit the slug's uids, work folders and HOME",
                    rebind,
                )
            )
        elif (bound.device, bound.inode) != (claim.device, claim.inode):
            bound_agents[slug] = claim  # its owner saved it anew (an editor's rename): the same principal
    return conflicts
