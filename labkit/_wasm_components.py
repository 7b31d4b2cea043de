"""Test components of the ``murmur:tool@0.2.0`` world, built from WAT during test set-up (no checked-in binaries).

Each component is a small core module in WAT (written here by :func:`component_wat`) that ``wasm-tools component
embed`` joins to :data:`WIT` and ``wasm-tools component new`` turns into a component. The WIT declares the seed's
``run`` interface and the few WASI p2 functions the probes call (``wasi:filesystem``, ``wasi:sockets``,
``wasi:cli/environment``), spelled as WASI 0.2.0 defines them so that wasmtime's own WASI implementation links them,
and a ``wasi:http`` import (world ``http``) that this toolbox does not link.

A component's result is laid out statically (the canonical ABI's memory layout of ``tool-result``, made by
:func:`_result_blob`) and its behaviour is a WAT body chosen by name (:data:`BEHAVIOURS`). :func:`build_components`
writes ``<name>.wasm`` and ``<name>.json`` (the sidecar) into a folder, building once per set of sources into a
cache folder and copying from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["BEHAVIOURS", "WASM_TOOLS", "Spec", "build_components", "png_bytes"]

WASM_TOOLS = os.path.join(os.path.dirname(sys.executable), "wasm-tools")
CACHE = Path("/tmp/agents-supervise-tests/wasm-components")

WIT = """
package murmur:tests;

world probe {
  import wasi:filesystem/preopens@0.2.0;
  import wasi:filesystem/types@0.2.0;
  import wasi:sockets/instance-network@0.2.0;
  import wasi:sockets/tcp-create-socket@0.2.0;
  import wasi:sockets/tcp@0.2.0;
  import wasi:cli/environment@0.2.0;
  export murmur:tool/run@0.2.0;
}

world plain {
  export murmur:tool/run@0.2.0;
}

world sleeper {
  import wasi:filesystem/preopens@0.2.0;
  import wasi:filesystem/types@0.2.0;
  import wasi:sockets/instance-network@0.2.0;
  import wasi:sockets/tcp-create-socket@0.2.0;
  import wasi:sockets/tcp@0.2.0;
  import wasi:cli/environment@0.2.0;
  import wasi:clocks/monotonic-clock@0.2.0;
  export murmur:tool/run@0.2.0;
}

world http {
  import wasi:http/outgoing-handler@0.2.0;
  export murmur:tool/run@0.2.0;
}

package murmur:tool@0.2.0 {
  interface run {
    enum status { passed, failed, error }
    record tool-input { data: option<string>, log-path: option<string> }
    record attachment { media-type: string, path: string }
    record tool-result {
      status: status, summary: option<string>, data: option<string>, data-path: option<string>,
      truncated: bool, metadata: list<tuple<string, string>>, attachments: list<attachment>,
    }
    run: func(input: tool-input) -> tool-result;
  }
}

package wasi:http@0.2.0 {
  interface outgoing-handler {
    handle: func() -> u32;
  }
}

package wasi:io@0.2.0 {
  interface poll {
    resource pollable {
      block: func();
    }
  }
}

package wasi:clocks@0.2.0 {
  interface monotonic-clock {
    use wasi:io/poll@0.2.0.{pollable};
    type duration = u64;
    subscribe-duration: func(when: duration) -> pollable;
  }
}

package wasi:cli@0.2.0 {
  interface environment {
    get-environment: func() -> list<tuple<string, string>>;
  }
}

package wasi:filesystem@0.2.0 {
  interface types {
    type filesize = u64;
    flags descriptor-flags { read, write, file-integrity-sync, data-integrity-sync, requested-write-sync,
                             mutate-directory }
    flags path-flags { symlink-follow }
    flags open-flags { create, directory, exclusive, truncate }
    enum error-code {
      access, would-block, already, bad-descriptor, busy, deadlock, quota, exist, file-too-large,
      illegal-byte-sequence, in-progress, interrupted, invalid, io, is-directory, loop, too-many-links,
      message-size, name-too-long, no-device, no-entry, no-lock, insufficient-memory, insufficient-space,
      not-directory, not-empty, not-recoverable, unsupported, no-tty, no-such-device, overflow, not-permitted,
      pipe, read-only, invalid-seek, text-file-busy, cross-device,
    }
    resource descriptor {
      write: func(buffer: list<u8>, offset: filesize) -> result<filesize, error-code>;
      open-at: func(path-flags: path-flags, path: string, open-flags: open-flags, %flags: descriptor-flags)
        -> result<descriptor, error-code>;
    }
  }
  interface preopens {
    use types.{descriptor};
    get-directories: func() -> list<tuple<descriptor, string>>;
  }
}

