"""Value types of config files: paths, names, hosts, URLs, ``${VAR}`` text, predicates, capability lists.

Each is an ``Annotated`` type whose validator raises a config error (:func:`supervisor.config._errors.problem`) that
says what was expected. Validators that need to know where the file is or what the environment holds read the
validation context (:func:`validation_context`): ``base_dir`` (relative paths resolve against it, once, and are
canonicalised), ``environ`` (for ``${VAR}``) and who may have made the links on a path's way. Without a context they
use the current directory and ``os.environ``.

A path is canonicalised as ``os.path.realpath`` would, but walked through directory fds
(``sandbox._path_walk.resolve_named_path``): as root, a symbolic link is followed only when root or the agent file's
owner made it, in a folder only they can change. Another link (one a worker could have planted) is not followed: the
path is kept as written and recorded in the context's ``refused_paths`` (path -> why), so the toolbox naming it does
not load (``_agent_toolboxes.build_toolboxes``) while every other toolbox and agent does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import CoreSchema, core_schema

from sandbox import (
    PREDICATE_TAGS,
    HostError,
    HostRule,
    PathPredicate,
    PredicateError,
    UnsafeTreeError,
    parse_cname_targets,
    parse_predicate,
    predicate_to_json,
    resolve_named_path,
)

from ._errors import problem

if TYPE_CHECKING:
    from pydantic.json_schema import JsonSchemaValue

__all__ = [
    "UNSET_ENV_KEY",
    "CapabilityList",
    "ConfigPath",
    "EnvText",
    "Executable",
    "GitUrl",
    "Host",
    "HttpUrl",
    "Predicate",
    "SkillName",
    "SpecLocation",
    "ToolboxName",
    "check_cname_target",
    "check_host",
    "check_regex",
    "check_subdir",
    "validation_context",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SKILL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_ENV_RE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validation_context(
    base_dir: str, environ: Mapping[str, str] | None = None, *, owner: int | None = None
) -> dict[str, Any]:
    """The context ``AgentDescription.model_validate`` needs: the agent file's directory, the environment, the uids
    whose links its paths may follow (as root: root and ``owner``, the file's owner; not root: any, since nothing
    is lent) and ``refused_paths``, filled by validation (module docstring)."""
    trusted = None if os.geteuid() != 0 else frozenset({0} if owner is None else {0, owner})
    return {
        "base_dir": os.path.realpath(base_dir),
        "environ": os.environ if environ is None else environ,
        "trusted_uids": trusted,
        "refused_paths": {},
    }


_problem = problem


def _ctx(info: ValidationInfo) -> Mapping[str, Any]:
    return info.context if isinstance(info.context, Mapping) else {}


def _base_dir(info: ValidationInfo) -> str:
    return str(_ctx(info).get("base_dir") or os.getcwd())


def _check_path_text(value: str) -> None:
    if not value:
        raise _problem("empty path", "a file or directory path")
    if "\x00" in value:
        raise _problem("a path must not contain NUL bytes")


def _named_path(path: str, info: ValidationInfo) -> str:
    """``path`` (absolute) canonicalised without following a link the context does not trust (module docstring)."""
    ctx = _ctx(info)
    trusted = ctx.get("trusted_uids", None if os.geteuid() != 0 else frozenset({0}))
    try:
        return resolve_named_path(path, trusted).canonical
    except UnsafeTreeError as exc:
        kept = os.path.normpath(path)
        refused = ctx.get("refused_paths")
        if isinstance(refused, dict):
            refused[kept] = str(exc)
        return kept
    except OSError:  # a loop of links: nothing is there to grant, the path as written reaches nothing
        return os.path.normpath(path)


def _resolve_path(value: str, info: ValidationInfo) -> str:
    _check_path_text(value)
    return _named_path(os.path.join(_base_dir(info), os.path.expanduser(value)), info)


def _resolve_executable(value: str, info: ValidationInfo) -> str:
    _check_path_text(value)
    if "/" not in value:
        return value
    return os.path.normpath(os.path.join(_base_dir(info), value))


def _check_name(value: str) -> str:
    if not _NAME_RE.match(value):
        raise _problem(f"invalid name {value!r}", "1 to 64 characters among A-Z, a-z, 0-9, '_' and '-'")
    return value


def check_host(value: str) -> str:
    """An ``AllowedHosts`` entry from a config file (``sandbox._hosts.HostRule`` syntax: a name, ``*.suffix`` or IP,
    each with an optional ``:port`` or ``:first-last`` range), lowercased; raises a config error saying what is
    wrong (the caller's location gives the JSON path)."""
    host = value.strip().lower()
    try:
        HostRule.parse(host)
    except HostError as exc:
        raise _problem(
            f"invalid host {value!r}: {exc}",
            "a host name or address with an optional port, without scheme or path: api.example.com, "
            "*.example.org:443, [2001:db8::1]:443, host:8000-8100",
        ) from None
    return host


def check_cname_target(value: str) -> str:
    """A policy's ``cname_targets`` entry (a name or ``*.suffix`` without port, or ``*``), lowercased."""
    target = value.strip().lower()
    try:
        parse_cname_targets([target])
    except HostError as exc:
        raise _problem(
            f"invalid CNAME target {value!r}: {exc}", "a host name or '*.suffix' without port, or '*' for any name"
        ) from None
    return target


#: The validation context key under which a model that holds ``EnvText`` values collects the names of unset
#: variables (a list) instead of refusing the file (``OpenApiContents``: one toolbox's load error).
UNSET_ENV_KEY = "unset_env"


def _expand_env(value: str, info: ValidationInfo) -> str:
    """``${VAR}`` replaced by the variable's value. An unset variable is a problem, unless the context holds a list
    under :data:`UNSET_ENV_KEY`: then its name is added there and it expands to nothing."""
    environ = _ctx(info).get("environ", os.environ)

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if not _ENV_NAME_RE.match(name):
            raise _problem(f"invalid variable reference ${{{name}}}", "${NAME} with NAME of letters, digits, '_'")
        if name not in environ:
            unset = _ctx(info).get(UNSET_ENV_KEY)
            if isinstance(unset, list):  # the toolbox holding it collects it: its load error, not the policy's
                unset.append(name)
                return ""
            raise _problem(f"environment variable {name!r} is not set", f"{name} set in the supervisor's environment")
        return str(environ[name])

    return _ENV_RE.sub(one, value)


def check_regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise _problem(f"invalid regular expression: {exc}", "a Python regular expression") from exc
    return value


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _problem(f"invalid URL {value!r}", "an http:// or https:// URL with a host")
    return value


def _git_url(value: str, info: ValidationInfo) -> str:
    """A git URL: http(s) with a host, or ``file:///absolute/path`` (canonicalised)."""
    parts = urlsplit(value)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise _problem(f"invalid URL {value!r}", "an http:// or https:// URL with a host, or file:///absolute/path")
        return "file://" + _resolve_path(parts.path, info)
    return _check_http_url(value)


def _spec_location(value: str, info: ValidationInfo) -> str:
    """A SpecUrl: an http(s) URL is kept, a ``file://`` URL or a path becomes a resolved path."""
    parts = urlsplit(value)
    if parts.scheme in ("http", "https"):
        return _check_http_url(value)
    if parts.scheme == "file":
        return _resolve_path(parts.path, info)
    if parts.scheme and len(parts.scheme) > 1:
        raise _problem(f"unsupported scheme {parts.scheme!r} in {value!r}", "an http(s) URL or a file path")
    return _resolve_path(value, info)


@dataclass(frozen=True)
class CapabilityList:
    """``Annotated`` metadata of a ``Capabilities`` list: each of ``known`` at most once (checked after the list is
    validated); its JSON Schema says the same (an array of unique items among ``known``)."""

    known: tuple[str, ...]

    def check(self, values: list[str]) -> list[str]:
        seen: set[str] = set()
        for i, cap in enumerate(values):
            if cap not in self.known:
                raise _problem(f"unknown capability {cap!r}", "one of " + ", ".join(self.known), (i,))
            if cap in seen:
                raise _problem(f"capability {cap!r} is listed twice", "each capability once", (i,))
            seen.add(cap)
        return values

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "array", "items": {"enum": list(self.known)}, "uniqueItems": True}


