"""Reading the credentials' values (the policy's ``credentials`` sources), as root, without being a confused deputy.

- ``env``: the supervisor's own environment.
- ``file``: opened component by component from ``/`` with ``O_NOFOLLOW`` (a link anywhere on the path is refused,
  never followed), the file itself ``O_NOFOLLOW | O_NONBLOCK``; then ``fstat`` of that very descriptor: a regular
  file, owned by root (by the supervisor's own uid when it does not run as root) and readable by no group or other
  (mode 0600 or 0400). At most 64 KiB.
- ``command``: an argv (no shell) the supervisor runs with its own environment, stdin empty, in a session of its
  own, bounded by ``timeout_s`` (then its process group is killed) and by :data:`MAX_FILE_BYTES` of output; its
  standard output is the value. It runs through the supervisor's one child runner (``workers.run_child``), so the
  trio loop keeps serving meanwhile: :func:`run_credential_commands` (async) runs them before the compile, and
  :func:`load_credentials` takes their values. A failure names the exit status, never the output, which may hold the
  secret.

Each value is stripped of surrounding white space (the final line break of a file or a command's output) and must
be a valid header value (:func:`sandbox._credentials.credential_value_problem`). A problem is a
:class:`~supervisor._errors.PolicyRefused` naming the credential and its source, never its value: a policy whose
credentials cannot be read does not start.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Awaitable, Callable, Mapping

from sandbox import Credential, credential_value_problem
from supervisor._errors import PolicyRefused
from supervisor.config import CredentialPolicy, CredentialSource, binding_of
from supervisor.workers import ChildOutcome, run_child

__all__ = ["MAX_FILE_BYTES", "NOT_RUN", "load_credentials", "read_root_only_file", "run_credential_commands"]

MAX_FILE_BYTES = 64 * 1024
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

#: How a command source is run: ``workers.run_child``'s contract.
Runner = Callable[..., Awaitable[ChildOutcome]]


class _Unreadable(Exception):
    pass


def read_root_only_file(path: str, *, owner: int | None = None) -> bytes:
    """The bytes of ``path`` (absolute), opened without following any link, when it is a regular file of
    ``owner`` (default: the effective uid) that no group or other may read. Raises ``OSError`` for what the
    kernel refused and ``ValueError`` saying what is wrong with the file otherwise."""
    owner = os.geteuid() if owner is None else owner
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or not parts or any(p in (".", "..") for p in parts):
        raise ValueError("the path must be absolute, without '.' or '..'")
    fd = os.open("/", _DIR)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        file_fd = os.open(parts[-1], _FILE, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        if st.st_uid != owner:
            raise ValueError(f"it is owned by uid {st.st_uid}, not by {'root' if owner == 0 else f'uid {owner}'}")
        if st.st_mode & 0o077:
            raise ValueError(
                f"its mode is {stat.S_IMODE(st.st_mode):04o}: group or others may access it (chmod 600 it)"
            )
        if st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"it is larger than {MAX_FILE_BYTES} bytes")
        data = b""
        while len(data) <= MAX_FILE_BYTES:
            chunk = os.read(file_fd, MAX_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"it is larger than {MAX_FILE_BYTES} bytes")
        return data
    finally:
        os.close(file_fd)


def _read(name: str, source: CredentialSource, environ: Mapping[str, str], commands: Mapping[str, str]) -> str:
    if source.env is not None:
        if source.env not in environ:
            raise _Unreadable(f"the environment variable {source.env} is not set in the supervisor's environment")
        return environ[source.env]
    if source.file is not None:
        try:
            data = read_root_only_file(source.file)
        except OSError as exc:
            hint = " (a symbolic link on the path is refused)" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else ""
            raise _Unreadable(f"the file {source.file} cannot be opened: {exc.strerror or exc}{hint}") from None
        except ValueError as exc:
            raise _Unreadable(f"the file {source.file} is refused: {exc}") from None
        return _text(data, f"the file {source.file}")
    assert source.command is not None
    if name not in commands:  # a bug of the caller: run_credential_commands was not awaited first
        raise _Unreadable(f"the command {_shown(source)} was not run")
    return commands[name]


async def _run_command(source: CredentialSource, environ: Mapping[str, str], run: Runner) -> str:
    assert source.command is not None
    shown = _shown(source)
    try:
        outcome = await run(
            source.command, env=dict(environ), timeout_s=source.timeout_s, stdout_cap=MAX_FILE_BYTES + 1
        )
    except OSError as exc:
        raise _Unreadable(f"the command {shown} cannot be run: {exc.strerror or exc}") from None
    if outcome.timed_out:
        raise _Unreadable(f"the command {shown} did not finish within {source.timeout_s:g} s") from None
    if outcome.returncode != 0:
        raise _Unreadable(
            f"the command {shown} failed with exit status {outcome.returncode} (its output is not "
            "shown: it may hold the secret; run it yourself to see why)"
        )
    if outcome.stdout_truncated:
        raise _Unreadable(f"the output of {shown} is larger than {MAX_FILE_BYTES} bytes")
    return _text(outcome.stdout, f"the output of {shown}")


def _shown(source: CredentialSource) -> str:
    return " ".join(source.command or [])[:200]


async def run_credential_commands(
    specs: Mapping[str, CredentialPolicy], environ: Mapping[str, str] | None = None, *, run: Runner = run_child
) -> dict[str, str]:
    """Run the ``command:`` source of every credential that has one (one after another); their outputs, by
    credential name, for :func:`load_credentials`. A checkpoint: the trio loop serves meanwhile.

    Raises:
        PolicyRefused: a command cannot be run, fails, runs past its ``timeout_s`` or prints what is no text
            (the message names the credential and the command, never the output).
    """
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, spec in specs.items():
        if spec.source.command is not None:
            try:
                out[name] = await _run_command(spec.source, env, run)
            except _Unreadable as exc:
                raise PolicyRefused(f"credentials.{name}: {exc}") from None
    return out


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise _Unreadable(f"{where} is not ASCII text") from None


#: The value of a ``command:`` credential that :func:`load_credentials` was told not to run (``check``): never
#: sent anywhere, since nothing starts.
NOT_RUN = "(command not run)"


def load_credentials(
    specs: Mapping[str, CredentialPolicy],
    environ: Mapping[str, str] | None = None,
    *,
    command_values: Mapping[str, str] | None = None,
) -> dict[str, Credential]:
    """Read every credential's value now; the proxy's :class:`~sandbox._credentials.Credential` for each.
    ``command_values``: what :func:`run_credential_commands` gave; ``None`` (``check``: nothing starts, no command
    runs): a ``command:`` source's value is :data:`NOT_RUN`; ``env`` and ``file`` sources are still read (that has
    no effect) so their problems show.

    Raises:
        PolicyRefused: a value cannot be read or is not a valid header value (the message names the credential
            and its source, never the value).
    """
    env = os.environ if environ is None else environ
    out: dict[str, Credential] = {}
    for name, spec in specs.items():
        if spec.source.command is not None and command_values is None:
            out[name] = Credential(
                name, NOT_RUN, tuple(binding_of(b) for b in spec.bindings), spec.header_pair(), spec.query
            )
            continue
        try:
            value = _read(name, spec.source, env, command_values or {}).strip()
        except _Unreadable as exc:
            raise PolicyRefused(f"credentials.{name}: {exc}") from None
        problem = credential_value_problem(value)
        if problem:
            raise PolicyRefused(f"credentials.{name}: {problem} (from its source {_describe(spec.source)})")
        out[name] = Credential(name, value, tuple(binding_of(b) for b in spec.bindings), spec.header_pair(), spec.query)
    return out


def _describe(source: CredentialSource) -> str:
    if source.env is not None:
        return f"env {source.env}"
    if source.file is not None:
        return f"file {source.file}"
    return "command " + " ".join(source.command or [])[:200]
