"""Package boundaries: every ``__all__`` is unique and importable, and imports point the way DESIGN.md says."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["sandbox", "toolboxes", "supervisor"])
def test_all_is_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    assert len(set(names)) == len(names)  # ruff's RUF022 keeps the order sorted
    for name in names:
        assert getattr(module, name) is not None, name


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(("package", "forbidden"), [
    ("sandbox", {"supervisor", "toolboxes"}),
    ("toolboxes", {"supervisor"}),
])
def test_dependency_direction(package: str, forbidden: set[str]) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & forbidden)
                 for p in (ROOT / package).rglob("*.py") if _imports(p) & forbidden}
    assert offenders == {}


def test_launcher_start_up_stays_light() -> None:
    """The launcher runs as root before confining itself: importing it must not pull in trio, h11 or pydantic."""
    import subprocess
    import sys

    code = ("import sys; import sandbox._launcher; "
            "print(','.join(m for m in ('trio', 'h11', 'pydantic', 'dns', 'toolboxes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


#: The import name of each runtime distribution, where it differs from the distribution's name.
_IMPORT_NAMES = {"pyyaml": "yaml", "dnspython": "dns", "python-prctl": "prctl"}


def test_runtime_dependencies_are_imported_by_the_runtime() -> None:
    """``dependencies`` holds only what the three runtime packages import; the rest belongs in an extra."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime_imports: set[str] = set()
    for package in ("sandbox", "toolboxes", "supervisor"):
        for path in (ROOT / package).rglob("*.py"):
            runtime_imports |= _imports(path)
    for requirement in project["dependencies"]:
        name = requirement.split(">")[0].split("=")[0].split("[")[0].strip().lower()
        assert _IMPORT_NAMES.get(name, name.replace("-", "_")) in runtime_imports, (
            f"{name} is a runtime dependency that no runtime module imports: move it to an extra")
    assert "mcp" not in runtime_imports  # the official SDK is the benchmark's reference, never the runtime's