package wasi:sockets@0.2.0 {
  interface network {
    resource network;
    enum error-code {
      unknown, access-denied, not-supported, invalid-argument, out-of-memory, timeout, concurrency-conflict,
      not-in-progress, would-block, invalid-state, new-socket-limit, address-not-bindable, address-in-use,
      remote-unreachable, connection-refused, connection-reset, connection-aborted, datagram-too-large,
      name-unresolvable, temporary-resolver-failure, permanent-resolver-failure,
    }
    enum ip-address-family { ipv4, ipv6 }
    type ipv4-address = tuple<u8, u8, u8, u8>;
    type ipv6-address = tuple<u16, u16, u16, u16, u16, u16, u16, u16>;
    record ipv4-socket-address { port: u16, address: ipv4-address }
    record ipv6-socket-address { port: u16, flow-info: u32, address: ipv6-address, scope-id: u32 }
    variant ip-socket-address { ipv4(ipv4-socket-address), ipv6(ipv6-socket-address) }
  }
  interface instance-network {
    use network.{network};
    instance-network: func() -> network;
  }
  interface tcp {
    use network.{network, error-code, ip-socket-address};
    resource tcp-socket {
      start-connect: func(network: borrow<network>, remote-address: ip-socket-address) -> result<_, error-code>;
    }
  }
  interface tcp-create-socket {
    use network.{network, error-code, ip-address-family};
    use tcp.{tcp-socket};
    create-tcp-socket: func(address-family: ip-address-family) -> result<tcp-socket, error-code>;
  }
}
"""

_FS = "cm32p2|wasi:filesystem/types@0.2"
_IMPORTS = f"""
  (import "cm32p2|wasi:filesystem/preopens@0.2" "get-directories" (func $get_dirs (param i32)))
  (import "{_FS}" "[method]descriptor.open-at" (func $open_at (param i32 i32 i32 i32 i32 i32 i32)))
  (import "{_FS}" "[method]descriptor.write" (func $fd_write (param i32 i32 i32 i64 i32)))
  (import "{_FS}" "descriptor_drop" (func $fd_drop (param i32)))
  (import "cm32p2|wasi:sockets/instance-network@0.2" "instance-network" (func $inst_net (result i32)))
  (import "cm32p2|wasi:sockets/tcp-create-socket@0.2" "create-tcp-socket" (func $tcp_new (param i32 i32)))
  (import "cm32p2|wasi:sockets/tcp@0.2" "[method]tcp-socket.start-connect"
    (func $tcp_connect (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)))
  (import "cm32p2|wasi:cli/environment@0.2" "get-environment" (func $get_env (param i32)))
"""

#: the clock imports of the ``sleeper`` world (besides the probe's)
_CLOCK_IMPORTS = """
  (import "cm32p2|wasi:clocks/monotonic-clock@0.2" "subscribe-duration" (func $subscribe (param i64) (result i32)))
  (import "cm32p2|wasi:io/poll@0.2" "[method]pollable.block" (func $block (param i32)))
  (import "cm32p2|wasi:io/poll@0.2" "pollable_drop" (func $pollable_drop (param i32)))
"""

#: Not the real wasi:http signature: the toolbox links no wasi:http at all, so any import of it is refused at load.
_HTTP_IMPORT = '(import "cm32p2|wasi:http/outgoing-handler@0.2" "handle" (func (result i32)))'

#: Where the result record lives; static strings follow it; retptr scratch below it; the heap starts at 64 KiB.
_RESULT = 256
_SCRATCH = 64
_HEAP = 65536

# Field offsets of tool-result in the canonical ABI.
_SUMMARY, _DATA, _DATA_PATH, _TRUNCATED, _METADATA, _ATTACHMENTS = 4, 16, 28, 40, 44, 52


def png_bytes(padding: int = 0) -> bytes:
    """A valid 1x1 PNG (plus ``padding`` bytes in an ancillary chunk, to make it large)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    extra = chunk(b"teXt", b"x" * padding) if padding else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + extra
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


