"""Git skill sources (``SkillGitRepo {url, subdir}``): cloned, confined, into the state directory and kept.

Where each clone lives is planned by ``_skill_sources.py`` (pure). At supervisor start, before any worker,
:func:`prepare_git_sources` clones every source whose folder does not exist yet (:func:`fetch_git_source`):

- through the launcher's confined command runner (``_confined_exec.py``): own network and PID namespaces,
  Landlock, rlimits of the skills toolbox, no_new_privs, the sandbox uid; write access only to a fresh
  temporary folder beside the target; a ``file://`` URL gets read access to that repository only, an
  ``http(s)://`` URL reaches only the repository's host, through the egress bridge (proxy + DNS stub);
- ``git`` sees no system or user configuration, may use only the URL's protocol (``GIT_ALLOW_PROTOCOL``), never
  prompts, and makes a shallow clone;
- credentials the policy grants the skills toolbox (``toolboxes.<name>.credentials``) whose bindings match an
  ``https://`` source's host reach that clone only through the TLS-terminating proxy (``sandbox._egress_tls``): git
  trusts the supervisor's CA for that clone alone (``GIT_SSL_CAINFO``, a root-owned file beside its config), and
  the proxy adds the credential to the requests for the bound host; git never holds it;
- on success the temporary folder is renamed to the target; on failure it is removed and the error is returned,
  so the supervisor drops that source from the worker's config and shows a load error (the other sources load).

A clone is kept across restarts and never deleted by the supervisor (the anchor deleted its clones before they
were used): to fetch a newer version, delete its folder and restart. When the supervisor runs as root it makes
every clone readable by all uids (:func:`seal_clone`): two skills toolboxes may share a clone (same URL) while
running as different uids (the policy's ``worker_uids``). No worker can change a clone: Landlock grants the
skills workers read access only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from sandbox import (
    READ,
    WRITE,
    FsRule,
    HostError,
    SupervisorCA,
    ensure_dir,
    no_own_ports,
    normalize_host,
    open_anchor,
    open_dir,
    python_runtime_paths,
    seal_tree,
    supervisor_ca,
)
from supervisor.workers import ConfinedOutcome, run_confined

from ._skill_sources import CLONE_TIMEOUT_S, GitSource, drop_git_sources

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sandbox import Credential

__all__ = ["fetch_git_source", "prepare_git_sources", "seal_clone"]


def _git_env(path_var: str, scheme: str, global_config: str) -> dict[str, str]:
    return {
        "PATH": path_var,
        "LANG": "C.UTF-8",
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": global_config,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": scheme,
        "GIT_NO_REPLACE_OBJECTS": "1",
    }


def _write_global_config(path: str, repo_path: str | None) -> None:
    """The only git configuration the clone sees. A local repository belongs to another user than the sandbox
    uid, so git would refuse it as of "dubious ownership": name it (and its ``.git``) in ``safe.directory``, which
    git 2.39 reads from the global configuration only."""
    lines = ["[safe]"]
    if repo_path is not None:
        lines += [f"\tdirectory = {p}" for p in (repo_path, os.path.join(repo_path, ".git"))]
    _write_public(path, ("\n".join(lines) + "\n").encode())


@dataclass
class _Clone:
    tmp: str
    config: str
    rules: list[FsRule]
    env: dict[str, str]
    hosts: tuple[str, ...]
    #: credentials the clone's proxy adds, and the CA that terminates its TLS for them (None: tunnels)
    credentials: tuple[Credential, ...] = ()
    terminator: SupervisorCA | None = None


def _clone_credentials(url: str, credentials: Sequence[Credential]) -> tuple[Credential, ...]:
    """The credentials whose bindings match the source's host (any path: a clone asks several)."""
    parts = urlsplit(url)
    try:
        if parts.scheme != "https" or not parts.hostname:
            return ()
        host, port = normalize_host(parts.hostname), parts.port or 443
    except (HostError, ValueError):
        return ()
    return tuple(
        c
        for c in credentials
        if any(b.matches("https", host, port, p) for b in c.bindings for p in (b.path_prefixes or ("/",)))
    )


