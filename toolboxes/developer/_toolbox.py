"""The Developer toolbox (SPEC.md section 4, developer): one tool per listed capability.

Config: ``{"Name", "Description", "Capabilities": [...], "FileSandbox": {...} | None, "policy": {...}}``. Tool
names are ``developer_<Name>_<capability>`` with ``-`` as ``_``; only listed capabilities exist. Every path
goes
through the FileSandbox (:mod:`._access`, default ``AlwaysDeny``) before it is opened, and every result
carries
``state_effect`` and ``resource_id`` ``file:<canonical path>``. Edits rewrite the file in place through a journal
in the state folder (:func:`toolboxes._journal.write_in_place`: crash-safe, and no temporary file beside the target,
so a file granted by ``FileExactly`` can be edited); journals a killed worker left are replayed or discarded when
the toolbox opens.
Edit sessions and snapshots live in the worker's state folder, per caller session (:mod:`._store`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from toolboxes._hints import DESTRUCTIVE, READ_ONLY
from toolboxes._journal import JournalReport, recover, write_in_place
from toolboxes._names import CAPABILITY_PROPERTY, capability_refusal, tool_name
from toolboxes._reaper import Reaper
from toolboxes._result import ToolResult
from toolboxes._toolbox import CallContext, ToolSpec, WorkerEnv

from ..bash import BashSettings, ScriptRunner
from . import _ops, _ops_meta
from ._access import Access, Gate
from ._agent_check import load_agent_schema
from ._files import TextFile, load_text, refusal
from ._specs import SPEC_NAMES

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CAPABILITIES", "DeveloperToolbox", "open_toolbox"]

_PATH = {"type": "string", "description": "Path of the file (absolute, or relative to the agent file's folder)."}
CAPABILITIES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "read-file-range": (
        "Read lines of a text file as 'N<TAB>line' with a snapshotRef (MD5) for later writes.",
        {
            "path": _PATH,
            "ranges": {"type": "string", "description": "N, N-M, comma lists, or whole (default)."},
            "session_id": {"type": "string"},
            "metadata_only": {"type": "boolean"},
        },
        ["path"],
    ),
    "write-file-range": (
        "Replace, insert (head, tail, N+) or delete (empty block) line ranges of a text file; "
        "with session_id, stage edits against the original numbering until commit.",
        {
            "path": _PATH,
            "ranges": {"type": "string"},
            "contentBlocks": {"type": "array", "items": {"type": "string"}},
            "expected_snapshot_ref": {"type": "string"},
            "session_id": {"type": "string"},
            "commit": {"type": "boolean"},
        },
        ["path", "ranges", "contentBlocks"],
    ),
    "patch-file": (
        "Apply a unified diff to one file; every hunk is checked before any is applied.",
        {"path": _PATH, "patch": {"type": "string"}, "expected_snapshot_ref": {"type": "string"}},
        ["path", "patch"],
    ),
    "restore-file": (
        "Restore a file to a snapshot taken when you read or wrote it.",
        {"path": _PATH, "snapshot_ref": {"type": "string"}},
        ["path", "snapshot_ref"],
    ),
    "show-spec": (
        "Show a specification: bash-tools, agent or policy.",
        {"spec_name": {"type": "string", "enum": list(SPEC_NAMES)}},
        ["spec_name"],
    ),
    "validate-tool": ("Run a bash tool's describe and check its output.", {"path": _PATH}, ["path"]),
    "validate-agent": ("Check an agent file.", {"path": _PATH}, ["path"]),
    "create-agent": (
        "Create an agent file from a template (refuses to overwrite).",
        {
            "path": _PATH,
            "slug": {"type": "string"},
            "announce": {"type": "string"},
            "modelUrl": {"type": "string"},
            "modelName": {"type": "string"},
            "apiKeyId": {"type": "string"},
            "flavor": {"type": "string"},
            "systemPrompt": {"type": "array", "items": {"type": "string"}},
        },
        ["path", "slug"],
    ),
    "create-tool": (
        "Create a bash or python tool from the template (refuses to overwrite).",
        {
            "path": _PATH,
            "language": {"type": "string", "enum": ["bash", "python"]},
            "slug": {"type": "string"},
            "description": {"type": "string"},
        },
        ["path", "language"],
    ),
}


#: MCP annotations by capability (docs/MCP.md): reads are read-only, edits may overwrite; validate-tool runs a tool's
#: describe (code), so it gets MCP's defaults.
_HINTS: dict[str, dict[str, Any]] = {
    "read-file-range": READ_ONLY,
    "show-spec": READ_ONLY,
    "validate-agent": READ_ONLY,
    "write-file-range": DESTRUCTIVE,
    "patch-file": DESTRUCTIVE,
    "restore-file": DESTRUCTIVE,
    "create-agent": DESTRUCTIVE,
    "create-tool": DESTRUCTIVE,
}


class DeveloperToolbox:
    """The tools of one DeveloperToolbox. Writes are serialised by one lock; reads run concurrently."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv, clock: Callable[[], float] = time.time) -> None:
        name = config.get("Name")
        if not isinstance(name, str) or not name:
            raise ValueError("DeveloperToolbox needs a Name")
        caps = config.get("Capabilities") or []
        unknown = [c for c in caps if c not in CAPABILITIES]
        if unknown:
            raise ValueError(
                f"DeveloperToolbox {name}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}"
            )
        self.name = name
        self.description = str(config.get("Description") or "Development tools")
        policy = config.get("policy") or {}
        self.gate = Gate(config.get("FileSandbox"), policy.get("base_dir"))
        limits = policy.get("limits") or {}
        self.output_bytes = int(policy.get("output_bytes", limits.get("output_bytes") or 1024 * 1024))
        self.state_dir = env.state_dir
        self.journal_dir = os.path.join(env.state_dir, "write-journal")
        self.clock = clock
        self.lock = threading.Lock()
        self.by_tool = {tool_name("developer", name, c): c for c in caps}
        #: validate-tool runs describe as the bash toolbox does (settings from the same policy keys; its reaper
        #: makes this worker a child subreaper, as the bash toolbox's does)
        self.describe_runner: ScriptRunner | None = None
        if "validate-tool" in caps:
            self.describe_runner = ScriptRunner(BashSettings.from_policy(policy), env.workdir, Reaper(subreaper=True))
        #: the agent file's JSON Schema (show-spec agent, validate-agent), read when one of them is listed
        self.agent_schema: dict[str, Any] = {}
        if {"show-spec", "validate-agent"} & set(caps):
            try:
                self.agent_schema = load_agent_schema()
            except (OSError, ValueError) as exc:
                raise ValueError(f"DeveloperToolbox {name}: the agent file's schema cannot be read: {exc}") from exc

    def tools(self) -> list[ToolSpec]:
        out = []
        for tool, cap in self.by_tool.items():
            text, props, required = CAPABILITIES[cap]
            schema = {
                "type": "object",
                "properties": {**props, "capability": CAPABILITY_PROPERTY},
                "required": required,
                "additionalProperties": False,
            }
            out.append(ToolSpec(tool, f"{self.description}: {text}", schema, hints=dict(_HINTS.get(cap, {}))))
        return out

    def load_errors(self) -> list[dict[str, str]]:
        return []

    def close(self) -> None:
        if self.describe_runner is not None:
            self.describe_runner.reaper.close()

    def write_file(self, path: str, content: bytes, *, create_mode: int | None = None) -> None:
        """Give the allowed file ``path`` the content ``content`` in place, crash-safely (``toolboxes._journal``:
        no temporary file beside it, so a file granted alone can be edited). ``create_mode``: create it."""
        write_in_place(path, content, self.journal_dir, create_mode=create_mode)

    def recover_writes(self) -> list[JournalReport]:
        """Finish or discard the edits a killed worker left in its journal (at start, before any call)."""
        return recover(self.journal_dir, lambda p, size: self.gate.check(p, for_write=True, size=size).allowed)

    def access(self, path: Any, *, for_write: bool, size: int | None = None) -> Access:
        """The FileSandbox check every path goes through."""
        return self.gate.check(path, for_write=for_write, size=size)

    def read_text(self, path: Any) -> tuple[str, TextFile] | ToolResult:
        """Check ``path`` for reading and load it as text: ``(canonical path, text)``, or the refusal to return."""
        acc = self.access(path, for_write=False)
        if not acc.allowed:
            return refusal(acc.message, acc.path)
        text = load_text(acc.path)
        if isinstance(text, str):
            return refusal(text, acc.path)
        return acc.path, text

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        cap = self.by_tool.get(tool)
        if cap is None:
            return ToolResult.error(f"unknown tool {tool!r}: this toolbox offers {', '.join(self.by_tool)}")
        refused = capability_refusal(args.get("capability"), cap, {c: t for t, c in self.by_tool.items()})
        if refused is not None:
            return ToolResult.error(refused)
        op = "op_" + cap.replace("-", "_")
        handler = getattr(_ops, op, None) or getattr(_ops_meta, op)
        try:
            result: ToolResult = handler(self, args, ctx)
            return result
        except OSError as exc:
            path = str(args.get("path", ""))
            return refusal(f"{cap} on {path}: {exc.strerror or exc} (the system refused)", path, status="failed")

    # -- shared helpers for _ops
    # -------------------------------------------------------------------------------
    def json_result(
        self,
        value: dict[str, Any],
        path: str,
        effect: str,
        summary: str,
        status: str = "passed",
        truncated: bool = False,
    ) -> ToolResult:
        result = ToolResult.json(value, status=status, summary=summary, truncated=truncated)  # type: ignore[arg-type]
        return result.with_meta("state_effect", effect).with_meta("resource_id", f"file:{path}")

    def dumps(self, value: Any) -> str:
        return json.dumps(value, indent=2) + "\n"

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> DeveloperToolbox:
    """Open the toolbox described by ``config``. Raises ``ValueError`` on an unknown capability or no Name."""
    toolbox = DeveloperToolbox(config, env)
    for report in toolbox.recover_writes():
        print(
            f"developer {toolbox.name}: journal {os.path.basename(report.journal)} {report.action}"
            f"{' ' + report.target if report.target else ''}{': ' + report.reason if report.reason else ''}",
            file=sys.stderr,
        )
    return toolbox
