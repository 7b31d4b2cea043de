"""PathPredicate evaluation and the in-worker check: each constructor, symlinks, ``..``, new files, refusals."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

import sandbox._predicate_eval as pe
from sandbox import (
    DEFAULT_MAX_FILE_SIZE,
    AlwaysDeny,
    FileSandbox,
    PathPredicate,
    PredicateError,
    check_path,
    evaluate,
    lists_entries,
    parse_file_sandbox,
    parse_predicate,
)
from sandbox._file_sandbox import parse_file_sandboxes
from sandbox._predicate_eval import canonicalise, describe_predicate
from sandbox._predicates import (
    All,
    AlwaysAllow,
    And,
    Any_,
    ChildOf,
    DirectoryExactly,
    DirectoryRecursive,
    DirectoryShallow,
    FileExactly,
    FileExtension,
    FilePattern,
    FileSizeLessThan,
    Not,
    Or,
)

if TYPE_CHECKING:
    from pathlib import Path


def T(tag: str, contents: Any = None) -> dict[str, Any]:
    return {"tag": tag, "contents": contents}


@pytest.fixture
def tree(sandbox_tmp: Path) -> Path:
    """``proj/`` with ``src/a.py``, ``src/deep/b.py``, ``README.md`` (10 bytes), ``big.bin`` (100 bytes), and
    ``outside/secret`` next to it."""
    proj = sandbox_tmp / "proj"
    (proj / "src" / "deep").mkdir(parents=True)
    (proj / "src" / "a.py").write_text("print(1)\n")
    (proj / "src" / "deep" / "b.py").write_text("")
    (proj / "README.md").write_text("0123456789")
    (proj / "big.bin").write_bytes(b"x" * 100)
    (sandbox_tmp / "outside").mkdir()
    (sandbox_tmp / "outside" / "secret").write_text("s")
    return proj


def allows(p: PathPredicate, path: Path | str, **kw: Any) -> bool:
    return evaluate(p, str(path), **kw).allowed


# --- each constructor


def test_file_exactly_matches_only_that_path(tree: Path) -> None:
    p = FileExactly(str(tree / "README.md"))
    assert allows(p, tree / "README.md")
    assert not allows(p, tree / "README.md.bak")
    assert not allows(p, tree)
    assert not allows(p, tree / "README.md" / "x")


def test_directory_exactly_is_the_directory_itself_not_its_contents(tree: Path) -> None:
    p = DirectoryExactly(str(tree / "src"))
    assert allows(p, tree / "src")
    assert allows(p, str(tree / "src") + "/")  # a trailing slash is the same directory
    assert not allows(p, tree / "src" / "a.py")
    assert not allows(p, tree / "src" / "deep")


def test_directory_recursive_is_the_directory_and_everything_beneath(tree: Path) -> None:
    p = DirectoryRecursive(str(tree / "src"))
    assert allows(p, tree / "src")
    assert allows(p, tree / "src" / "a.py")
    assert allows(p, tree / "src" / "deep" / "b.py")
    assert not allows(p, tree)
    assert not allows(p, str(tree / "src") + "x")  # a sibling sharing the prefix is not beneath


def test_child_of_is_strictly_beneath(tree: Path) -> None:
    p = ChildOf(str(tree / "src"))
    assert not allows(p, tree / "src")
    assert allows(p, tree / "src" / "a.py")
    assert allows(p, tree / "src" / "deep" / "b.py")
    assert not allows(p, str(tree / "src") + "x/a.py")


def test_directory_shallow_is_the_directory_and_its_direct_children(tree: Path) -> None:
    """The seed: "Directory contents only (not subdirectories)": listing it and its entries, nothing deeper."""
    p = DirectoryShallow(str(tree / "src"))
    assert allows(p, tree / "src" / "a.py")
    assert allows(p, tree / "src" / "deep")
    assert not allows(p, tree / "src" / "deep" / "b.py")
    assert allows(p, tree / "src")  # listing it: its contents are what it grants
    assert not allows(p, tree)


def test_only_a_directory_exactly_lists_every_entry(tree: Path) -> None:
    src = str(tree / "src")
    assert lists_entries(DirectoryExactly(src), src)
    assert lists_entries(Any_((FileExactly("/x"), And(DirectoryExactly(src), FilePattern("*")))), src)
    assert not lists_entries(DirectoryExactly(src), str(tree))
    assert not lists_entries(Not(DirectoryExactly(src)), src)
    for p in (DirectoryRecursive(src), DirectoryShallow(src), ChildOf(str(tree))):
        assert not lists_entries(p, src)  # their entries are allowed one by one


def test_root_as_a_predicate_path(tree: Path) -> None:
    assert allows(DirectoryRecursive("/"), "/")
    assert allows(DirectoryRecursive("/"), tree / "src")
    assert not allows(ChildOf("/"), "/")
    assert allows(ChildOf("/"), "/etc")
    assert allows(DirectoryShallow("/"), "/etc")
    assert allows(DirectoryShallow("/"), "/")
    assert not allows(DirectoryShallow("/"), "/etc/passwd")


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*.md", "README.md", True),
        ("*.md", "README.MD", False),  # case-sensitive
        ("*.md", "notes.md.txt", False),
        ("test-?.json", "test-1.json", True),
        ("test-?.json", "test-12.json", False),
        ("[ab]*", "alpha", True),
        ("[ab]*", "charlie", False),
        ("[!a]*", "alpha", False),
        ("*", ".hidden", True),  # unlike a shell, * matches a leading dot
    ],
)
def test_file_pattern_globs_the_file_name(tree: Path, pattern: str, name: str, expected: bool) -> None:
    assert allows(FilePattern(pattern), tree / "src" / name) is expected


def test_file_pattern_looks_at_the_name_only_and_never_matches_root(tree: Path) -> None:
    assert allows(FilePattern("src"), tree / "src")
    assert not allows(FilePattern("proj*"), tree / "src" / "a.py")
    assert not allows(FilePattern("*"), "/")


@pytest.mark.parametrize(
    ("exts", "name", "expected"),
    [
        (("md",), "README.md", True),
        (("md",), "README.MD", False),
        (("md",), "md", False),
        (("bashrc",), ".bashrc", False),  # a dotfile has no extension
        (("gz",), "a.tar.gz", True),
        (("tar.gz",), "a.tar.gz", True),
        (("hs", "lhs"), "Main.lhs", True),
        (("hs",), "Main.lhs", False),
    ],
)
def test_file_extension(tree: Path, exts: tuple[str, ...], name: str, expected: bool) -> None:
    assert allows(FileExtension(exts), tree / name) is expected


def test_file_size_less_than_is_strict(tree: Path) -> None:
    assert not allows(FileSizeLessThan(10), tree / "README.md")
    assert allows(FileSizeLessThan(11), tree / "README.md")


def test_file_size_of_a_new_file_is_zero_and_of_a_directory_zero(tree: Path) -> None:
    assert allows(FileSizeLessThan(1), tree / "new.txt", for_write=True)
    assert not allows(FileSizeLessThan(0), tree / "new.txt", for_write=True)
    assert allows(FileSizeLessThan(1), tree / "src")


def test_file_size_passed_by_a_writer_is_the_size_it_will_have(tree: Path) -> None:
    p = FileSizeLessThan(50)
    assert allows(p, tree / "big.bin", for_write=True, size=10)  # truncating the 100-byte file to 10
    assert not allows(p, tree / "README.md", for_write=True, size=50)


def test_size_is_not_looked_up_when_the_path_alone_decides(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[str] = []
    real = pe._current_size

    def spy(path: str) -> int | None:
        looked.append(path)
        return real(path)

    monkeypatch.setattr(pe, "_current_size", spy)
    p = And(FileSizeLessThan(1000), DirectoryRecursive(str(tree / "src")))
    v = evaluate(p, str(tree.parent / "outside" / "secret"))
    assert not v.allowed
    assert v.rule == f"DirectoryRecursive({tree / 'src'})"
    assert looked == []
    assert allows(p, tree / "src" / "a.py")
    assert looked == [str(tree / "src" / "a.py")]


def test_boolean_combinators(tree: Path) -> None:
    src, md = DirectoryRecursive(str(tree / "src")), FilePattern("*.md")
    assert allows(Or(src, md), tree / "README.md")
    assert not allows(And(src, md), tree / "README.md")
    assert allows(Not(src), tree / "README.md")
    assert not allows(Not(src), tree / "src" / "a.py")
    assert allows(Any_((md, src)), tree / "src" / "a.py")
    assert allows(All((src, FileExtension(("py",)))), tree / "src" / "a.py")
    assert not allows(Any_(()), tree / "src")  # an empty Any allows nothing
    assert allows(All(()), tree / "src")  # an empty All allows everything
    assert allows(AlwaysAllow(), "/etc/shadow")
    assert not allows(AlwaysDeny(), tree / "src")


def test_seed_example_tree_minus_dist(tree: Path) -> None:
    (tree / "dist").mkdir()
    p = parse_predicate(
        T("And", [T("DirectoryRecursive", "."), T("Not", T("DirectoryRecursive", "./dist"))]), str(tree)
    )
    assert allows(p, tree / "src" / "a.py")
    assert not allows(p, tree / "dist" / "bundle.js")
    assert not allows(p, tree / "dist")


# --- canonicalisation: symlinks, .., relative paths, NUL


def test_symlink_inside_the_tree_pointing_outside_is_judged_by_its_target(tree: Path) -> None:
    (tree / "src" / "escape").symlink_to(tree.parent / "outside" / "secret")
    (tree / "src" / "escape_dir").symlink_to(tree.parent / "outside")
    p = DirectoryRecursive(str(tree / "src"))
    assert not allows(p, tree / "src" / "escape")
    assert not allows(p, tree / "src" / "escape_dir" / "secret")
    assert not allows(p, tree / "src" / "escape_dir" / "new-file", for_write=True)


def test_symlink_outside_pointing_inside_is_allowed_like_its_target(tree: Path) -> None:
    (tree.parent / "outside" / "in").symlink_to(tree / "src" / "a.py")
    assert allows(DirectoryRecursive(str(tree / "src")), tree.parent / "outside" / "in")


def test_dangling_symlink_is_judged_by_where_a_create_would_land(tree: Path) -> None:
    (tree / "src" / "trap").symlink_to(tree.parent / "outside" / "planted")
    assert not allows(DirectoryRecursive(str(tree / "src")), tree / "src" / "trap", for_write=True)


def test_dotdot_is_resolved_before_judging(tree: Path) -> None:
    p = DirectoryRecursive(str(tree / "src"))
    assert not allows(p, f"{tree}/src/../../outside/secret")
    assert not allows(p, f"{tree}/src/deep/../../README.md")
    assert allows(p, f"{tree}/src/deep/../a.py")


def test_dotdot_after_a_symlink_climbs_from_the_target(tree: Path) -> None:
    # src/link -> outside ; src/link/.. is the parent of outside, not src: the kernel walks it that way too
    (tree / "src" / "link").symlink_to(tree.parent / "outside")
    p = DirectoryRecursive(str(tree / "src"))
    assert evaluate(p, f"{tree}/src/link/../proj/src/a.py").path == str(tree / "src" / "a.py")
    assert not allows(p, f"{tree}/src/link/../outside/secret")


def test_relative_paths_join_the_base_dir(tree: Path) -> None:
    p = DirectoryRecursive(str(tree / "src"))
    assert allows(p, "src/a.py", base_dir=str(tree))
    assert not allows(p, "../outside/secret", base_dir=str(tree))


def test_new_file_is_judged_as_the_file_it_will_be(tree: Path) -> None:
    assert allows(FileExactly(str(tree / "out.json")), tree / "out.json", for_write=True)
    assert allows(FileExtension(("md",)), tree / "src" / "NOTES.md", for_write=True)
    (tree / "alias").symlink_to(tree / "src")
    assert evaluate(FileExactly(str(tree / "src" / "new.py")), str(tree / "alias" / "new.py")).allowed


@pytest.mark.parametrize("bad", ["", "/etc/passwd\x00.md", "src\x00"])
def test_paths_with_nul_bytes_or_empty_are_refused(tree: Path, bad: str) -> None:
    v = evaluate(AlwaysAllow(), bad)
    assert not v.allowed
    assert v.rule == "path syntax"
    check = check_path(FileSandbox(AlwaysAllow()), bad, for_write=False)
    assert not check.allowed
    assert "not a valid path" in check.message


def test_a_path_that_is_not_a_string_is_refused_not_raised() -> None:
    check = check_path(FileSandbox(AlwaysAllow()), 42, for_write=False)  # type: ignore[arg-type]
    assert not check.allowed
    assert check.message == "refused: 42 is not a valid path (a non-empty string without NUL bytes)"


def test_canonicalise_refuses_nul_and_resolves(tree: Path) -> None:
    with pytest.raises(PredicateError, match="NUL"):
        canonicalise("/a\x00b")
    assert canonicalise(f"{tree}/src/./deep/..") == str(tree / "src")


# --- refusals name the rule


def test_refusal_names_the_failing_and_operand(tree: Path) -> None:
    p = And(DirectoryRecursive(str(tree / "src")), FileExtension(("py",)))
    assert evaluate(p, str(tree / "src" / "x.txt")).rule == "FileExtension(py)"
    assert evaluate(p, str(tree / "README.md")).rule == f"DirectoryRecursive({tree / 'src'})"


def test_refusal_of_an_or_names_all_alternatives(tree: Path) -> None:
    p = Any_((DirectoryRecursive(str(tree / "src")), FileExactly(str(tree / "README.md"))))
    assert evaluate(p, "/etc/passwd").rule == describe_predicate(p)
    assert describe_predicate(p) == f"Any[DirectoryRecursive({tree / 'src'}), FileExactly({tree / 'README.md'})]"


def test_refusal_by_not_names_the_not(tree: Path) -> None:
    p = Not(FilePattern("*.key"))
    assert evaluate(p, str(tree / "id.key")).rule == "Not(FilePattern(*.key))"


def test_describe_is_bounded() -> None:
    p = Any_(tuple(FileExactly(f"/very/long/path/number/{i}") for i in range(100)))
    assert len(describe_predicate(p)) <= 400
    assert describe_predicate(p).endswith("...")


# --- check_path: the in-worker check


def test_check_path_allows_and_returns_the_canonical_path(tree: Path) -> None:
    (tree / "alias").symlink_to(tree / "src")
    fsb = FileSandbox(DirectoryRecursive(str(tree / "src")), name="project")
    check = check_path(fsb, str(tree / "alias" / "a.py"), for_write=False)
    assert check.allowed
    assert check.path == str(tree / "src" / "a.py")
    assert check.message == ""


def test_refusal_message_is_the_same_whether_the_file_exists_or_not(tree: Path) -> None:
    fsb = FileSandbox(DirectoryRecursive(str(tree / "src")), name="project")
    target = tree.parent / "outside" / "maybe"
    absent = check_path(fsb, str(target), for_write=False)
    target.write_text("now it exists")
    present = check_path(fsb, str(target), for_write=False)
    assert not absent.allowed
    assert not present.allowed
    assert absent == present
    assert "'project'" in present.message
    assert f"DirectoryRecursive({tree / 'src'})" in present.message
    assert present.path == ""


def test_refusal_message_does_not_reveal_where_a_symlink_leads(tree: Path) -> None:
    (tree.parent / "outside" / "hop").symlink_to("/etc/ssl/private-target")
    fsb = FileSandbox(DirectoryRecursive(str(tree / "src")))
    check = check_path(fsb, str(tree.parent / "outside" / "hop"), for_write=True)
    assert not check.allowed
    assert "private-target" not in check.message
    assert str(tree.parent / "outside" / "hop") in check.message


def test_max_file_size_applies_after_the_predicate(tree: Path) -> None:
    fsb = FileSandbox(DirectoryRecursive(str(tree)), max_file_size=99, name="small")
    big = check_path(fsb, str(tree / "big.bin"), for_write=False)
    assert not big.allowed
    assert big.rule == "fsbMaxFileSize"
    assert "99 bytes" in big.message
    assert check_path(fsb, str(tree / "README.md"), for_write=False).allowed
    assert check_path(fsb, str(tree / "new.bin"), for_write=True, size=99).allowed  # at the limit is fine
    over = check_path(fsb, str(tree / "new.bin"), for_write=True, size=100)
    assert not over.allowed
    assert "would be larger" in over.message
    # outside the predicate the size is never mentioned (it would say the file exists)
    outside = check_path(fsb, str(tree.parent / "outside" / "secret"), for_write=False)
    assert outside.rule != "fsbMaxFileSize"


def test_max_file_size_null_is_no_limit_and_default_is_50_mib(tree: Path) -> None:
    unlimited = parse_file_sandbox({"fsbPredicate": T("DirectoryRecursive", "."), "fsbMaxFileSize": None}, str(tree))
    assert unlimited.max_file_size is None
    assert check_path(unlimited, str(tree / "x"), for_write=True, size=10**12).allowed
    default = parse_file_sandbox({"fsbPredicate": T("DirectoryRecursive", ".")}, str(tree))
    assert default.max_file_size == DEFAULT_MAX_FILE_SIZE == 50 * 1024 * 1024
    assert not check_path(default, str(tree / "x"), for_write=True, size=DEFAULT_MAX_FILE_SIZE + 1).allowed


def test_check_path_takes_the_json_config_or_a_bare_predicate(tree: Path) -> None:
    config = {"fsbPredicate": T("DirectoryRecursive", str(tree / "src")), "fsbMaxFileSize": 5, "fsbName": "j"}
    assert check_path(config, str(tree / "src" / "deep" / "b.py"), for_write=False).allowed
    refused = check_path(config, str(tree / "src" / "a.py"), for_write=False)  # 9 bytes > 5
    assert refused.rule == "fsbMaxFileSize"
    assert "'j'" in refused.message
    bare = DirectoryRecursive(str(tree / "src"))
    assert check_path(bare, str(tree / "src" / "a.py"), for_write=False).allowed
    assert not check_path(bare, str(tree / "src" / "a.py"), for_write=False, max_file_size=1).allowed


def test_relative_path_in_check_path(tree: Path) -> None:
    fsb = FileSandbox(DirectoryRecursive(str(tree / "src")))
    check = check_path(fsb, "deep/b.py", for_write=False, base_dir=str(tree / "src"))
    assert check.allowed
    assert check.path == str(tree / "src" / "deep" / "b.py")


# --- FileSandboxConfig parsing


def test_parse_inline_and_ref(tree: Path) -> None:
    named = parse_file_sandboxes(
        {
            "project": {"fsbPredicate": T("DirectoryRecursive", "./src"), "fsbMaxFileSize": 10485760},
            "scratch": {"fsbPredicate": T("DirectoryRecursive", "/tmp/scratch"), "fsbName": "tmp"},
        },
        str(tree),
    )
    assert named["project"] == FileSandbox(DirectoryRecursive(str(tree / "src")), 10485760, "project")
    assert named["scratch"].name == "tmp"
    assert parse_file_sandbox({"ref": "project"}, str(tree), named=named) is named["project"]


def test_parse_defaults_to_always_deny() -> None:
    assert parse_file_sandbox({}, "/") == FileSandbox(AlwaysDeny(), DEFAULT_MAX_FILE_SIZE, None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"ref": "nope"}, "no file sandbox named 'nope' in fileSandboxes (defined: project)"),
        ({"ref": "project", "fsbName": "x"}, 'exactly {"ref": NAME}'),
        ({"fsbPredicate": T("DirectoryRecursive", "."), "allowedPaths": []}, "unknown keys ['allowedPaths']"),
        ({"fsbMaxFileSize": -1}, "fsbMaxFileSize is a non-negative"),
        ({"fsbMaxFileSize": True}, "fsbMaxFileSize is a non-negative"),
        ({"fsbName": 3}, "fsbName is a string"),
        ({"fsbPredicate": T("Nope", 1)}, "unknown predicate tag 'Nope'"),
        ({"fsbPredicate": T("And", [T("AlwaysDeny")])}, "And takes an array of two or more predicates"),
        ({"fsbPredicate": T("Or", [])}, "Or takes an array of two or more predicates"),
        ({"fsbPredicate": T("FileExactly", "a\x00b")}, "NUL"),
        ([], "expected a file sandbox object"),
    ],
)
def test_parse_errors_are_clear(tree: Path, data: Any, message: str) -> None:
    named = {"project": FileSandbox(AlwaysDeny(), name="project")}
    with pytest.raises(PredicateError) as info:
        parse_file_sandbox(data, str(tree), named=named)
    assert message in str(info.value)


def test_a_map_entry_cannot_be_a_ref() -> None:
    with pytest.raises(PredicateError, match="cannot be a reference"):
        parse_file_sandboxes({"a": {"ref": "b"}}, "/")


def test_predicate_paths_were_canonicalised_at_load(tree: Path) -> None:
    # a symlinked sandbox root must match its real paths (a fault of the anchor system)
    (tree.parent / "link-to-proj").symlink_to(tree)
    p = parse_predicate(T("DirectoryRecursive", "link-to-proj/src"), str(tree.parent))
    assert p == DirectoryRecursive(str(tree / "src"))
    assert allows(p, tree / "src" / "a.py")
    assert allows(p, tree.parent / "link-to-proj" / "src" / "a.py")
    assert os.path.realpath(str(tree)) == str(tree)


# --- n-ary And / Or (the seed's own example gives And three operands)

SEED_AND3 = T(
    "And", [T("DirectoryRecursive", "./src"), T("FileExtension", ["hs", "lhs"]), T("FileSizeLessThan", 1048576)]
)


def test_seed_and_of_three_parses_as_all_and_behaves_as_all(tree: Path) -> None:
    (tree / "src" / "Main.hs").write_text("main = pure ()\n")
    (tree / "src" / "deep" / "Big.lhs").write_bytes(b"x" * 1048576)
    (tree / "Top.hs").write_text("")
    p = parse_predicate(SEED_AND3, str(tree))
    assert p == All((DirectoryRecursive(str(tree / "src")), FileExtension(("hs", "lhs")), FileSizeLessThan(1048576)))
    assert allows(p, tree / "src" / "Main.hs")
    assert not allows(p, tree / "src" / "a.py")  # wrong extension
    assert not allows(p, tree / "src" / "deep" / "Big.lhs")  # not smaller than 1 MiB
    assert not allows(p, tree / "Top.hs")  # outside ./src
    refusal = check_path(p, str(tree / "src" / "a.py"), for_write=False, max_file_size=None)
    assert not refusal.allowed and "FileExtension" in refusal.message


def test_or_of_three_behaves_as_any(tree: Path) -> None:
    data = T("Or", [T("FileExactly", "./README.md"), T("DirectoryRecursive", "./src/deep"), T("FilePattern", "*.bin")])
    p = parse_predicate(data, str(tree))
    assert p == Any_(
        (FileExactly(str(tree / "README.md")), DirectoryRecursive(str(tree / "src" / "deep")), FilePattern("*.bin"))
    )
    assert [allows(p, tree / n) for n in ("README.md", "src/deep/b.py", "big.bin", "src/a.py")] == [
        True,
        True,
        True,
        False,
    ]


def test_and_of_two_stays_a_binary_and(tree: Path) -> None:
    p = parse_predicate(T("And", [T("DirectoryRecursive", "./src"), T("FileExtension", ["py"])]), str(tree))
    assert p == And(DirectoryRecursive(str(tree / "src")), FileExtension(("py",)))