def _prepare(
    git: GitSource, policy: Any, uid: int | None, gid: int | None, credentials: Sequence[Credential] = ()
) -> _Clone | str:
    """Make the temporary folder and decide the clone's rules; a string is a refusal."""
    parts = urlsplit(git.url)
    repo_path: str | None = None
    hosts: tuple[str, ...] = ()
    if parts.scheme == "file":
        # canonical already (the agent file's paths are resolved at load without following a link a worker could
        # have planted); never resolved again here as root: the clone's launcher follows root's links only
        repo_path = os.path.normpath(unquote(parts.path))
        if not os.path.lexists(repo_path):
            return f"git source {git.url}: the repository {repo_path} does not exist"
    elif git.host:
        hosts = (git.host,)
    else:
        return f"git source {git.url}: only http(s):// and file:// URLs can be cloned"
    parent = os.path.dirname(git.target)
    state_fd = open_anchor(os.path.dirname(parent))
    try:  # root's folder of clones in the state dir, made or checked through fds (never a link followed)
        os.close(ensure_dir(state_fd, os.path.basename(parent), mode=0o711, where=parent))
    finally:
        os.close(state_fd)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(git.target)}.partial-", dir=parent)
    parent_fd = open_anchor(parent)
    try:  # root's fresh folder, handed to the clone's uid through its fd
        fd = open_dir(parent_fd, os.path.basename(tmp))
        if uid is not None and gid is not None:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
        os.close(fd)
    finally:
        os.close(parent_fd)
    rules = [FsRule(p, READ) for p in [*policy.system_paths, *python_runtime_paths()] if os.path.exists(p)]
    rules += [FsRule(p, WRITE) for p in policy.device_paths if os.path.exists(p)]
    rules.append(FsRule(tmp, WRITE))
    if repo_path is not None:
        rules.append(FsRule(repo_path, READ))
    config = tmp + ".gitconfig"
    _write_global_config(config, repo_path)
    rules.append(FsRule(config, READ))
    env = _git_env(policy.worker_env.get("PATH", "/usr/local/bin:/usr/bin:/bin"), parts.scheme, config)
    creds = _clone_credentials(git.url, credentials)
    terminator = None
    if creds:
        terminator = supervisor_ca()
        ca_file = tmp + ".ca.pem"
        _write_public(ca_file, terminator.cert_pem)
        rules.append(FsRule(ca_file, READ))
        env["GIT_SSL_CAINFO"] = ca_file
    return _Clone(tmp, config, rules, env, hosts, creds, terminator)


def _write_public(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, data)
    finally:
        os.close(fd)


def _finish(git: GitSource, clone: _Clone, outcome: ConfinedOutcome, timeout_s: float) -> str | None:
    """Move a good clone into place; always remove the temporary folder. Returns the error, if any."""
    try:
        if outcome.timed_out:
            return f"git clone of {git.url} did not finish within {timeout_s:g} s and was stopped"
        if outcome.returncode != 0:
            why = outcome.stderr_text(600) or f"exit status {outcome.returncode}"
            return f"git clone of {git.url} failed: {why}"
        try:
            os.rename(clone.tmp, git.target)
        except OSError:
            if not os.path.isdir(git.target):  # another supervisor may have won the race: use its clone
                raise
        return None
    finally:
        _cleanup(clone)


def _cleanup(clone: _Clone) -> None:
    if os.path.isdir(clone.tmp):
        shutil.rmtree(clone.tmp, ignore_errors=True)
    for path in (clone.config, clone.tmp + ".ca.pem"):
        if os.path.exists(path):
            os.unlink(path)


def _exists(git: GitSource) -> bool:
    return os.path.isdir(git.target)


def seal_clone(path: str) -> None:
    """Make the clone at ``path`` readable (and its folders enterable) by every uid, writable by its owner only,
    through dir fds (``sandbox._dirfd.seal_tree``: links left alone, never followed). Cheap when ``path`` is sealed
    already."""
    parent = open_anchor(os.path.dirname(path))
    try:
        seal_tree(parent, os.path.basename(path))
    finally:
        os.close(parent)