@dataclass
class Spec:
    """One test component: the static part of its result, files it writes into its first preopen, a behaviour."""

    name: str
    status: str = "passed"
    summary: str | None = None
    data: str | None = None
    data_path: str | None = None
    truncated: bool = False
    metadata: list[tuple[str, str]] = field(default_factory=list)
    attachments: list[tuple[str, str]] = field(default_factory=list)
    files: list[tuple[str, bytes]] = field(default_factory=list)
    behaviour: str = "static"
    description: str = ""
    world: str = "probe"
    #: where ``net`` connects: an IPv4 address and a port
    connect: tuple[tuple[int, int, int, int], int] = ((203, 0, 113, 1), 80)
    #: what ``open`` opens, relative to the first preopen (the work folder)
    open_path: str = ""
    #: filler functions that make the component slow to compile (for the benchmark of the compile cache)
    bulk: int = 0
    #: ``huge``: how many bytes of data it returns
    size: int = 0
    #: ``sleep``: how long it blocks in the host, in milliseconds
    sleep_ms: int = 0


class _Blob:
    """Static memory: bytes placed from ``start`` on, 8-aligned pieces."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.data = bytearray()

    def put(self, raw: bytes) -> int:
        while len(self.data) % 8:
            self.data.append(0)
        at = self.start + len(self.data)
        self.data += raw
        return at

    def string(self, text: str) -> tuple[int, int]:
        raw = text.encode()
        return self.put(raw), len(raw)


def _opt(blob: _Blob, text: str | None) -> bytes:
    if text is None:
        return struct.pack("<BxxxII", 0, 0, 0)
    return struct.pack("<BxxxII", 1, *blob.string(text))


def _result_blob(spec: Spec, files: dict[str, tuple[int, int, int, int]]) -> tuple[bytes, _Blob]:
    """The 60 bytes of the result record and the static data it points into (``files`` gets the name and content
    of each file to write, as addresses and lengths)."""
    blob = _Blob(_RESULT + 64)
    pairs = b"".join(struct.pack("<IIII", *blob.string(k), *blob.string(v)) for k, v in spec.metadata)
    atts = b"".join(struct.pack("<IIII", *blob.string(m), *blob.string(p)) for m, p in spec.attachments)
    meta_at = blob.put(pairs) if pairs else 0
    att_at = blob.put(atts) if atts else 0
    record = struct.pack("<Bxxx", ["passed", "failed", "error"].index(spec.status))
    record += _opt(blob, spec.summary) + _opt(blob, spec.data) + _opt(blob, spec.data_path)
    record += struct.pack("<Bxxx", int(spec.truncated))
    record += struct.pack("<IIII", meta_at, len(spec.metadata), att_at, len(spec.attachments))
    assert len(record) == 60
    for name, content in spec.files:
        files[name] = (*blob.string(name), blob.put(content), len(content))
    return record, blob


def _wat_bytes(raw: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in raw)


# Behaviours: WAT run bodies. Locals: $dd $dp $dl (data option), $ld $lp $ll (log-path option); helpers below.
BEHAVIOURS = {
    "static": "",
    # data := the input's data (the call's arguments as JSON text)
    "echo": f"(call $set_opt (i32.const {_RESULT + _DATA}) (local.get $dd) (local.get $dp) (local.get $dl))",
    # write the log, relative to the first preopen (the work folder, preopened at its own path)
    "log": """(if (local.get $ld) (then (call $write_file (call $first_dir)
        (i32.add (local.get $lp) (i32.add (global.get $dir_len) (i32.const 1)))
        (i32.sub (local.get $ll) (i32.add (global.get $dir_len) (i32.const 1)))
        (i32.const {log_at}) (i32.const {log_len}))))""",
    "trap": "unreachable",
    "loop": "(loop $forever (br $forever))",
    # grow memory until it fails, then abort as an allocator would
    "alloc": "(loop $more (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1)) (then unreachable)) (br $more))",
    # grow memory until it fails, then report the pages held
    "measure": f"""(loop $more (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
        (call $set_number (i32.const {_RESULT + _DATA}) (memory.size))""",
    # open the spec's open_path (default: outside the preopens) for reading, following symlinks; data := the
    # wasi:filesystem error code (or 'opened'), metadata := the preopens' names
    "open": f"""(call $open_outside)
        (call $preopen_names (i32.const {_RESULT + _METADATA}))""",
    # connect a TCP socket to the spec's address (default 203.0.113.1:80); data := start-connect's error code
    # (100 + create-tcp-socket's when that fails), or 'started'
    "net": "(call $connect)",
    # write 1 KiB at a time into big.bin in the work folder until a write fails (at most 64 KiB); data := the
    # wasi:filesystem error code of the failed write, or 'wrote' (the status stays the spec's: passed)
    "bigwrite": "(call $write_big)",
    # metadata := the component's whole environment
    "env": f"(call $get_env (i32.const {_RESULT + _METADATA}))",
    # data := the spec's ``size`` bytes of 'x' (allocated on the heap: give it the memory)
    "huge": "(call $huge (i32.const {size}))",
    # block in the host for the spec's ``sleep_ms`` (wasi:clocks subscribe-duration, pollable.block: no guest code
    # runs meanwhile), then write ``after-sleep.txt`` into the work folder (sleeper world only)
    "sleep": """(call $sleep (i64.const {sleep_ns}))
        (call $write_file (call $first_dir) (i32.const {after_at}) (i32.const {after_len})
                          (i32.const {after_at}) (i32.const {after_len}))""",
}

_HELPERS = f"""
  (global $heap (mut i32) (i32.const {_HEAP}))
  (global $dir_len (mut i32) (i32.const 0))
  (func $realloc (export "cm32p2_realloc") (param $old i32) (param $old_size i32) (param $align i32)
      (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
        (br $grow)))
    (if (local.get $old) (then (memory.copy (local.get $p) (local.get $old) (local.get $old_size))))
    (local.get $p))
  (func (export "cm32p2_initialize"))
  (func $set_opt (param $at i32) (param $some i32) (param $ptr i32) (param $len i32)
    (i32.store8 (local.get $at) (local.get $some))
    (i32.store (i32.add (local.get $at) (i32.const 4)) (local.get $ptr))
    (i32.store (i32.add (local.get $at) (i32.const 8)) (local.get $len)))
  ;; data := $size bytes of 'x'
  (func $huge (param $size i32)
    (local $p i32)
    (local.set $p (call $realloc (i32.const 0) (i32.const 0) (i32.const 1) (local.get $size)))
    (memory.fill (local.get $p) (i32.const 120) (local.get $size))
    (call $set_opt (i32.const {_RESULT + _DATA}) (i32.const 1) (local.get $p) (local.get $size)))
  ;; option<string> at $at := Some(decimal of $n)
  (func $set_number (param $at i32) (param $n i32)
    (local $p i32) (local $end i32)
    (local.set $end (call $realloc (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 12)))
    (local.set $end (i32.add (local.get $end) (i32.const 12)))
    (local.set $p (local.get $end))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digit (local.get $n)))
    (call $set_opt (local.get $at) (i32.const 1) (local.get $p) (i32.sub (local.get $end) (local.get $p))))
