"""The skills toolbox, in process, with real skill folders and real scripts."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from labkit import describe_json, make_skill, skill_md, write_script
from toolboxes import CallContext, WorkerEnv
from toolboxes.skills import (
    ConfigError,
    FrontmatterError,
    SkillsToolbox,
    open_toolbox,
    parse_skill_md,
)

from .test_bash import FakeChannel

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

PDF_SKILL = """---
name: pdf-processing
description: Extract and manipulate PDF files
license: MIT
compatibility: Linux, macOS
metadata:
  author: team-pdf
  version: "1.0"
---

# PDF Processing

This skill provides tools for working with PDF documents.
"""


@pytest.fixture
def skills_root(sandbox_tmp: Path) -> Path:
    root = sandbox_tmp / "skills"
    root.mkdir()
    return root


class Opener:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.opened: list[SkillsToolbox] = []
        self.channel = FakeChannel()  # shared by the boxes opened; `changed` is what watching tests wait on

    def __call__(self, roots: list[Path], auto: list[str] | None = None, **extra: Any) -> SkillsToolbox:
        config: dict[str, Any] = {
            "skillSources": [{"tag": "SkillDirectory", "contents": str(r)} for r in roots],
            "autoEnableSkills": auto or [],
            "policy": {"limits": {"wall_time_s": 10}},
            **extra,
        }
        box = open_toolbox(config, WorkerEnv("skills", str(self.workdir), str(self.workdir), self.channel))
        self.opened.append(box)
        return box


@pytest.fixture
def open_skills(sandbox_tmp: Path) -> Iterator[Opener]:
    work = sandbox_tmp / "work"
    work.mkdir()
    opener = Opener(work)
    yield opener
    for box in opener.opened:
        box.close()


def ctx(session: str, tool: str = "t", enabled: list[str] | None = None) -> CallContext:
    """A call of ``session``; ``enabled``: the skills the supervisor says the session enabled (``None``: it sent
    no list, as in process)."""
    extra = {} if enabled is None else {"enabled_skills": enabled}
    return CallContext(call_id=1, tool=tool, session_id=session, extra=extra)


# -- frontmatter (pure) --------------------------------------------------------------------------------------
def test_the_seed_skill_md_parses() -> None:
    meta = parse_skill_md(PDF_SKILL)
    assert meta.name == "pdf-processing"
    assert meta.license == "MIT"
    assert meta.compatibility == "Linux, macOS"
    assert meta.metadata == {"author": "team-pdf", "version": "1.0"}
    assert meta.instructions.startswith("# PDF Processing")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# no frontmatter\n", "must start with a '---' line"),
        ("---\nname: x\ndescription: y\n", "not closed"),
        ("---\nname: [x\n---\n", "not valid YAML"),
        ("---\n- a\n---\n", "must be a YAML map"),
        ("---\ndescription: y\n---\n", "frontmatter.name is required"),
        ("---\nname: Bad_Name\ndescription: y\n---\n", "frontmatter.name 'Bad_Name' must be"),
        ("---\nname: -lead\ndescription: y\n---\n", "no leading, trailing or double '-'"),
        ("---\nname: trail-\ndescription: y\n---\n", "no leading, trailing or double '-'"),
        ("---\nname: dou--ble\ndescription: y\n---\n", "no leading, trailing or double '-'"),
        ("---\nname: " + "a" * 65 + "\ndescription: y\n---\n", "must be 1-64"),
        ("---\nname: x\n---\n", "description is required"),
        ("---\nname: x\ndescription: " + "d" * 1025 + "\n---\n", "the limit is 1024"),
        ("---\nname: x\ndescription: y\nmetadata:\n  version: 1.0\n---\n", "metadata.version must be a string"),
        ("---\nname: x\ndescription: y\nlicense: 3\n---\n", "frontmatter.license must be a string"),
        ("---\nname: x\ndescripton: y\n---\n", "unknown key(s) descripton"),
    ],
)
def test_invalid_frontmatter_is_refused_with_the_field(text: str, message: str) -> None:
    with pytest.raises(FrontmatterError) as info:
        parse_skill_md(text)
    assert message in str(info.value)


# -- the toolbox -------------------------------------------------------------------------------------------
def test_meta_tools_always_listed_and_script_tools_session_scoped(open_skills: Opener, skills_root: Path) -> None:
    make_skill(skills_root, "pdf", PDF_SKILL, scripts={"extract.sh": "extract-text"})
    box = open_skills([skills_root])
    assert box.load_errors() == []
    tools = {t.name: t for t in box.tools()}
    assert set(tools) == {
        "skill_list",
        "skill_describe_pdf-processing",
        "skill_enable_pdf-processing",
        "skill_disable_pdf-processing",
        "skill_pdf-processing_extract-text",
    }
    script = tools["skill_pdf-processing_extract-text"]
    assert script.annotations == {"session_scoped": True, "skill": "pdf-processing"}
    assert script.input_schema["required"] == ["file"]
    assert not tools["skill_enable_pdf-processing"].annotations.get("session_scoped")
    assert [t.name for t in box.tools_for([])] == [
        "skill_list",
        "skill_describe_pdf-processing",
        "skill_enable_pdf-processing",
        "skill_disable_pdf-processing",
    ]


def test_the_list_tool_lists_every_skill_and_what_is_enabled_in_the_session(
    open_skills: Opener, skills_root: Path
) -> None:
    # the seed's computeSkillTools: listTool ++ metaTools ++ scriptTools
    make_skill(skills_root, "core", skill_md("core-utils"), scripts={"hello": "hello"})
    make_skill(skills_root, "pdf", PDF_SKILL, scripts={"extract.sh": "extract-text"})
    box = open_skills([skills_root], auto=["core-utils"])
    assert box.tools()[0].name == "skill_list"
    listed = box.call("skill_list", {}, ctx("s1", enabled=["core-utils", "pdf-processing"]))
    assert listed.status == "passed"
    assert [(s["name"], s["enabled"], s["tools"]) for s in listed.structured["skills"]] == [
        ("core-utils", True, ["skill_core-utils_hello"]),
        ("pdf-processing", True, ["skill_pdf-processing_extract-text"]),
    ]
    assert [s["enabled"] for s in box.call("skill_list", {}, ctx("s2")).structured["skills"]] == [True, False]
    assert "This skill" not in listed.data and listed.structured["skills"][1]["description"]


def test_a_script_runs_only_when_the_calls_list_has_its_skill(open_skills: Opener, skills_root: Path) -> None:
    """The worker keeps no session state: the enabled skills come with each call (the supervisor's session store)."""
    make_skill(skills_root, "pdf", PDF_SKILL, scripts={"extract.sh": "extract-text"})
    box = open_skills([skills_root])
    tool = "skill_pdf-processing_extract-text"
    refused = box.call(tool, {"file": "a.pdf"}, ctx("s1", enabled=[]))
    assert refused.status == "error"
    assert "not enabled in this session; call skill_enable_pdf-processing first" in (refused.summary or "")

    enabled = box.call("skill_enable_pdf-processing", {}, ctx("s1", enabled=[]))
    assert enabled.status == "passed"
    assert enabled.structured == {"skill": "pdf-processing", "enabled": True, "changed": True, "tools": [tool]}
    assert "This skill provides tools" in (enabled.data or "")
    again = box.call("skill_enable_pdf-processing", {}, ctx("s1", enabled=["pdf-processing"]))
    assert again.structured["changed"] is False  # judged against the list the call came with

    ran = box.call(tool, {"file": "a.pdf"}, ctx("s1", enabled=["pdf-processing"]))
    assert ran.status == "passed", ran
    assert (ran.data or "").endswith("extract.sh on a.pdf in session s1\n")
    assert tool in [t.name for t in box.tools_for(["pdf-processing"])]
    assert tool not in [t.name for t in box.tools_for([])]
    # Enabling remembered nothing here: the next call without the skill in its list is refused.
    assert box.call(tool, {"file": "a.pdf"}, ctx("s1", enabled=[])).status == "error"
    disabled = box.call("skill_disable_pdf-processing", {}, ctx("s1", enabled=["pdf-processing"]))
    assert disabled.structured["changed"] is True and disabled.structured["enabled"] is False


def test_auto_enable_skills_are_on_in_every_new_session(open_skills: Opener, skills_root: Path) -> None:
    make_skill(skills_root, "core", skill_md("core-utils"), scripts={"hello": "hello"})
    make_skill(skills_root, "other", skill_md("other"), scripts={"hi": "hi"})
    box = open_skills([skills_root], auto=["core-utils"])
    for session in ("s1", "s2"):
        assert box.call("skill_core-utils_hello", {"file": "x"}, ctx(session)).status == "passed"
        assert box.call("skill_other_hi", {"file": "x"}, ctx(session)).status == "error"
    # a session whose list (from the supervisor) lacks an auto-enabled skill does not have it
    assert box.call("skill_core-utils_hello", {"file": "x"}, ctx("s1", enabled=[])).status == "error"
    assert box.call("skill_core-utils_hello", {"file": "x"}, ctx("s1", enabled=["core-utils"])).status == "passed"


def test_describe_lists_metadata_instructions_scripts_and_references(open_skills: Opener, skills_root: Path) -> None:
    make_skill(
        skills_root,
        "deep/nested/pdf",
        PDF_SKILL,
        scripts={"extract.sh": "extract-text"},
        references={"references/forms.md": "forms", "references/api/reference.md": "api"},
    )
    box = open_skills([skills_root])
    result = box.call("skill_describe_pdf-processing", {}, ctx("s1"))
    assert result.status == "passed"
    value = json.loads(result.data or "")
    assert value["name"] == "pdf-processing"
    assert value["metadata"] == {"author": "team-pdf", "version": "1.0"}
    assert value["instructions"].startswith("# PDF Processing")
    assert value["enabled"] is False
    assert [s["tool"] for s in value["scripts"]] == ["skill_pdf-processing_extract-text"]
    assert value["references"] == ["references/api/reference.md", "references/forms.md"]
    assert value["path"] == str(skills_root / "deep/nested/pdf")


def test_bad_skills_and_scripts_are_load_errors_and_the_rest_load(open_skills: Opener, skills_root: Path) -> None:
    make_skill(skills_root, "good", skill_md("good"), scripts={"ok": "ok"})
    make_skill(skills_root, "bad", "---\nname: BAD\ndescription: x\n---\n")
    make_skill(skills_root, "zz-dup", skill_md("good"))  # searched after "good"
    broken = make_skill(skills_root, "broken-script", skill_md("half"), scripts={"fine": "fine"})
    (broken / "scripts" / "broken").write_text("#!/bin/bash\necho '{nope'\n")
    (broken / "scripts" / "broken").chmod(0o755)
    (skills_root / ".git" / "hidden").mkdir(parents=True)
    (skills_root / ".git" / "hidden" / "SKILL.md").write_text("garbage")
    box = open_skills([skills_root], auto=["missing"])
    names = {t.name for t in box.tools()}
    assert "skill_good_ok" in names
    assert "skill_half_fine" in names
    assert "skill_describe_half" in names
    errors = {e["source"]: e["message"] for e in box.load_errors()}
    assert "frontmatter.name 'BAD'" in errors[str(skills_root / "bad" / "SKILL.md")]
    assert "already used by" in errors[str(skills_root / "zz-dup")]
    assert "invalid JSON" in errors[str(broken / "scripts" / "broken")]
    assert "'missing', which is not a loaded skill" in errors["autoEnableSkills"]
    assert not any(".git" in source for source in errors)


def test_git_sources_must_arrive_cloned_and_config_is_checked(open_skills: Opener, skills_root: Path) -> None:
    make_skill(skills_root, "good", skill_md("good"))
    box = open_skills(
        [skills_root],
        skillSources=[
            {"tag": "SkillDirectory", "contents": str(skills_root)},
            {"tag": "SkillGitRepo", "contents": {"url": "file:///srv/skills.git", "subdir": "x"}},
        ],
    )
    assert "skill_describe_good" in {t.name for t in box.tools()}
    assert "was not cloned by the supervisor" in box.load_errors()[0]["message"]
    with pytest.raises(ConfigError, match="absolute path"):
        open_skills([], skillSources=[{"tag": "SkillDirectory", "contents": "relative"}])
    with pytest.raises(ConfigError, match="not a valid skill name"):
        open_skills([], auto=["Not Valid"])


def test_script_tools_share_the_bash_limits(open_skills: Opener, skills_root: Path) -> None:
    skill = make_skill(skills_root, "slow", skill_md("slow"))
    (skill / "scripts").mkdir()
    write_script(skill / "scripts", "wait", describe_json("wait"), "sleep 300")
    box = open_skills([skills_root], auto=["slow"], policy={"limits": {"wall_time_s": 0.5}})
    result = box.call("skill_slow_wait", {}, ctx("s"))
    assert result.status == "error"
    assert "did not finish within its time limit of 0.5 s" in (result.summary or "")


# -- watching ------------------------------------------------------------------------------------------------------
def wait_until(channel: FakeChannel, done: Callable[[], bool], timeout: float = 2.0) -> None:
    """Wait on ``tools_changed`` until ``done()`` (a change seen over two polls comes as two calls)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert channel.changed.wait(max(0.0, deadline - time.monotonic())), "no tools_changed in time"
        channel.changed.clear()


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file renamed over it), as editors save."""
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


def move_in(staging: Path, folder: str, root: Path, skill_text: str, scripts: dict[str, str]) -> Path:
    """Build a skill under ``staging``, then rename it into ``root`` (so the watcher never sees half of it)."""
    built = make_skill(staging, folder, skill_text, scripts=scripts)
    return Path(shutil.move(str(built), str(root / folder)))


def test_added_changed_and_removed_skills_update_the_tools(
    open_skills: Opener, skills_root: Path, sandbox_tmp: Path
) -> None:
    staging = sandbox_tmp / "staging"
    log = sandbox_tmp / "describes.log"
    core = make_skill(skills_root, "core", skill_md("core-utils"))
    (core / "scripts").mkdir()
    counted = describe_json("hello")
    write_script(core / "scripts", "hello", counted, "echo hello")
    script = core / "scripts" / "hello"  # counts its describes, to show unchanged scripts are not asked again
    script.write_text(script.read_text().replace("then\n", f"then\necho x >> {log}\n", 1))
    box = open_skills([skills_root], policy={"watch_interval_s": 0.1})
    channel = open_skills.channel
    on = ["core-utils", "pdf-tools"]  # what the supervisor would send for a session that enabled both

    def listed(enabled: list[str] | None = None) -> set[str]:
        return {t.name for t in (box.tools() if enabled is None else box.tools_for(enabled))}

    # Added: a new folder with a SKILL.md.
    move_in(staging, "pdf", skills_root, skill_md("pdf-tools"), {"extract": "extract"})
    wait_until(channel, lambda: "skill_pdf-tools_extract" in listed())
    assert {"skill_describe_pdf-tools", "skill_enable_pdf-tools"} <= listed(["core-utils"])
    assert "skill_core-utils_hello" in listed(["core-utils"])
    assert box.call("skill_core-utils_hello", {}, ctx("s1", enabled=on)).status == "passed"

    # Changed: a SKILL.md (new description) and a script (new slug).
    replace_text(core / "SKILL.md", skill_md("core-utils", "says hello, revised"))
    pdf_scripts = skills_root / "pdf" / "scripts"
    arg = {
        "name": "file",
        "description": "the file",
        "type": "path",
        "backing_type": "string",
        "arity": "single",
        "mode": "positional",
    }
    write_script(pdf_scripts, ".extract.new", describe_json("extract-v2", [arg]), 'echo "v2 on $1"')
    os.replace(pdf_scripts / ".extract.new", pdf_scripts / "extract")
    enable_core = "skill_enable_core-utils"
    wait_until(
        channel,
        lambda: (
            "skill_pdf-tools_extract-v2" in listed()
            and "revised" in next(t.description for t in box.tools() if t.name == enable_core)
        ),
    )
    assert "skill_pdf-tools_extract" not in listed()
    assert {"skill_core-utils_hello", "skill_pdf-tools_extract-v2"} <= listed(on)  # changed skills stay enabled
    assert "skill_pdf-tools_extract-v2" not in listed([])
    assert box.call("skill_pdf-tools_extract-v2", {"file": "a"}, ctx("s1", enabled=on)).data == "v2 on a\n"
    described = json.loads(box.call("skill_describe_core-utils", {}, ctx("s1", enabled=on)).data or "")
    assert described["description"] == "says hello, revised"
    assert described["enabled"] is True

    # Removed: gone from the list; calls are refused (the supervisor also forgets it in every session: e2e test).
    shutil.rmtree(skills_root / "pdf")
    wait_until(channel, lambda: not any("pdf-tools" in name for name in listed()))
    refused = box.call("skill_pdf-tools_extract-v2", {"file": "a"}, ctx("s1", enabled=on))
    assert refused.status == "error" and "may have been removed" in (refused.summary or "")
    assert "skill_core-utils_hello" in listed(on)
    assert box.load_errors() == []

    assert log.read_text() == "x\n"  # described once: the reloads reused its unchanged description


def test_a_broken_skill_md_becomes_a_load_error_and_the_other_skills_stay(
    open_skills: Opener, skills_root: Path
) -> None:
    make_skill(skills_root, "good", skill_md("good"), scripts={"ok": "ok"})
    other = make_skill(skills_root, "other", skill_md("other"), scripts={"run": "run"})
    box = open_skills([skills_root], auto=["good"], policy={"watch_interval_s": 0.1})
    channel = open_skills.channel
    before = {t.name for t in box.tools()}
    assert "skill_other_run" in before

    replace_text(other / "SKILL.md", "---\nname: Other\ndescription: x\n---\n")
    wait_until(channel, lambda: box.load_errors() != [])
    [error] = box.load_errors()
    assert error["source"] == str(other / "SKILL.md")
    assert "frontmatter.name 'Other'" in error["message"]
    assert {t.name for t in box.tools()} == {n for n in before if "other" not in n}
    assert box.call("skill_good_ok", {"file": "x"}, ctx("s")).status == "passed"

    replace_text(other / "SKILL.md", skill_md("other"))
    wait_until(channel, lambda: box.load_errors() == [])
    assert {t.name for t in box.tools()} == before
