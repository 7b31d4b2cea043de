"""How a failed write to an MCP server is explained (``toolboxes/mcp/_connection.py``): a server that printed why
and exited is usually seen first by the write of the next request (a broken pipe), before the reader of its stdout
has reaped it. The request must fail with how it ended and its stderr, not only "closed its stdin" (the load error
of tests/supervisor/frontends/test_mcp_logging.py lost its stderr under load). A real server process, unconfined."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import pytest

from toolboxes.mcp._connection import Connection
from toolboxes.mcp._errors import ServerGone

if TYPE_CHECKING:
    from pathlib import Path

WHY = "the store's config file is missing"
#: closes its stdin, says why, then exits a moment later: the write sees the broken pipe before the exit is reaped
SERVER = f"import os, sys, time; os.close(0); print({WHY!r}, file=sys.stderr, flush=True); time.sleep(0.3); sys.exit(3)"


def test_a_write_to_a_server_that_closed_its_stdin_names_its_exit_and_stderr(tmp_path: Path) -> None:
    conn = Connection([sys.executable, "-c", SERVER], dict(os.environ), str(tmp_path), "MCP server 'store'", print)
    try:
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{conn.pid}/fd/0"):  # its stdin closed (the process's state: polled)
            assert time.monotonic() < deadline, "the server did not close its stdin"
            time.sleep(0.01)
        with pytest.raises(ServerGone) as gone:
            conn.request("initialize", {}, deadline=time.monotonic() + 30)
        assert str(gone.value) == f"MCP server 'store' exited with status 3; its stderr: {WHY}"
    finally:
        conn.close()
