"""The in-place write journal and the sweep of atomic-write leftovers (pure file operations, no worker)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING

import pytest

from toolboxes import atomic_write, is_temporary, sweep_temporaries
from toolboxes._atomic import make_temporary
from toolboxes._journal import recover, write_in_place

if TYPE_CHECKING:
    from pathlib import Path


def _journal(journal_dir: Path, target: Path, content: bytes, *, cut: int = 0) -> Path:
    header = (
        json.dumps(
            {
                "path": str(target),
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
                "create_mode": None,
            }
        ).encode()
        + b"\n"
    )
    journal_dir.mkdir(exist_ok=True)
    path = journal_dir / "j1.journal"
    path.write_bytes((header + content)[: len(header) + len(content) - cut])
    return path


def test_write_in_place_keeps_the_inode_and_leaves_no_journal(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old content that is longer")
    inode = target.stat().st_ino
    write_in_place(str(target), b"new", str(tmp_path / "j"))
    assert target.read_bytes() == b"new" and target.stat().st_ino == inode
    assert os.listdir(tmp_path / "j") == []


def test_create_refuses_an_existing_file_and_removes_its_journal(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        write_in_place(str(target), b"new", str(tmp_path / "j"), create_mode=0o644)
    assert target.read_bytes() == b"keep" and os.listdir(tmp_path / "j") == []


def test_a_complete_journal_is_replayed_over_a_mix(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"NEWold-old-old")  # killed mid-write
    journal = _journal(tmp_path / "j", target, b"NEW-NEW")
    [report] = recover(str(tmp_path / "j"), lambda p, n: True)
    assert (report.action, report.target) == ("replayed", str(target))
    assert target.read_bytes() == b"NEW-NEW" and not journal.exists()


def test_an_incomplete_journal_is_discarded_and_the_file_untouched(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    _journal(tmp_path / "j", target, b"new content", cut=3)  # killed while writing the journal
    [report] = recover(str(tmp_path / "j"), lambda p, n: True)
    assert report.action == "discarded" and "incomplete" in report.reason
    assert target.read_bytes() == b"old" and os.listdir(tmp_path / "j") == []


def test_a_journal_the_sandbox_refuses_is_not_replayed(tmp_path: Path) -> None:
    target = tmp_path / "outside"
    target.write_bytes(b"old")
    _journal(tmp_path / "j", target, b"planted")
    seen: list[tuple[str, int]] = []
    [report] = recover(str(tmp_path / "j"), lambda p, n: seen.append((p, n)) is not None)
    assert report.action == "refused" and seen == [(str(target), 7)]
    assert target.read_bytes() == b"old"


def test_sweep_removes_only_temporaries_of_atomic_writes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    fd, tmp = make_temporary(str(tmp_path / "sub" / "state.json"))
    os.close(fd)
    for name in ("keep.tmp", ".keep.abc.tmp", "data.json"):
        (tmp_path / "sub" / name).write_text("x")
    (tmp_path / "sub" / (os.path.basename(tmp) + "-wal")).write_text("x")  # a SQLite copy's sidecar
    atomic_write(str(tmp_path / "sub" / "done.json"), b"{}")
    removed = sweep_temporaries(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == sorted(
        [os.path.basename(tmp), os.path.basename(tmp) + "-wal"]
    )
    assert sorted(os.listdir(tmp_path / "sub")) == [".keep.abc.tmp", "data.json", "done.json", "keep.tmp"]
    assert is_temporary(os.path.basename(tmp)) and not is_temporary("x.~atomic-1.tmp")