"""

_PROBE_HELPERS = f"""
  ;; the handle of the first preopen; $dir_len := the length of its name
  (func $first_dir (result i32)
    (local $list i32)
    (call $get_dirs (i32.const {_SCRATCH}))
    (local.set $list (i32.load (i32.const {_SCRATCH})))
    (global.set $dir_len (i32.load (i32.add (local.get $list) (i32.const 8))))
    (i32.load (local.get $list)))
  ;; create/truncate path (relative to dir) and write bytes into it
  (func $write_file (param $dir i32) (param $path i32) (param $path_len i32) (param $buf i32) (param $len i32)
    (local $fd i32)
    (call $open_at (local.get $dir) (i32.const 0) (local.get $path) (local.get $path_len)
                   (i32.const 9) (i32.const 2) (i32.const {_SCRATCH + 16}))
    (if (i32.load8_u (i32.const {_SCRATCH + 16})) (then unreachable))
    (local.set $fd (i32.load (i32.const {_SCRATCH + 20})))
    (call $fd_write (local.get $fd) (local.get $buf) (local.get $len) (i64.const 0) (i32.const {_SCRATCH + 32}))
    (if (i32.load8_u (i32.const {_SCRATCH + 32})) (then unreachable))
    (call $fd_drop (local.get $fd)))
  ;; metadata at $at := [("preopen", name) for each preopen]
  (func $preopen_names (param $at i32)
    (local $list i32) (local $n i32) (local $i i32) (local $out i32) (local $e i32) (local $o i32)
    (call $get_dirs (i32.const {_SCRATCH}))
    (local.set $list (i32.load (i32.const {_SCRATCH})))
    (local.set $n (i32.load (i32.const {_SCRATCH + 4})))
    (local.set $out (call $realloc (i32.const 0) (i32.const 0) (i32.const 4) (i32.mul (local.get $n) (i32.const 16))))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $e (i32.add (local.get $list) (i32.mul (local.get $i) (i32.const 12))))
        (local.set $o (i32.add (local.get $out) (i32.mul (local.get $i) (i32.const 16))))
        (i32.store (local.get $o) (i32.const {{preopen_at}}))
        (i32.store (i32.add (local.get $o) (i32.const 4)) (i32.const 7))
        (i32.store (i32.add (local.get $o) (i32.const 8)) (i32.load (i32.add (local.get $e) (i32.const 4))))
        (i32.store (i32.add (local.get $o) (i32.const 12)) (i32.load (i32.add (local.get $e) (i32.const 8))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.store (local.get $at) (local.get $out))
    (i32.store (i32.add (local.get $at) (i32.const 4)) (local.get $n)))
  (func $open_outside
    (local $dir i32)
    (local.set $dir (call $first_dir))
    (call $open_at (local.get $dir) (i32.const 1) (i32.const {{outside_at}}) (i32.const {{outside_len}})
                   (i32.const 0) (i32.const 1) (i32.const {_SCRATCH + 16}))
    (if (i32.load8_u (i32.const {_SCRATCH + 16}))
      (then (call $set_number (i32.const {_RESULT + _DATA}) (i32.load8_u (i32.const {_SCRATCH + 20}))))
      (else (call $set_opt (i32.const {_RESULT + _DATA}) (i32.const 1) (i32.const {{opened_at}}) (i32.const 6)))))
  (func $write_big
    (local $fd i32) (local $off i64)
    (call $open_at (call $first_dir) (i32.const 0) (i32.const {{big_at}}) (i32.const {{big_len}})
                   (i32.const 9) (i32.const 2) (i32.const {_SCRATCH + 16}))
    (if (i32.load8_u (i32.const {_SCRATCH + 16})) (then unreachable))
    (local.set $fd (i32.load (i32.const {_SCRATCH + 20})))
    (block $done
      (loop $more
        (br_if $done (i64.ge_u (local.get $off) (i64.const 65536)))
        (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1024) (local.get $off) (i32.const {_SCRATCH + 32}))
        (if (i32.load8_u (i32.const {_SCRATCH + 32}))
          (then (call $set_number (i32.const {_RESULT + _DATA}) (i32.load8_u (i32.const {_SCRATCH + 40})))
                (call $fd_drop (local.get $fd)) (return)))
        (local.set $off (i64.add (local.get $off) (i64.load (i32.const {_SCRATCH + 40}))))
        (br $more)))
    (call $fd_drop (local.get $fd))
    (call $set_opt (i32.const {_RESULT + _DATA}) (i32.const 1) (i32.const {{wrote_at}}) (i32.const 5)))
  (func $connect
    (local $sock i32) (local $net i32)
    (call $tcp_new (i32.const 0) (i32.const {_SCRATCH + 16}))
    (if (i32.load8_u (i32.const {_SCRATCH + 16}))  ;; create-tcp-socket failed: 100 + its error code
      (then (call $set_number (i32.const {_RESULT + _DATA})
                              (i32.add (i32.const 100) (i32.load8_u (i32.const {_SCRATCH + 20})))) (return)))
    (local.set $sock (i32.load (i32.const {_SCRATCH + 20})))
    (local.set $net (call $inst_net))
    ;; ip-socket-address::ipv4 of the spec's address and port, padded to the ipv6 case's 11 values
    (call $tcp_connect (local.get $sock) (local.get $net) (i32.const 0) (i32.const {{port}})
      (i32.const {{a}}) (i32.const {{b}}) (i32.const {{c}}) (i32.const {{d}})
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const {_SCRATCH + 32}))
    (if (i32.load8_u (i32.const {_SCRATCH + 32}))
      (then (call $set_number (i32.const {_RESULT + _DATA}) (i32.load8_u (i32.const {_SCRATCH + 33}))))
      (else (call $set_opt (i32.const {_RESULT + _DATA}) (i32.const 1) (i32.const {{started_at}}) (i32.const 7)))))
