"""Package boundaries: every ``__all__`` is unique and importable, and imports point the way DESIGN.md says."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


#: The rooms of the trusted side, lowest first: a room imports only rooms before it (and ``supervisor._errors``).
SUPERVISOR_ROOMS = ["config", "traces", "tools", "workers", "sessions", "calls", "plan", "agents"]
#: The root modules that compose the rooms (``Supervisor``), then the frontends that reach it.
SUPERVISOR_TOP = [
    "_worker_messages",
    "_generation",
    "_services",
    "_runners",
    "_tool_lists",
    "_running",
    "_reload",
    "_check_report",
    "_check_tool",
    "_supervisor",
    "_face",
    "_asyncio_guest",
    "_embedding",
    "frontends",
]
PACKAGES = ["sandbox", "toolboxes", "supervisor", *(f"supervisor.{room}" for room in [*SUPERVISOR_ROOMS, "frontends"])]


@pytest.mark.parametrize("package", PACKAGES)
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


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("sandbox", {"supervisor", "toolboxes"}),
        ("toolboxes", {"supervisor"}),
    ],
)
def test_dependency_direction(package: str, forbidden: set[str]) -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & forbidden)
        for p in (ROOT / package).rglob("*.py")
        if _imports(p) & forbidden
    }
    assert offenders == {}


def test_launcher_start_up_stays_light() -> None:
    """The launcher runs as root before confining itself: importing it must not pull in trio, h11 or pydantic."""
    import subprocess
    import sys

    code = (
        "import sys; import sandbox._launcher; "
        "print(','.join(m for m in ('trio', 'h11', 'pydantic', 'dns', 'toolboxes') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
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
            f"{name} is a runtime dependency that no runtime module imports: move it to an extra"
        )
    assert "mcp" not in runtime_imports  # the official SDK is the benchmark's reference, never the runtime's


def _supervisor_imports(path: Path) -> set[tuple[str, str]]:
    """(room or root module, private module or '') of each ``supervisor.`` import of ``path``, relative resolved."""
    tree = ast.parse(path.read_text())
    here = path.relative_to(ROOT / "supervisor").parts
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 0 and node.module.startswith("supervisor."):
                parts = node.module.split(".")[1:]
            elif node.level == 1 and len(here) > 1:
                parts = [here[0], *node.module.split(".")]
            elif node.level == 1:
                parts = node.module.split(".")
            else:
                continue
            found.add((parts[0], parts[1] if len(parts) > 1 else ""))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("supervisor."):
                    parts = alias.name.split(".")[1:]
                    found.add((parts[0], parts[1] if len(parts) > 1 else ""))
    return found


def test_supervisor_rooms_point_one_way() -> None:
    """A room of ``supervisor/`` imports only the rooms below it, and another room only through its ``__init__``."""
    order = [*SUPERVISOR_ROOMS, *SUPERVISOR_TOP]
    offenders: dict[str, list[str]] = {}
    for path in (ROOT / "supervisor").rglob("*.py"):
        parts = path.relative_to(ROOT / "supervisor").parts
        room = parts[0] if len(parts) > 1 else path.stem
        if room in ("__init__", "__main__", "_errors"):
            continue
        rank = order.index(room)
        for target, module in _supervisor_imports(path):
            if target == room or target == "_errors":
                continue
            if target not in order or order.index(target) >= rank:
                offenders.setdefault(str(path.relative_to(ROOT)), []).append(f"{target} (points up)")
            elif module and target in [*SUPERVISOR_ROOMS, "frontends"]:
                offenders.setdefault(str(path.relative_to(ROOT)), []).append(
                    f"supervisor.{target}.{module} (use the room's __init__)"
                )
    assert offenders == {}


def test_no_toolbox_kind_imports_another_kinds_private_module() -> None:
    """Shared pieces of the kinds live in a common module of ``toolboxes/``, never in another kind's private one."""
    kinds = sorted(p.name for p in (ROOT / "toolboxes").iterdir() if (p / "__init__.py").exists())
    offenders: dict[str, list[str]] = {}
    for kind in kinds:
        for path in (ROOT / "toolboxes" / kind).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or not node.module:
                    continue
                if node.level == 0 and node.module.startswith("toolboxes."):
                    parts = node.module.split(".")[1:]
                elif node.level == 2:
                    parts = node.module.split(".")
                else:
                    continue
                if parts[0] in kinds and parts[0] != kind and len(parts) > 1 and parts[1].startswith("_"):
                    offenders.setdefault(str(path.relative_to(ROOT)), []).append(".".join(parts))
    assert offenders == {}


#: The packages whose private modules (``_name``) only they import; others go through the package's face.
FACED = ("sandbox", "toolboxes", "supervisor")


def _private_imports(path: Path) -> list[str]:
    """The private modules of a :data:`FACED` package that ``path`` imports, other than its own package's."""
    own = path.relative_to(ROOT).parts[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] in FACED and parts[0] != own and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{module} (line {node.lineno})")
    return found


def test_no_package_imports_another_packages_private_modules() -> None:
    """``sandbox``, ``toolboxes`` and ``supervisor`` (and ``labkit``, the test labs' code) reach each other only
    through the packages' faces (their ``__init__``); the tests and the benchmark scripts may reach further, to
    measure or probe a module itself, and use the face for what it exports (see the next test)."""
    offenders = {
        str(p.relative_to(ROOT)): found
        for top in (*FACED, "labkit")
        for p in (ROOT / top).rglob("*.py")
        if (found := _private_imports(p))
    }
    assert offenders == {}


#: What frontends may import of ``supervisor``: its face (``_face``: the running supervisor's protocol, how to open
#: one, the values and helpers they share), its errors and the policy's models. Never the workers, the plan, the
#: runners, the portal, the traces' or the attachments' internals: what they need of those is a face method.
FRONTEND_FACE = {"_face", "_errors", "config"}


def test_frontends_import_only_the_face() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(f"supervisor.{target}" for target in bad)
        for path in (ROOT / "supervisor" / "frontends").rglob("*.py")
        if (bad := {target for target, _ in _supervisor_imports(path)} - FRONTEND_FACE - {"frontends"})
    }
    assert offenders == {}


def test_what_a_face_exports_is_imported_from_the_face() -> None:
    """Where the tests and scripts import a name a face exports, they import it from the face: a private module is
    reached only for what the face does not hold."""
    faces = {name: set(importlib.import_module(name).__all__) for name in ("sandbox", "toolboxes")}
    offenders: dict[str, list[str]] = {}
    for path in [*(ROOT / "scripts").iterdir(), *(ROOT / "tests").rglob("*.py")]:
        if path.suffix != ".py" and not (path.is_file() and b"python" in path.read_bytes().split(b"\n", 1)[0]):
            continue  # the scripts without .py that are Python (#!...python) count; shell scripts do not
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level != 0:
                continue
            parts = node.module.split(".")
            if parts[0] in faces and len(parts) == 2 and parts[1].startswith("_"):
                exported = [a.name for a in node.names if a.name in faces[parts[0]]]
                if exported:
                    offenders.setdefault(str(path.relative_to(ROOT)), []).append(f"{node.module}: {exported}")
    assert offenders == {}


def test_the_embedding_uses_the_face() -> None:
    """The Python API (``EmbeddedSupervisor``) sits on the frontends' face, not on the supervisor's internals."""
    assert {target for target, _ in _supervisor_imports(ROOT / "supervisor" / "_embedding.py")} <= {
        *FRONTEND_FACE,
        "_asyncio_guest",
    }
