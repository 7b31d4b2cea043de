"""What the tests and the harness scripts (``scripts/chaos``, ``scripts/soak``, ``scripts/bench_wasm.py``,
``scripts/bench_http.py``) build their labs from: bash tool scripts, skill folders, WASM test components, and a
minimal MCP Streamable HTTP client, a slowloris. Not shipped (neither code of the supervisor nor of
a worker); scripts must not import ``tests``, so what both need lives here."""

from ._lean_lane import LeanLane
from ._mcp_raw_http import REVISION, RawSession, answer_of
from ._slowloris import Slowloris
from ._tool_files import describe_json, make_skill, skill_md, write_script
from ._wasm_components import BEHAVIOURS, WASM_TOOLS, Spec, build_components, png_bytes

__all__ = [
    "BEHAVIOURS",
    "REVISION",
    "WASM_TOOLS",
    "LeanLane",
    "RawSession",
    "Slowloris",
    "Spec",
    "answer_of",
    "build_components",
    "describe_json",
    "make_skill",
    "png_bytes",
    "skill_md",
    "write_script",
]