def _split_predicate_path(path: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _parse_predicate(value: Any, info: ValidationInfo) -> PathPredicate:
    if not isinstance(value, dict | list | str | int | float | bool | type(None)):
        parsed: PathPredicate = value  # already parsed (model_construct / copy)
        return parsed
    try:
        return parse_predicate(value, _base_dir(info), resolve=lambda path: _named_path(path, info))
    except PredicateError as exc:
        raise _problem(exc.message, None, _split_predicate_path(exc.path)) from exc


def check_subdir(value: str) -> str:
    parts = value.split("/")
    if not value or value.startswith("/") or ".." in parts or "\x00" in value:
        raise _problem(f"invalid subdir {value!r}", "a relative path inside the repository, without '..'")
    return value


def _check_skill_name(value: str) -> str:
    if not _SKILL_RE.match(value) or "--" in value:
        raise _problem(
            f"invalid skill name {value!r}",
            "1 to 64 of a-z, 0-9 and '-', without a leading, trailing or double '-'",
        )
    return value


def _string(description: str, **schema: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "minLength": 1, **schema, "description": description})


#: The JSON Schema of a predicate: its tag and the shape of the object (what each tag's contents hold is the
#: parser's, ``sandbox/_predicates.py``, and the loader reports it).
_PREDICATE_SCHEMA = {
    "type": "object",
    "properties": {"tag": {"enum": list(PREDICATE_TAGS)}, "contents": {}},
    "required": ["tag"],
    "additionalProperties": False,
    "description": "a PathPredicate {tag, contents}: FileExactly, DirectoryExactly, DirectoryRecursive, "
    "DirectoryShallow, ChildOf (a path); FilePattern (a glob on the file name); FileExtension (a list of extensions "
    "without the dot); FileSizeLessThan (bytes); And, Or (two or more predicates); Not (one); Any, All (a list); "
    "AlwaysAllow, AlwaysDeny (no contents; AlwaysDeny is the default). Relative paths resolve against the agent "
    "file's folder",
}

