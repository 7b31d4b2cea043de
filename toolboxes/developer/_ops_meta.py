"""The Developer capabilities that are not line edits: show-spec, validate-tool, validate-agent, create-tool,
create-agent. Same contract as :mod:`._ops`: ``op_<capability>(toolbox, args, ctx) -> ToolResult``."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from toolboxes._result import ToolResult

from ._agent_check import check_agent
from ._agent_spec import agent_spec
from ._files import refusal
from ._specs import SPEC_NAMES, SPECS, agent_template, tool_template
from ._store import snapshot_ref
from ._validate import check_describe, run_describe

if TYPE_CHECKING:
    from toolboxes._toolbox import CallContext

    from ._toolbox import DeveloperToolbox

__all__ = ["op_create_agent", "op_create_tool", "op_show_spec", "op_validate_agent", "op_validate_tool"]


def op_show_spec(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    name = args.get("spec_name")
    if name not in SPEC_NAMES:
        return (
            ToolResult.error(f"unknown spec {name!r}; choose one of {', '.join(SPEC_NAMES)}")
            .with_meta("state_effect", "read")
            .with_meta("resource_id", "spec:?")
        )
    text = agent_spec(tb.agent_schema) if name == "agent" else SPECS[str(name)]
    return (
        ToolResult.passed(text, summary=f"spec {name}")
        .with_meta("state_effect", "read")
        .with_meta("resource_id", f"spec:{name}")
    )


def op_validate_tool(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    acc = tb.access(args.get("path"), for_write=False)
    if not acc.allowed:
        return refusal(acc.message, acc.path)
    if not os.path.isfile(acc.path):
        return refusal(f"{acc.path} is not a file", acc.path)
    assert tb.describe_runner is not None  # made when validate-tool is listed
    value, problem = run_describe(tb.describe_runner, acc.path)
    errors = [{"path": "", "message": problem}] if problem else check_describe(value)
    out = {"path": acc.path, "valid": not errors, "errors": errors, "describe": value}
    summary = "valid" if not errors else f"{len(errors)} problem(s): {errors[0]['path']} {errors[0]['message']}"
    return tb.json_result(out, acc.path, "read", summary, status="passed" if not errors else "failed")


def op_validate_agent(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    opened = tb.read_text(args.get("path"))
    if isinstance(opened, ToolResult):
        return opened
    path, text = opened
    warnings: list[Any]
    try:
        data = json.loads(text.raw)
    except ValueError as exc:
        errors, warnings, data = [{"path": "", "message": f"not JSON: {exc}"}], [], None
    else:
        errors, warnings = check_agent(data, tb.agent_schema)
    contents = data.get("contents", data) if isinstance(data, dict) else {}
    out = {
        "path": path,
        "valid": not errors,
        "errors": errors,
        "warnings": warnings,
        "slug": contents.get("slug") if isinstance(contents, dict) else None,
    }
    summary = "valid" if not errors else f"{len(errors)} problem(s): {errors[0]['path']} {errors[0]['message']}"
    return tb.json_result(out, path, "read", summary, status="passed" if not errors else "failed")


def _create(tb: DeveloperToolbox, path: str, content: str, mode: int, kind: str) -> ToolResult:
    data = content.encode()
    acc = tb.access(path, for_write=True, size=len(data))
    if not acc.allowed:
        return refusal(acc.message, acc.path)
    with tb.lock:
        if tb.exists(acc.path):
            return refusal(f"{acc.path} already exists; choose a new path (create-{kind} never overwrites)", acc.path)
        if not os.path.isdir(os.path.dirname(acc.path)):
            return refusal(f"the directory {os.path.dirname(acc.path)} does not exist", acc.path)
        tb.write_file(acc.path, data, create_mode=mode)
    value = {"path": acc.path, "created": True, "snapshotRef": snapshot_ref(data)}
    return tb.json_result(value, acc.path, "mutate", f"created {kind} {os.path.basename(acc.path)}")


def op_create_tool(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    path = str(args.get("path") or "")
    default_slug = os.path.splitext(os.path.basename(path))[0]
    try:
        content = tool_template(
            str(args.get("language")), str(args.get("slug") or default_slug), str(args.get("description") or "")
        )
    except ValueError as exc:
        return refusal(str(exc), path)
    return _create(tb, path, content, 0o755, "tool")


def op_create_agent(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    path = str(args.get("path") or "")
    try:
        value = agent_template(str(args.get("slug") or ""), args)
    except ValueError as exc:
        return refusal(str(exc), path)
    return _create(tb, path, tb.dumps(value), 0o644, "agent")