"""

#: Where ``open`` aims: far above the work folder, to a file every uid may read.
OUTSIDE = "../" * 24 + "etc/hostname"


def _filler(i: int) -> str:
    """A function that is never called but must be compiled: a loop of arithmetic over memory."""
    steps = "".join(
        f"(local.set $x (i32.add (i32.mul (local.get $x) (i32.const {i * 7 + k + 3})) "
        f"(i32.load (i32.and (local.get $x) (i32.const 4092)))))"
        for k in range(12)
    )
    return (
        f'(func $filler{i} (export "filler{i}") (param $x i32) (result i32)\n'
        f"  (loop $again {steps} (br_if $again (i32.lt_u (local.get $x) (i32.const {i + 1000})))) "
        f"(local.get $x))\n"
    )


def component_wat(spec: Spec) -> str:
    """The core module of ``spec`` in WAT."""
    files: dict[str, tuple[int, int, int, int]] = {}
    record, blob = _result_blob(spec, files)
    consts = {
        "preopen": "preopen",
        "outside": spec.open_path or OUTSIDE,
        "opened": "opened",
        "started": "started",
        "log": "a line from the component's log\n",
        "big": "big.bin",
        "wrote": "wrote",
        "after": "after-sleep.txt",
    }
    where = {k: blob.string(v) for k, v in consts.items()}
    body = BEHAVIOURS[spec.behaviour].format(
        log_at=where["log"][0],
        log_len=where["log"][1],
        size=spec.size,
        sleep_ns=spec.sleep_ms * 1_000_000,
        after_at=where["after"][0],
        after_len=where["after"][1],
    )
    writes = "".join(
        f"(call $write_file (call $first_dir) (i32.const {n}) (i32.const {nl}) (i32.const {c}) (i32.const {cl}))\n"
        for n, nl, c, cl in files.values()
    )
    probe = spec.world in ("probe", "sleeper")
    helpers = _HELPERS + (
        _PROBE_HELPERS.format(
            preopen_at=where["preopen"][0],
            outside_at=where["outside"][0],
            outside_len=where["outside"][1],
            opened_at=where["opened"][0],
            started_at=where["started"][0],
            port=spec.connect[1],
            big_at=where["big"][0],
            big_len=where["big"][1],
            wrote_at=where["wrote"][0],
            a=spec.connect[0][0],
            b=spec.connect[0][1],
            c=spec.connect[0][2],
            d=spec.connect[0][3],
        )
        if probe
        else ""
    )
    assert blob.start + len(blob.data) < _HEAP, "static data overflows into the heap"
    filler = "".join(_filler(i) for i in range(spec.bulk))
    imports = _IMPORTS if probe else _HTTP_IMPORT if spec.world == "http" else ""
    sleeper = ""
    if spec.world == "sleeper":
        imports += _CLOCK_IMPORTS
        sleeper = """
  (func $sleep (param $ns i64)
    (local $p i32)
    (local.set $p (call $subscribe (local.get $ns)))
    (call $block (local.get $p))
    (call $pollable_drop (local.get $p)))
