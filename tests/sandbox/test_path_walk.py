"""``sandbox._path_walk``: paths a config file names, resolved as root without following a link someone else made."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from sandbox import UnsafeTreeError, resolve_named_path

if TYPE_CHECKING:
    from pathlib import Path


def test_a_path_that_does_not_exist_yet_resolves_as_realpath_does(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    for asked in ("link/new.txt", "link/a/../b", "real/x/y", "link"):
        resolved = resolve_named_path(str(tmp_path / asked), None)
        assert resolved.canonical == os.path.realpath(tmp_path / asked), asked
    assert not resolve_named_path(str(tmp_path / "link/new.txt"), None).exists
    assert resolve_named_path(str(tmp_path / "link"), None).exists


@pytest.mark.root  # owners other than root are made with lchown
@pytest.mark.parametrize(
    ("link_owner", "folder_owner", "folder_mode", "refused"),
    [
        (0, 0, 0o755, ""),
        (4242, 0, 0o755, ""),  # the file's owner made it
        (4242, 4242, 0o755, ""),
        (65534, 0, 0o755, "is a symbolic link owned by uid 65534, neither root nor the owner"),
        (0, 65534, 0o755, "which belongs to uid 65534"),  # moved there by whoever owns the folder
        (0, 0, 0o775, r"which others may write \(mode 0775\)"),
        (0, 0, 0o1777, ""),  # sticky: others cannot move or replace root's link
    ],
)
def test_a_link_is_followed_only_when_root_or_the_files_owner_made_it_where_only_they_write(
    tmp_path: Path, link_owner: int, folder_owner: int, folder_mode: int, refused: str
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    folder = tmp_path / "folder"
    folder.mkdir()
    link = folder / "link"
    link.symlink_to(target)
    os.lchown(link, link_owner, link_owner)
    os.chown(folder, folder_owner, folder_owner)
    folder.chmod(folder_mode)
    if not refused:
        assert resolve_named_path(str(link / "f"), {0, 4242}).canonical == str(target / "f")
        return
    with pytest.raises(UnsafeTreeError, match=refused) as caught:
        resolve_named_path(str(link / "f"), {0, 4242})
    assert f"{link} " in str(caught.value) and "Name the path it leads to instead" in str(caught.value)