ConfigPath = Annotated[
    str, AfterValidator(_resolve_path), _string("a path; a relative one resolves against the agent file's folder")
]
SkillName = Annotated[
    str,
    AfterValidator(_check_skill_name),
    _string("a skill name: a-z, 0-9 and single '-' inside", pattern=_SKILL_RE.pattern, maxLength=64),
]
Executable = Annotated[
    str,
    AfterValidator(_resolve_executable),
    _string("a program: a path (relative to the agent file's folder) or a bare name looked up in PATH"),
]
ToolboxName = Annotated[
    str, AfterValidator(_check_name), _string("1 to 64 of A-Z, a-z, 0-9, '_' and '-'", pattern=_NAME_RE.pattern)
]
Host = Annotated[
    str,
    AfterValidator(check_host),
    _string("a host name, '*.suffix' or IP address, with an optional ':port' or ':first-last' range"),
]
EnvText = Annotated[
    str,
    AfterValidator(_expand_env),
    WithJsonSchema({"type": "string", "description": "text; ${VAR} is replaced by the supervisor's variable VAR"}),
]
HttpUrl = Annotated[str, AfterValidator(_check_http_url), _string("an http:// or https:// URL", pattern="^https?://")]
GitUrl = Annotated[
    str,
    AfterValidator(_git_url),
    _string("an http(s) URL of a git repository, or file:///absolute/path", pattern="^(https?|file)://"),
]
SpecLocation = Annotated[
    str, AfterValidator(_spec_location), _string("an http(s) URL, a file:// URL or a path of an OpenAPI document")
]
Predicate = Annotated[
    Any, PlainValidator(_parse_predicate), PlainSerializer(predicate_to_json), WithJsonSchema(_PREDICATE_SCHEMA)
]
