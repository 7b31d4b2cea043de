"""What a new user reads and types, taken from the README itself (so the README and its tests cannot drift), and
a private place to type it in.

A newcomer's commands use the default paths (``/var/lib/agents-supervise``, ``/opt/agents-supervise/venv``,
``/srv/agents``). A test runs them unchanged inside a mount namespace of its own where each such path is a fresh
tmpfs (:func:`private_paths_argv`): nothing the test does reaches the machine's real state directory or the shared
venv, and no two tests share one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV_BIN = Path("/opt/agents-supervise/venv/bin")


def readme() -> str:
    return README.read_text()


def code_block_after(marker: str, language: str) -> str:
    """The text of the first ```` ```language ```` block that follows the first line holding ``marker``."""
    text = readme()
    start = text.index(marker)
    match = re.compile(rf"^```{re.escape(language)}\n(.*?)^```$", re.M | re.S).search(text, start)
    assert match is not None, f"no {language} block after {marker!r} in README.md"
    return match.group(1)


def command_line(prefix: str) -> str:
    """The README's command line that starts with ``prefix`` (its ``# comment`` cut off)."""
    for line in readme().splitlines():
        if line.startswith(prefix):
            return line.split("  #", 1)[0].strip()
    raise AssertionError(f"README.md has no command line starting with {prefix!r}")


def private_paths_argv(paths: list[str], argv: list[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own where each of ``paths`` is a fresh, empty tmpfs (mode 0755, so
    the workers' uids traverse it); each path is made on the host first when it is missing (an empty folder)."""
    for path in paths:
        os.makedirs(path, exist_ok=True)
    mounts = " && ".join(f'mount -t tmpfs -o mode=0755 agents-supervise-test "${{{i + 1}}}"' for i in range(len(paths)))
    script = f'{mounts} && shift {len(paths)} && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *paths, *argv]


def newcomer_env(**extra: str) -> dict[str, str]:
    """The environment of a shell after ``scripts/setup``: the venv's ``bin`` first on ``PATH``; this checkout's
    code imported (``PYTHONPATH``: the shared venv is an editable install of another checkout)."""
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO),
        **extra,
    }


def console_commands(heading: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of every ```` ```console ```` block of the README section ``heading`` (up to the next
    ``## `` heading), each with the output lines shown below it."""
    text = readme()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    commands: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```$", section, re.M | re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            else:
                assert commands, f"output before any command in {heading}: {line!r}"
                commands[-1][1].append(line)
    return commands


def _line_matches(expected: str, actual: str) -> bool:
    parts = [re.escape(p) for p in expected.rstrip().split("...")]
    return re.fullmatch(".*".join(parts), actual.rstrip(), re.S) is not None


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` lines as ``expected`` shows them: a line ``...`` stands for any lines (none too), ``...`` within
    a line for any text."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(output_matches(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and _line_matches(head, actual[0]) and output_matches(rest, actual[1:])
