"""The wasmtime engine of one toolbox: its configuration, the epoch clock and the compile cache.

Engine settings: the component model, epoch interruption (the time limit), memory images copy-on-write or not
(:func:`make_engine`), and linear memories reserved at most ``MaxMemoryMB`` with small guard pages, so a store fits
the worker's ``RLIMIT_AS`` (wasmtime's default reserves 4 GiB plus guards per memory). The store limit
(``Store.set_limits``) is what caps memory; the reservation only keeps the address space small.

:class:`EpochClock` advances the engine's epoch every :data:`TICK_S` while at least one call runs (idle, its thread
sleeps), so a call's deadline of ``n`` ticks traps the component with ``interrupt`` about ``n * TICK_S`` later (in
guest code only: :mod:`._executors` stops a component blocked in a host call). The engine compiles in the worker
and runs in each executor (:mod:`._executor`), with the same settings, so the compiled form moves between them.

:class:`CompileCache`: compiled components are kept in the toolbox's state folder as
``wasm-cache/<sha256 of the component>-<wasmtime version>-<settings>.cwasm`` and deserialized on the next load, so a
restart does not compile again. wasmtime refuses (and we then recompile) a file made by another version or for
other settings. The folder belongs to the worker's uid and no component is given it, so what is deserialized was
written by this toolbox's own worker.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import wasmtime
from wasmtime import component as wc

from .._atomic import atomic_write
from ._file_size import fits

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["TICK_S", "WASMTIME_VERSION", "CompileCache", "EpochClock", "make_engine"]

#: Granularity of the time limit.
TICK_S = 0.01
#: Guard pages after each linear memory (bounds checks are explicit beyond them).
_GUARD_BYTES = 64 * 1024
WASMTIME_VERSION = importlib.metadata.version("wasmtime")


def make_engine(max_memory_bytes: int, copy_on_write: bool = True) -> tuple[wasmtime.Engine, str]:
    """A new engine for a toolbox whose stores hold at most ``max_memory_bytes``, and a tag of its settings (part
    of the compile cache key). ``copy_on_write``: initialise linear memories from a memfd image mapped
    copy-on-write (wasmtime's default); off, each instance copies its data segments. The image is a file: it is
    made at a component's first instantiation and counts against ``RLIMIT_FSIZE``, so a worker with a file size
    limit turns it off (:mod:`._file_size`)."""
    reservation = max(1 << 20, (max_memory_bytes + 0xFFFF) & ~0xFFFF)
    cfg = wasmtime.Config()
    cfg.wasm_component_model = True
    cfg.epoch_interruption = True
    cfg.memory_reservation = reservation
    cfg.memory_guard_size = _GUARD_BYTES
    cfg.memory_reservation_for_growth = 0
    cfg.parallel_compilation = False  # the worker's call threads are the parallelism; a compile stays on one core
    cfg.memory_init_cow = copy_on_write
    settings = f"epoch-r{reservation}-g{_GUARD_BYTES}" + ("" if copy_on_write else "-nocow")
    return wasmtime.Engine(cfg), settings


class EpochClock:
    """Advances ``engine``'s epoch every :data:`TICK_S` while a call is inside :meth:`running`."""

    def __init__(self, engine: wasmtime.Engine) -> None:
        self._engine = engine
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="wasm-epoch", daemon=True)
        self._thread.start()

    @staticmethod
    def ticks(seconds: float) -> int:
        """The deadline, in ticks, of a call allowed ``seconds``."""
        return max(1, int(seconds / TICK_S) + 1)

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._cond:
            self._active += 1
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if self._active == 0:
                    self._cond.wait()
                    continue
                self._cond.wait(TICK_S)
                self._engine.increment_epoch()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()


class CompileCache:
    """Compiled components by content, in ``folder`` (created on first use)."""

    def __init__(self, engine: wasmtime.Engine, settings: str, folder: str) -> None:
        self._engine = engine
        self._settings = settings
        self._folder = folder

    def _file(self, digest: str) -> str:
        return os.path.join(self._folder, f"{digest}-{WASMTIME_VERSION}-{self._settings}.cwasm")

    def load(self, wasm: bytes) -> tuple[wc.Component, bytes, bool]:
        """The component of the bytes ``wasm``, its serialized form (what an executor deserializes) and whether it
        came from the cache. Raises ``WasmtimeError`` when the bytes are not a valid component."""
        path = self._file(hashlib.sha256(wasm).hexdigest())
        try:
            with open(path, "rb") as f:
                compiled: bytes | None = f.read()
        except OSError:
            compiled = None
        if compiled is not None:
            try:
                return wc.Component.deserialize(self._engine, compiled), compiled, True
            except wasmtime.WasmtimeError:
                pass  # another version or settings after all: compile again and replace it
        component = wc.Component(self._engine, wasm)
        compiled = bytes(component.serialize())
        if not fits(len(compiled)):
            return component, compiled, False  # past the worker's file size limit: the next start compiles it again
        try:
            os.makedirs(self._folder, mode=0o700, exist_ok=True)
            atomic_write(path, compiled, 0o600)
        except OSError:
            pass  # a full or read-only state folder costs the next start a compile, nothing else
        return component, compiled, False