"""
    return f"""(module
  {imports}
  (memory (export "cm32p2_memory") 2)
  (data (i32.const {_RESULT}) "{_wat_bytes(record)}")
  (data (i32.const {blob.start}) "{_wat_bytes(bytes(blob.data))}")
  {helpers}
  {sleeper}
  {filler}
  (func (export "cm32p2|murmur:tool/run@0.2|run") (param $dd i32) (param $dp i32) (param $dl i32)
      (param $ld i32) (param $lp i32) (param $ll i32) (result i32)
    {writes}
    {body}
    (i32.const {_RESULT}))
)
"""


def _build(spec: Spec, out: Path) -> None:
    wat = component_wat(spec)
    key = hashlib.sha256((WIT + wat + spec.world).encode()).hexdigest()[:24]
    cached = CACHE / f"{key}.wasm"
    if not cached.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        os.chmod(CACHE.parent, 0o755)
        work = CACHE / f".{key}.{os.getpid()}"
        work.mkdir()
        (work / "world.wit").write_text(WIT)
        (work / "core.wat").write_text(wat)
        subprocess.run(
            [
                WASM_TOOLS,
                "component",
                "embed",
                str(work / "world.wit"),
                str(work / "core.wat"),
                "--world",
                spec.world,
                "-o",
                str(work / "core.wasm"),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [WASM_TOOLS, "component", "new", str(work / "core.wasm"), "-o", str(work / "c.wasm")],
            check=True,
            capture_output=True,
        )
        os.replace(work / "c.wasm", cached)
        shutil.rmtree(work)
    shutil.copyfile(cached, out / f"{spec.name}.wasm")


def build_components(specs: Iterable[Spec], out: Path) -> None:
    """Build each component into ``out`` (``<name>.wasm``) with its sidecar ``<name>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        _build(spec, out)
        sidecar = {
            "description": spec.description or f"test component {spec.name}",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
        (out / f"{spec.name}.json").write_text(json.dumps(sidecar))