async def fetch_git_source(
    git: GitSource,
    *,
    policy: Any,
    launcher: list[str],
    rlimits: Any,
    uid: int | None,
    gid: int | None,
    on_egress: Callable[[dict[str, Any]], None] | None = None,
    timeout_s: float = CLONE_TIMEOUT_S,
    cname_targets: tuple[str, ...] = (),
    credentials: Sequence[Credential] = (),
    opened: tuple[tuple[str, ...], bool, str] = ((), False, ""),
    own_ports: Callable[[], frozenset[int]] = no_own_ports,
) -> tuple[str | None, bool]:
    """Clone ``git`` unless its folder exists. Returns ``(error message or None, cloned now)``; the ``subdir`` is
    not checked here.

    Never raises for what git or the repository does; ``OSError`` only when the state directory cannot be
    written. ``policy`` is the loaded :class:`~supervisor.config._policy.Policy` (system paths, environment, strictness,
    private ranges); ``launcher``, ``rlimits``, ``uid``, ``gid`` and ``cname_targets`` are those of the skills
    toolbox's worker; ``credentials`` the ones the policy grants it (see the module docstring); ``opened`` its
    address classes the policy opens (private ranges, loopback, its policy key: as for its worker's bridge);
    ``own_ports`` the supervisor's own listening ports, never dialled.
    """
    if _exists(git):
        if uid is not None:
            seal_clone(git.target)
        return None, False
    clone = _prepare(git, policy, uid, gid, credentials)
    if isinstance(clone, str):
        return clone, False
    try:
        outcome = await run_confined(
            ["git", "clone", "--quiet", "--depth", "1", "--no-tags", "--", git.url, clone.tmp],
            toolbox=f"{git.toolbox} (git clone)",
            workdir=clone.tmp,
            fs_rules=clone.rules,
            env=clone.env,
            timeout_s=timeout_s,
            uid=uid,
            gid=gid,
            min_landlock_abi=policy.landlock_min_abi if policy.strict else 0,
            rlimits=rlimits,
            allowed_hosts=clone.hosts,
            private_networks=opened[0],
            cname_targets=cname_targets,
            loopback=opened[1],
            policy_key=opened[2],
            own_ports=own_ports,
            on_egress=on_egress,
            credentials=clone.credentials,
            terminator=clone.terminator,
            launcher=launcher,
            view=policy.private_view,
            system_paths=(*policy.system_paths, *python_runtime_paths()),
        )
    except BaseException:
        _cleanup(clone)
        raise
    error = _finish(git, clone, outcome, timeout_s)
    if error is None and uid is not None:
        seal_clone(git.target)
    return error, True


def _check_subdir(git: GitSource) -> str | None:
    if git.subdir and not os.path.isdir(git.skill_dir):
        return f"git source {git.url}: the repository has no folder {git.subdir!r} (subdir)"
    return None


async def prepare_git_sources(
    compiled: Any, trace: Any, own_ports: Callable[[], frozenset[int]] = no_own_ports
) -> list[dict[str, str]]:
    """Clone every git source of ``compiled`` (a ``CompiledPolicy``) that is not cloned yet; drop the failed ones
    from their workers' configs and rules. Returns the load errors (``{"toolbox", "agent", "source", "message"}``), each
    also traced as ``load_error``. Call before any worker starts. ``own_ports``: the supervisor's own listening
    ports, which no clone reaches."""
    errors: list[dict[str, str]] = []
    done: dict[str, str | None] = {}
    failed: dict[tuple[str, str], list[GitSource]] = {}
    specs = {(s.agent, s.toolbox): s for s in compiled.specs}
    for git in compiled.git_sources:
        spec = specs[(git.agent, git.toolbox)]
        if git.target not in done:

            def on_egress(decision: dict[str, Any], toolbox: str = git.toolbox, agent: str = git.agent) -> None:
                # the decision names the clone's toolbox too ("x (git clone)"): the skills toolbox's name wins
                trace.record("egress", **{**decision, "toolbox": toolbox, "agent": agent, "purpose": "git clone"})

            try:
                error, cloned = await fetch_git_source(
                    git,
                    policy=compiled.config.policy,
                    launcher=list(spec.argv),
                    rlimits=spec.plan.rlimits,
                    uid=spec.plan.uid,
                    gid=spec.plan.gid,
                    on_egress=on_egress,
                    cname_targets=spec.cname_targets,
                    credentials=spec.credentials,
                    opened=(spec.private_networks, spec.loopback, spec.policy_key),
                    own_ports=own_ports,
                )
            except OSError as exc:
                error, cloned = f"git source {git.url}: cannot write its clone: {exc}", False
            except Exception as exc:  # a bug on the clone path: this source's load error, never the supervisor's end
                error, cloned = f"git source {git.url}: the clone failed: {type(exc).__name__}: {exc}"[:2000], False
            done[git.target] = error
            if error is None:
                trace.record(
                    "skill_source",
                    toolbox=git.toolbox,
                    agent=git.agent,
                    url=git.url,
                    folder=git.target,
                    action="cloned" if cloned else "kept",
                )
        error = done[git.target] or _check_subdir(git)
        if error is not None:
            failed.setdefault((git.agent, git.toolbox), []).append(git)
            errors.append({"toolbox": git.toolbox, "agent": git.agent, "source": git.source, "message": error})
            trace.record("load_error", toolbox=git.toolbox, agent=git.agent, source=git.source, message=error)
    for key, gone in failed.items():
        spec = specs[key]
        kept_targets = {g.target for g in compiled.git_sources if (g.agent, g.toolbox) == key and g not in gone}
        drop = {g.target for g in gone} - kept_targets
        spec.plan = replace(
            spec.plan,
            payload=drop_git_sources(spec.plan.payload, gone),
            fs_rules=tuple(r for r in spec.plan.fs_rules if r.path not in drop),
        )
    return errors
