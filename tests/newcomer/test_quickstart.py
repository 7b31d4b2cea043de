"""The README's quickstart, exactly as a new user types it (issue 25, items 4 and 5): read from README.md, run one
command at a time in one bash in a fresh clone, each command's output compared with what the README shows.

It installs the clone with pip into a FRESH venv made from ``/usr/bin/python3`` (a wheel built from the clone, no
editable install, no ``PYTHONPATH``: the installed package's shipped policies and examples are what ``init``
writes), writes the starting policy with ``init``, calls a confined tool from the CLI, over MCP on stdio and over
MCP Streamable HTTP with the MCP Inspector CLI (installed with npm as the README says, from npm's cache: the test
fetches nothing from npm), and stops the server.

The commands use the README's paths: the shell runs in a mount namespace of its own where ``/opt/agents-supervise``
(the venv), ``/srv`` (``init``'s folder) and ``/var/lib/agents-supervise`` (the state directory) are fresh tmpfs,
so the machine's own venv and state are untouched. pip reaches the package index as a user's would.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from typing import TYPE_CHECKING

import pytest

from tests.newcomer._readme import REPO, console_commands, output_matches, private_paths_argv

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.root, pytest.mark.slow]

PRIVATE = ["/opt/agents-supervise", "/srv", "/var/lib/agents-supervise"]
PREREQUISITES = ["python3-venv", "python3-dev", "gcc", "libcap-dev", "nodejs"]
COMMAND_TIMEOUT_S = 600


class Shell:
    """One bash, fed one command at a time; its stdout and stderr read as one stream."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its process group holds what it left running (a server started with &)
        )
        self._chunks: queue.Queue[bytes] = queue.Queue()
        self.buffer = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._send("exec 2>&1\n")

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read1(65536):
            self._chunks.put(chunk)
        self._chunks.put(b"")

    def _send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def _wait_for(self, done: re.Pattern[str] | None, until: object = None, timeout: float = COMMAND_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not (done.search(self.buffer) if done is not None else until()):  # type: ignore[operator]
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; the output so far:\n{self.buffer[-4000:]}"
            try:
                chunk = self._chunks.get(timeout=left)
            except queue.Empty:
                continue
            assert chunk, f"the shell ended; its output:\n{self.buffer[-4000:]}"
            self.buffer += chunk.decode(errors="replace")

    def run(self, number: int, command: str) -> tuple[int, list[str]]:
        """Run ``command``; its exit status and output lines."""
        self._send(f"{command}\nprintf '\\n@@done %d {number}@@\\n' $?\n")
        marker = re.compile(rf"\n@@done (\d+) {number}@@\n")
        self._wait_for(marker)
        match = marker.search(self.buffer)
        assert match is not None
        output, self.buffer = self.buffer[: match.start()], self.buffer[match.end() :]
        return int(match.group(1)), _lines(output)

    def wait_output(self, expected: list[str]) -> list[str]:
        """The output of a command left running (``&``) once it shows ``expected``; the lines are consumed."""
        self._wait_for(None, until=lambda: output_matches(expected, _lines(self.buffer)), timeout=180)
        lines, self.buffer = _lines(self.buffer), ""
        return lines

    def close(self) -> None:
        """End the shell and whatever it left running (its process group: SIGTERM, then SIGKILL)."""
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        assert self.process.stdin is not None and self.process.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        self._reader.join(timeout=30)
        self.process.stdout.close()


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def test_the_prerequisites_the_quickstart_names_are_what_it_needs() -> None:
    """The quickstart's prose names these Debian packages; the machine that runs it has them."""
    from tests.newcomer._readme import readme

    section = readme().split("## Quickstart", 1)[1].split("```console", 1)[0]
    assert f"apt-get install -y {' '.join(PREREQUISITES)} npm" in " ".join(section.split())
    for package in PREREQUISITES:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
        assert "install ok installed" in done.stdout, package


def test_the_quickstart_runs_as_the_readme_shows(sandbox_tmp: Path) -> None:
    with socket.socket() as probe:  # the quickstart serves on the README's address, in this machine's namespace
        if probe.connect_ex(("127.0.0.1", 8765)) == 0:
            pytest.fail("127.0.0.1:8765 is taken by another process: the quickstart's server cannot listen there")
    commands = console_commands("## Quickstart")
    assert commands[0][0].startswith("/usr/bin/python3 -m venv") and commands[-1][0] == "kill %1"
    clone = sandbox_tmp / "agents-supervise"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    npm = sandbox_tmp / "npm-global"  # `npm install -g` lands here, from npm's cache (npm_config_offline)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "PATH": f"{npm}/bin:/usr/local/bin:/usr/bin:/bin",
        "npm_config_prefix": str(npm),
        "npm_config_offline": "true",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    shell = Shell(private_paths_argv(PRIVATE, ["bash", "--norc", "--noprofile"]), clone, env)
    try:
        for number, (command, expected) in enumerate(commands):
            rc, lines = shell.run(number, command)
            if command.endswith("&"):
                lines += shell.wait_output(expected)
            shown = "\n".join(lines)
            if os.environ.get("QUICKSTART_DUMP"):
                with open(os.environ["QUICKSTART_DUMP"], "a") as dump:
                    dump.write(f"$ {command}\n{shown}\n")
            assert rc == 0, f"$ {command}\nexited {rc}:\n{shown[-4000:]}"
            assert not expected or output_matches(expected, lines), (
                f"$ {command}\nprinted:\n{shown[-4000:]}\nwhile README.md shows:\n" + "\n".join(expected)
            )
    finally:
        shell.close()
