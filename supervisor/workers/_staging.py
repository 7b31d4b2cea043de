"""Stage the code that runs inside workers where the sandbox uid can read it.

Workers import ``sandbox`` (the launcher) and ``toolboxes``. The supervisor's own copy may live in a checkout the
sandbox uid cannot traverse (a CI clone under a 0700 home, say), and giving a worker read access to the whole
checkout would expose more than it needs. So the two packages are copied once into
``<state_dir>/runtime/<fingerprint>/`` (directories 0755, files 0644, owned by the supervisor's user so the worker
cannot change them) and workers get exactly that folder on ``sys.path``, read-only. The fingerprint covers every
file's relative path, size and modification time, so an edited tree gets a fresh copy and a stale copy is never
used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

import sandbox
import toolboxes

__all__ = ["stage_worker_code"]

_PACKAGES = (sandbox, toolboxes)


def _package_dir(module: object) -> str:
    return os.path.dirname(os.path.realpath(str(module.__file__)))  # type: ignore[attr-defined]


def _files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            out.append(os.path.join(dirpath, name))
    return out


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for module in _PACKAGES:
        root = _package_dir(module)
        for path in _files(root):
            st = os.stat(path)
            digest.update(f"{module.__name__}/{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def stage_worker_code(state_dir: str) -> str:
    """Return a world-readable directory holding ``sandbox`` and ``toolboxes``, copying them if needed.

    Safe against concurrent supervisors: the copy is built in a temporary folder and renamed into place.
    Raises ``OSError`` when the state directory cannot be written.
    """
    runtime = os.path.join(state_dir, "runtime")
    os.makedirs(runtime, mode=0o755, exist_ok=True)
    os.chmod(runtime, 0o755)
    target = os.path.join(runtime, _fingerprint())
    if os.path.isdir(target):
        return target
    tmp = tempfile.mkdtemp(prefix=".stage-", dir=runtime)
    try:
        for module in _PACKAGES:
            root = _package_dir(module)
            for path in _files(root):
                dest = os.path.join(tmp, module.__name__, os.path.relpath(path, root))
                os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
                shutil.copyfile(path, dest)
                os.chmod(dest, 0o755 if os.access(path, os.X_OK) else 0o644)
        for dirpath, _, _ in os.walk(tmp):
            os.chmod(dirpath, 0o755)
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
