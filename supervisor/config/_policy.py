"""The YAML policy: what an agent file cannot say (which agents, limits, uid, kernel demands, paths, network).

Models are strict and refuse unknown keys. Units are in field names: sizes (``*_bytes``) accept an integer or
a string with a unit (``"256MiB"``, ``"1GB"``: KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000, B
bytes); durations (``*_s``, ``cpu_seconds``) are numbers of seconds. Relative paths (``agents``,
``state_dir``, ``trace.path``, key files in ``model_keys``) resolve against the policy file's directory at
load, via the validation context ``{"base_dir": ...}``; ``system_paths`` and ``device_paths`` must be absolute
and are kept as written (the launcher opens them in the worker's own process, so ``/proc/self`` names the
worker).

:func:`policy_json_schema` is the JSON Schema of the file (``agents-supervise schema``).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from ._budget import Budget, BudgetOverride
from ._ceilings import Ceiling
from ._credentials import CredentialName, CredentialPolicy, EnvName
from ._errors import problem
from ._model import Override, overrides
from ._model import StrictModel as _Model
from ._types import check_cname_target, check_host
from ._validation_settings import Validation, ValidationOverride

__all__ = [
    "DEFAULT_STATE_DIR",
    "DEFAULT_SYSTEM_PATHS",
    "AgentLoop",
    "Limits",
    "LimitsOverride",
    "OtelExport",
    "Policy",
    "SharedGroup",
    "Supervision",
    "ToolboxPolicy",
    "parse_size",
    "policy_json_schema",
]

DEFAULT_STATE_DIR = "/var/lib/agents-supervise"
#: A narrow read-only view: programs, libraries and the few /etc files bash, python3 and curl read.
DEFAULT_SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/os-release",
    "/etc/mime.types",
    "/dev/urandom",
    "/dev/zero",
    "/proc/self",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/meminfo",
)

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_SIZE_EXPECTED = 'a byte count: an integer, or a number with a unit such as "256MiB" or "1GB"'
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOLBOX_KEY_RE = re.compile(r"^([A-Za-z0-9_-]{1,64}/)?[A-Za-z0-9_-]{1,64}$")


_problem = problem


#: Largest size a limit may have (the kernel's rlimits and cgroup files take 64-bit values; 2^62 is far beyond
#: any machine and leaves room for arithmetic).
MAX_SIZE = 1 << 62
#: Largest uid or gid (4294967295 is "no id" to the kernel).
MAX_ID = 4294967294


def parse_size(value: Any) -> int:
    """A size in bytes from an integer or a string like ``"256MiB"``; ``ValueError`` says what to write."""
    if isinstance(value, bool):
        raise ValueError(f"expected {_SIZE_EXPECTED}, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value}")
        if value > MAX_SIZE:
            raise ValueError(f"the size {value} is larger than the kernel takes (at most 2^62 bytes, 4 EiB)")
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match and match.group(2).lower() in _UNITS:
            number, unit = match.groups()
            scaled = float(number) * _UNITS[unit.lower()] if "." in number else int(number) * _UNITS[unit.lower()]
            if not math.isfinite(scaled) or scaled > MAX_SIZE:
                raise ValueError(f"the size {value!r} is larger than the kernel takes (at most 2^62 bytes, 4 EiB)")
            if scaled != int(scaled):
                raise ValueError(f"{value!r} is not a whole number of bytes")
            return int(scaled)
        raise ValueError(f"invalid size {value!r}; expected {_SIZE_EXPECTED}")
    raise ValueError(f"expected {_SIZE_EXPECTED}, got {type(value).__name__}")


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise _problem(str(exc).split("; expected")[0], _SIZE_EXPECTED) from exc


def _base_dir(info: ValidationInfo) -> str:
    ctx = info.context if isinstance(info.context, Mapping) else {}
    return str(ctx.get("base_dir") or os.getcwd())


def _resolve(value: str, info: ValidationInfo) -> str:
    if not value or "\x00" in value:
        raise _problem("empty path or NUL byte in path", "a file or directory path")
    return os.path.realpath(os.path.join(_base_dir(info), os.path.expanduser(value)))


def _absolute(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise _problem(f"not an absolute path: {value!r}", "an absolute path such as /usr")
    return os.path.normpath(value)


def _kernel_audit_word(value: Any) -> Any:
    """``kernel_audit: off`` written unquoted, as the shipped policies' comments show it, is YAML 1.1's ``False``
    (so are ``no`` and ``false``): that is ``off``. ``True`` (``on``, ``yes``) could be ``enable`` or ``use``."""
    if value is False:
        return "off"
    if value is True:
        raise _problem(
            "YAML reads an unquoted on, yes or true as a boolean, which does not say which of enable or use is meant",
            "one of enable, use, off",
        )
    return value


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value))
    except ValueError as exc:
        raise _problem(f"invalid network {value!r}: {exc}", "a CIDR such as 10.0.0.0/8 or fd00::/8") from exc


def _env(values: dict[str, str]) -> dict[str, str]:
    for name, value in values.items():
        if not _ENV_NAME_RE.match(name):
            raise _problem(f"invalid environment variable name {name!r}", "letters, digits and '_'")
        if "\x00" in value:
            raise _problem(f"the value of {name} contains a NUL byte")
    return values


Size = Annotated[
    int,
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][iI]?[Bb]|[Bb])?\s*$"},
            ]
        }
    ),
]


def _toolbox_key(value: str) -> str:
    if not _TOOLBOX_KEY_RE.match(value):
        raise _problem(f"invalid toolbox key {value!r}", "a toolbox name, or agent-slug/name")
    return value


ToolboxKey = Annotated[
    str, AfterValidator(_toolbox_key), WithJsonSchema({"type": "string", "pattern": _TOOLBOX_KEY_RE.pattern})
]


def _named(value: str, info: ValidationInfo) -> str:
    """An agent file's path as the policy names it, made absolute but not resolved (a slug may be bound to the
    name: ``plan/_agent_bindings.py``)."""
    if not value or "\x00" in value:
        raise _problem("empty path or NUL byte in path", "a file path")
    return os.path.join(_base_dir(info), os.path.expanduser(value))


PolicyPath = Annotated[str, AfterValidator(_resolve)]
NamedPath = Annotated[str, AfterValidator(_named)]
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Env = Annotated[dict[str, str], AfterValidator(_env)]


class Limits(_Model):
    """Per-toolbox limits. ``None`` = no limit of that kind (the inherited one stays)."""

    address_space_bytes: Size | None = Field(
        default=1024**3,
        description="RLIMIT_AS of the worker and children, only where no cgroup memory limit "
        "(memory_bytes) is in force",
    )
    cpu_seconds: int | None = Field(
        default=600, ge=1, le=MAX_SIZE, description="RLIMIT_CPU: CPU seconds per process, over its whole life"
    )
    wall_time_s: float = Field(default=60.0, gt=0, description="wall-clock limit of one call")
    open_files: int | None = Field(
        default=1024,
        ge=16,
        le=1 << 20,
        description="RLIMIT_NOFILE per process (at most fs.nr_open); 1024 fits Node and Python MCP servers "
        "(docs/DECISIONS.md, 'open_files')",
    )
    file_size_bytes: Size | None = Field(default=256 * 1024**2, description="RLIMIT_FSIZE: largest file written")
    processes: int | None = Field(
        default=64,
        ge=1,
        le=1 << 22,
        description="pids.max of the worker's cgroup: processes and threads of its whole tree",
    )
    memory_bytes: Size | None = Field(
        default=1024**3, ge=1, description="memory limit of the worker's cgroup: its whole tree, page cache included"
    )
    cpus: float | None = Field(
        default=None,
        ge=0.01,
        le=4096,
        description="CPU bandwidth of the worker's cgroup, its whole tree, in CPUs (0.5 = half of one CPU); "
        "null = none",
    )
    output_bytes: Size = Field(default=1024**2, ge=1, description="cap on a call's output; more is cut, truncated set")
    max_concurrent_calls: int = Field(default=8, ge=1, le=4096, description="calls in flight in one worker")


@overrides(Limits)
class LimitsOverride(Override):
    """Per-toolbox overrides: only the keys written replace the defaults (``null`` = no limit)."""


class ToolboxPolicy(_Model):
    """What the policy adds for one toolbox (key: its name, or ``agent-slug/name``)."""

    limits: LimitsOverride = LimitsOverride()
    allowed_hosts: list[Annotated[str, AfterValidator(check_host)]] = Field(
        default=[],
        description="hosts added to what the agent file grants: a name, '*.suffix' or IP, each with an "
        "optional ':port' or ':first-last' range ('api.example.com:443', '[2001:db8::1]:443'); no port: any port",
    )
    cname_targets: list[Annotated[str, AfterValidator(check_cname_target)]] = Field(
        default=[],
        description="names an allowed host may be an alias (CNAME) of without being allowed itself "
        "('*.fastly.net'); '*': any name. Otherwise a CNAME target must be allowed by the toolbox's hosts",
    )
    env: Env = Field(default={}, description="variables added to worker_env for this toolbox")
    read_paths: list[AbsolutePath] = Field(
        default=[],
        description="absolute paths this toolbox's workers may read and execute, besides the system_paths every "
        "worker sees (an npm or pip install the toolbox runs, a data folder); read-only, to this toolbox alone",
    )
    xattrs: bool = Field(
        default=False,
        description="let this toolbox's workers use extended attributes (the "
        "setxattr/getxattr/listxattr/removexattr system calls); false: they answer EOPNOTSUPP",
    )
    start: Literal["eager", "lazy"] = Field(
        default="eager",
        description="eager: the worker starts with the supervisor; lazy: on its first call, its "
        "tools listed until then from the supervisor's cache of its last list (or one start, then stopped)",
    )
    spawn: Literal["launcher"] | None = Field(
        default=None,
        description="launcher: this toolbox's worker is a fresh exec (its own address layout, stack-canary seed "
        "and Python hash seed; a zygote's forks share the zygote's), at the cost of an interpreter start at each "
        "worker start; null: supervision.spawn",
    )
    credentials: list[CredentialName] = Field(
        default=[],
        description="credentials (policy's credentials) the egress proxy adds to this toolbox's "
        "requests to their bound hosts, besides those its agent file references",
    )
    credential_env: dict[EnvName, CredentialName] = Field(
        default={},
        description="environment variables set to a credential's placeholder (for tools that insist "
        "on a variable); grants the credential as credentials does",
    )
    tls_termination: bool = Field(
        default=False,
        description="the egress proxy terminates this toolbox's TLS (CONNECT tunnels) with a "
        "certificate of the supervisor's own CA, which only this worker trusts, so credentials reach code that "
        "speaks TLS itself (MCP servers, bash tools); the upstream is verified against the system store",
    )
    validation: ValidationOverride = Field(
        default=ValidationOverride(), description="this toolbox's own argument checks (the policy's validation)"
    )
    allow_loopback: bool = Field(
        default=False,
        description="the host's loopback is reachable by this toolbox's entries localhost, 127.0.0.1 and ::1 "
        "(never the supervisor's own listening ports); false: an agent file's localhost reaches nothing",
    )
    allow_private_ranges: list[Cidr] = Field(
        default=[],
        description="private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, ...) this toolbox's proxy "
        "may dial, besides network.allow_private_ranges; an agent file's IP literal opens none",
    )


class Network(_Model):
    allow_private_ranges: list[Cidr] = Field(
        default=[], description="private ranges the egress proxy may dial, for every toolbox"
    )
    allow_loopback: bool = Field(
        default=False,
        description="the host's loopback is reachable by every toolbox's entries localhost, 127.0.0.1 and ::1 "
        "(never the supervisor's own listening ports); per toolbox: toolboxes.<agent>/<name>.allow_loopback",
    )


SessionScope = Literal["parents-only", "children-only", "subtree", "all"]


class Introspection(_Model):
    """Caps on the System toolbox's session capabilities (an agent file can only narrow them)."""

    scopes: list[SessionScope] = Field(
        default=["parents-only", "children-only", "subtree", "all"],
        description="the SessionIntrospectionScope values agent files may set; another one is refused at load",
    )
    tool_outputs: bool = Field(
        default=True, description="whether agent files may set SessionIntrospectionIncludeToolOutputs: true"
    )
    other_agents: bool = Field(
        default=False,
        description="whether introspection sees sessions of other agents outside the caller's own call tree (the "
        "caller's session from a sub-agent, every agent's under scope all); false: only the caller's agent's own "
        "sessions and its own call tree (the sub-agent runs its session asked for, whatever their agents)",
    )


class Sessions(_Model):
    max_calls: int | None = Field(default=None, ge=1, description="calls per session; null = no cap")
    max_concurrent_calls: int = Field(default=16, ge=1)
    keep_days: float | None = Field(
        default=30,
        gt=0,
        description="sessions (turns, tool calls) not modified for this long are deleted; null = keep all",
    )
    introspection: Introspection = Field(default=Introspection(), description="caps on session introspection")


class AgentLoop(_Model):
    """Bounds of every sub-agent loop the supervisor runs (``io_prompt_agent_<slug>``, ``agents-supervise run``)."""

    max_steps: int = Field(default=16, ge=1, description="model requests per loop before it ends with an error")
    retries: int = Field(default=3, ge=0, description="retries of one model request after a transient error")
    backoff_initial_s: float = Field(default=0.5, ge=0, description="wait before the first retry; doubles")
    backoff_max_s: float = Field(default=10.0, ge=0, description="longest wait between retries")
    request_timeout_s: float = Field(default=120.0, gt=0, description="wall time of one model request")
    # What the policy opens to model endpoints (an agent file's modelUrl opens no address class): the same address
    # rules as the egress proxy's (supervisor/agents/_model_network.py, docs/NETWORK.md "Model requests").
    allow_loopback: bool = Field(
        default=False,
        description="model endpoints on the host's loopback (modelUrl host localhost, 127.0.0.1 or ::1: a local "
        "model such as ollama) are reachable, for every agent; never the supervisor's own listening ports; bound "
        "which agents may name them with ceilings.<slug>.model_hosts",
    )
    allow_private_ranges: list[Cidr] = Field(
        default=[],
        description="private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, ...) model endpoints may be "
        "in, for every agent; an agent file's modelUrl opens none",
    )

    @model_validator(mode="after")
    def _ordered(self) -> AgentLoop:
        if self.backoff_initial_s > self.backoff_max_s:
            raise _problem("backoff_initial_s is larger than backoff_max_s", "backoff_initial_s <= backoff_max_s")
        return self


class Supervision(_Model):
    """How workers are started and restarted (the policy's ``supervision``; the restarts: ``workers/_runner.py``)."""

    restart_backoff_initial_s: float = Field(default=0.1, gt=0)
    restart_backoff_max_s: float = Field(default=30.0, gt=0)
    crash_loop_max_restarts: int = Field(default=5, ge=0)
    crash_loop_window_s: float = Field(default=60.0, gt=0)
    #: how long a toolbox stays down after a crash loop before it is started afresh
    crash_loop_cooldown_s: float = Field(default=300.0, gt=0, le=86400 * 7)
    shutdown_grace_s: float = Field(default=2.0, ge=0)
    parallel_starts: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="workers started at once when the supervisor starts (the rest wait for a place); null = 4 per "
        "CPU for launchers, 32 per CPU when the zygote forks them",
    )
    spawn: Literal["zygote", "launcher"] = Field(
        default="zygote",
        description=(
            "who makes a worker's process: zygote (forked by the supervisor's fork server, which has the worker "
            "code imported; the launcher when the zygote cannot run) or launcher (a fresh interpreter each)"
        ),
    )

    @model_validator(mode="after")
    def _ordered(self) -> Supervision:
        if self.restart_backoff_initial_s > self.restart_backoff_max_s:
            raise _problem(
                "restart_backoff_initial_s is larger than restart_backoff_max_s",
                "restart_backoff_initial_s <= restart_backoff_max_s",
            )
        return self


_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")


def _otel_endpoint(value: str) -> str:
    match = re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value)
    if not match:
        raise _problem(f"invalid OTLP endpoint {value!r}", "an http:// or https:// URL such as http://127.0.0.1:4318")
    return value.rstrip("/")


def _otel_headers(values: dict[str, str]) -> dict[str, str]:
    for name, value in values.items():
        if not _HEADER_NAME_RE.match(name):
            raise _problem(f"invalid HTTP header name {name!r}", "letters, digits and -")
        if any(c in value for c in "\r\n\x00"):
            raise _problem(f"the value of header {name} contains a line break or NUL")
    return values


class OtelExport(_Model):
    """OpenTelemetry export of the trace (``supervisor/traces/_otel.py``, docs/TRACES.md); off unless ``enabled``."""

    enabled: bool = Field(default=False, description="export one span per tool call over OTLP/HTTP")
    endpoint: Annotated[str, AfterValidator(_otel_endpoint)] = Field(
        default="http://127.0.0.1:4318", description="OTLP/HTTP base URL (/v1/traces is added) or the full URL"
    )
    service_name: str = Field(default="agents-supervise", min_length=1, max_length=256)
    headers: Annotated[dict[str, str], AfterValidator(_otel_headers)] = Field(
        default={}, description="HTTP headers of every export request (never traced)"
    )
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="one export request; also the flush at stop")
    include_arguments: bool = Field(default=False, description="export call arguments (may hold secrets)")


class Trace(_Model):
    path: PolicyPath | None = Field(default=None, description="JSONL file; default <state_dir>/trace.jsonl")
    max_bytes: Size | None = Field(
        default=256 * 1024**2,
        ge=4096,
        description="rotate the file to <path>.1 past this size (disk use stays under about twice it); null = never",
    )
    otel: Annotated[OtelExport, BeforeValidator(lambda v: {"enabled": v} if isinstance(v, bool) else v)] = Field(
        default=OtelExport(), description="OpenTelemetry export: false, true (the defaults) or a section"
    )


class Images(_Model):
    max_bytes: Size = Field(default=5 * 1024**2, ge=1, description="largest image a result may carry")


class Audio(_Model):
    max_bytes: Size = Field(default=10 * 1024**2, ge=1, description="largest audio a result may carry")


class Files(_Model):
    max_bytes: Size = Field(
        default=10 * 1024**2, ge=1, description="largest other media (PDF, video, binary, text file) a result may carry"
    )


class Context(_Model):
    """Limits on the media a result carries, per class (``toolboxes/_media.class_of``); larger ones are refused
    with a note."""

    images: Images = Images()
    audio: Audio = Audio()
    files: Files = Files()
    max_total_bytes: Size = Field(
        default=32 * 1024**2,
        ge=1,
        description="all media of one result together; attachments past it are refused with a note (each is also "
        "held to its class's max_bytes)",
    )

    def media_limits(self) -> dict[str, int]:
        """Each class's limit, and ``total``: all of one result's media together."""
        return {
            "images": self.images.max_bytes,
            "audio": self.audio.max_bytes,
            "files": self.files.max_bytes,
            "total": self.max_total_bytes,
        }


def _model_key(value: str, info: ValidationInfo) -> str:
    if _ENV_NAME_RE.match(value):
        return value
    if "/" in value:
        return _resolve(value, info)
    raise _problem(f"invalid key source {value!r}", "an environment variable name or a key file path with a '/'")


class WorkerUids(_Model):
    """A uid of its own for every worker, with the same number as its own gid: ``first`` .. ``first + count - 1``,
    recorded in the state dir's identity table (kept by each toolbox from run to run and across supervisors) and in
    the host-wide uid registry (never given to another toolbox, whatever its state dir). The default of a policy
    (``null`` in the file: every worker runs as ``sandbox_uid``)."""

    first: int = Field(ge=1000, le=4294967294, description="first uid of the range (not a uid in use on the host)")
    count: int = Field(default=65536, ge=1, le=1 << 24, description="how many uids the range holds")
    registry: AbsolutePath | None = Field(
        default=None,
        description="the directory of the host-wide uid registry, which every supervisor on the host shares so that "
        "no uid is given to two toolboxes, whatever their state dirs (root's, mode 0700); null = "
        "$AGENTS_SUPERVISE_UID_REGISTRY, else /var/lib/agents-supervise-uids",
    )

    @model_validator(mode="after")
    def _fits(self) -> WorkerUids:
        if self.first + self.count - 1 > 4294967294:
            raise _problem(
                f"the range {self.first}..{self.first + self.count - 1} passes the largest uid, 4294967294",
                "first + count - 1 <= 4294967294",
            )
        return self


class SharedGroup(_Model):
    """An explicit grant: a group the named toolboxes get as a supplementary group, for folders they all write.
    The operator gives such a folder to the group (``chgrp -R GID DIR && chmod -R g+rwX DIR`` and ``g+s`` on its
    folders, so new files stay in the group); workers create files group-writable (umask 002)."""

    gid: int = Field(ge=1, le=4294967294, description="the group (not root's; outside the worker_uids range)")
    toolboxes: list[ToolboxKey] = Field(min_length=1, description="agent-slug/toolbox keys of the toolboxes in it")


_TOKEN_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _listen(value: str) -> str:
    from ._http_address import parse_listen

    try:
        parse_listen(value)
    except ValueError as exc:
        raise _problem(str(exc), "HOST:PORT, for example 127.0.0.1:8765 or [::1]:8765") from exc
    return value


def _origin(value: str) -> str:
    from ._http_address import normalise_origin

    try:
        return normalise_origin(value)
    except ValueError as exc:
        raise _problem(str(exc), "an origin such as https://app.example.com (scheme, host, optional port)") from exc


def _server_name(value: str) -> str:
    from ._http_address import normalise_host_name

    try:
        return normalise_host_name(value)
    except ValueError as exc:
        raise _problem(str(exc), "a host name such as tools.example.com") from exc


def _public_url(value: str) -> str:
    if not re.match(r"^https?://[^/?#\s]+$", value):
        raise _problem(f"invalid public_url {value!r}", "scheme and authority only, such as https://tools.example.com")
    return value


def _jwks_url(value: str) -> str:
    from ._http_address import is_loopback_url

    if not (value.startswith("https://") or is_loopback_url(value)):
        raise _problem(f"the JWKS is fetched over https only: {value!r}", "an https:// URL (http:// on loopback only)")
    return value


def _token_hash(value: str) -> str:
    if not _TOKEN_HASH_RE.match(value):
        raise _problem(
            "a static token is stored as its hash, never in clear",
            "sha256:<64 lowercase hex digits> (agents-supervise hash-token prints it)",
        )
    return value


def _slug(value: str) -> str:
    if not _SLUG_RE.match(value):
        raise _problem(f"invalid agent slug {value!r}", "an agent's slug")
    return value


def _ceiling_key(value: str) -> str:
    return value if value == "*" else _slug(value)


class TlsFiles(_Model):
    """A certificate chain and its private key (PEM files), for HTTPS."""

    cert: PolicyPath = Field(description="PEM certificate chain, leaf first")
    key: PolicyPath = Field(description="PEM private key of the leaf (readable by root only)")


class HttpFrontend(_Model):
    """MCP over Streamable HTTP (``agents-supervise serve --http``); every request is authenticated (``tenants``)."""

    listen: Annotated[str, AfterValidator(_listen)] = Field(
        default="127.0.0.1:8765", description="HOST:PORT to listen on; loopback unless you mean it"
    )
    tls: TlsFiles | None = Field(default=None, description="serve HTTPS with these files; null = plain HTTP")
    public_url: Annotated[str, AfterValidator(_public_url)] | None = Field(
        default=None, description="the URL clients reach this server at (OAuth resource); default from listen"
    )
    allowed_origins: list[Annotated[str, AfterValidator(_origin)]] = Field(
        default=[], description="Origin values of browser clients let in (a request with another Origin gets 403)"
    )
    max_body_bytes: Size = Field(default=4 * 1024**2, ge=1024, description="largest request body")
    max_body_bytes_in_flight: Size = Field(
        default=64 * 1024**2,
        ge=1024,
        description="request-body bytes held at once, all tenants together (never less than max_body_bytes)",
    )
    max_requests_in_flight: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="requests being answered at once, all tenants together; one more is answered 503 + Retry-After",
    )
    max_sessions: int = Field(default=10000, ge=1, description="MCP sessions held at once, all tenants together")
    session_idle_s: float = Field(default=900.0, gt=0, description="a session unused this long is ended")
    sse_keepalive_s: float = Field(default=15.0, gt=0, description="comment line sent on an idle SSE stream")
    max_connections: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description=("TCP connections open at once, all clients together; one more is answered 503 and closed"),
    )
    keepalive_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description=("an open connection with no request for this long is closed; also the bound on reading a request"),
    )
    head_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description=(
            "a request head must arrive whole within this, however it trickles in (a connection that has not "
            "authenticated: from its accept or the end of its last answer)"
        ),
    )
    unauthenticated_share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="the share of max_connections that connections which have not authenticated may hold",
    )
    max_unauthenticated_per_peer: int = Field(
        default=256, ge=1, le=1_000_000, description="connections that have not authenticated, from one address"
    )
    max_connections_per_tenant: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description=(
            "connections one tenant holds at once (a connection is the tenant's whose request came last on it); past "
            "it the tenant's idle keep-alive connections are closed first, else its request is answered 429; "
            "null = max_connections / max(2, number of tenants); tenants.<name>.limits.connections overrides it"
        ),
    )
    server_names: list[Annotated[str, AfterValidator(_server_name)]] = Field(
        default=[],
        description=(
            "host names clients reach this server by, besides localhost, IP addresses, the listen address and "
            "public_url's host (a request naming another Host is refused: DNS rebinding)"
        ),
    )
    drain_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description=(
            "after SIGTERM, serve on this long with /readyz answering 503 (so a load balancer takes the instance "
            "out first), then stop; 0 = stop at once"
        ),
    )


class Frontends(_Model):
    http: HttpFrontend | None = Field(default=None, description="MCP over Streamable HTTP; null = stdio only")


class OAuthResourceServer(_Model):
    """OAuth 2.1 resource-server mode: JWT access tokens checked against the issuer's keys (RFC 9068, 8707, 9728)."""

    issuer: str = Field(min_length=1, description="the iss every token must carry")
    authorization_servers: list[str] = Field(
        default=[], description="announced in the protected-resource metadata; default [issuer]"
    )
    jwks_file: PolicyPath | None = Field(default=None, description="the issuer's public keys (a JWK Set file)")
    jwks_url: Annotated[str, AfterValidator(_jwks_url)] | None = Field(
        default=None, description="or where to fetch them (https; fetched at start)"
    )
    algorithms: list[
        Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
    ] = Field(default=["RS256", "ES256", "EdDSA"])
    tenant_claim: str = Field(default="tenant", min_length=1, description="the claim naming the tenant")
    required_scopes: list[str] = Field(default=[], description="scopes every token must hold (scope claim)")
    leeway_s: int = Field(default=30, ge=0, le=600, description="clock skew allowed on exp and nbf")

    @model_validator(mode="after")
    def _one_key_source(self) -> OAuthResourceServer:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise _problem("oauth needs exactly one of jwks_file and jwks_url")
        return self


class TenantLimits(_Model):
    calls_per_second: float | None = Field(default=None, gt=0, description="tool calls per second; null = no cap")
    concurrent_calls: int = Field(default=16, ge=1, description="tool calls in flight at once")
    sessions: int = Field(default=64, ge=1, description="MCP sessions held at once")
    sse_streams: int = Field(default=16, ge=1, description="open SSE streams at once")
    connections: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="TCP connections held at once; null = frontends.http.max_connections_per_tenant",
    )
    body_bytes_in_flight: Size = Field(
        default=16 * 1024**2,
        ge=1024,
        description="request-body bytes the tenant's requests hold at once (never less than max_body_bytes)",
    )


class Tenant(_Model):
    """Who may use the HTTP frontend: credentials, the agents it may use, its limits."""

    tokens: list[Annotated[str, AfterValidator(_token_hash)]] = Field(
        default=[], description="static bearer tokens, each stored as sha256:<hex>"
    )
    agents: list[Annotated[str, AfterValidator(_slug)]] = Field(
        min_length=1,
        description="the agent slugs this tenant may use: its endpoints, and the agents the policy names that its "
        "agents may prompt as sub-agents",
    )
    limits: TenantLimits = TenantLimits()
    budget: BudgetOverride = Field(
        default=BudgetOverride(),
        description="this tenant's own call-tree budgets: the keys written replace the policy's budget",
    )
    ceiling: Ceiling | None = Field(
        default=None,
        description="the most the agent files of this tenant's agents (and their sub-agents) may grant: hosts, "
        "capabilities",
    )


class Policy(_Model):
    """The policy file. See ``policies/strict.yaml`` for every key, commented."""

    agents: list[NamedPath] = Field(default=[], description="agent files, relative to the policy file")
    state_dir: PolicyPath = DEFAULT_STATE_DIR
    sandbox_uid: int = Field(default=65534, ge=1, le=MAX_ID, description="uid workers run as (never root)")
    sandbox_gid: int = Field(
        default=65534,
        ge=1,
        le=MAX_ID,
        description="gid workers run as with worker_uids null (each worker has a gid of its own otherwise)",
    )
    worker_uids: WorkerUids | None = Field(
        default=WorkerUids(first=3_000_000_000),
        description="a uid of its own for every worker from this range; null = all run as sandbox_uid",
    )
    strict: bool = Field(default=True, description="refuse to start when the kernel cannot enforce the policy")
    landlock_min_abi: int = Field(default=1, ge=0, le=64)
    inexact_predicates: Literal["refuse", "warn"] = "refuse"
    kernel_audit: Annotated[Literal["enable", "use", "off"], BeforeValidator(_kernel_audit_word)] = Field(
        default="enable",
        description="read the kernel's audit records to say which Landlock rule or seccomp filter refused a call: "
        "enable = turn the host's audit on if it is off (it stays on), use = only if it is already on, "
        "off = never (failed calls' 'Permission denied' paths are then explained from the rules)",
    )
    private_view: bool = Field(
        default=True,
        description="each worker gets a root of its own holding only the paths it is granted (a fresh /tmp, "
        "/dev/shm and /proc, /etc files naming only the worker, its own host name); false: workers see "
        "the host's tree and Landlock alone decides what they may open",
    )
    system_paths: list[AbsolutePath] = Field(
        default=list(DEFAULT_SYSTEM_PATHS), description="read-only (and execute) paths every worker sees"
    )
    device_paths: list[AbsolutePath] = Field(default=["/dev/null"], description="read-write device files")
    worker_env: Env = Field(default={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
    limits: Limits = Limits()
    toolboxes: dict[ToolboxKey, ToolboxPolicy] = Field(
        default={},
        description="per toolbox, keyed agent-slug/name; a bare name only while one agent has a "
        "toolbox of that name (an error once two have)",
    )
    shared_groups: list[SharedGroup] = Field(
        default=[], description="supplementary groups for folders several toolboxes write (explicit grants)"
    )
    network: Network = Network()
    max_call_depth: int = Field(default=4, ge=0)
    validation: Validation = Field(
        default=Validation(), description="how tool-call arguments are checked (the seed's ValidationConfig)"
    )
    sessions: Sessions = Sessions()
    agent_loop: AgentLoop = Field(default=AgentLoop(), description="bounds of sub-agent loops (model requests)")
    budget: Budget = Field(
        default=Budget(),
        description="what one root call's whole call tree may use (model requests, tool calls, wall time)",
    )
    supervision: Supervision = Supervision()
    trace: Trace = Trace()
    context: Context = Context()
    model_keys: dict[str, Annotated[str, AfterValidator(_model_key)]] = Field(
        default={}, description="apiKeyId -> environment variable name, or key file path (with a '/')"
    )
    frontends: Frontends = Frontends()
    oauth: OAuthResourceServer | None = Field(default=None, description="accept OAuth JWT access tokens over HTTP")
    tenants: dict[Annotated[str, AfterValidator(_slug)], Tenant] = Field(
        default={}, description="who may use the HTTP frontend"
    )
    ceilings: dict[Annotated[str, AfterValidator(_ceiling_key)], Ceiling] = Field(
        default={},
        description="the most an agent file may grant its toolboxes, per agent slug ('*': every agent): hosts its "
        "AllowedHosts may name, capabilities it may not enable; past it is a load error naming the key",
    )
    credentials: dict[CredentialName, CredentialPolicy] = Field(
        default={},
        description="secrets the egress proxy adds to toolboxes' requests to the hosts each is bound "
        "to; a worker holds at most a placeholder (docs/CREDENTIALS.md)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.strict and self.landlock_min_abi < 1:
            raise _problem("strict: true needs landlock_min_abi of at least 1", "landlock_min_abi >= 1")
        for i, group in enumerate(self.shared_groups):
            ranged = self.worker_uids
            if ranged is not None and ranged.first <= group.gid < ranged.first + ranged.count:
                raise _problem(
                    f"shared_groups[{i}].gid {group.gid} is in the worker_uids range, whose numbers are "
                    "the workers' own groups",
                    "a gid outside worker_uids",
                )
        for key, tb in self.toolboxes.items():
            for name in [*tb.credentials, *tb.credential_env.values()]:
                if name not in self.credentials:
                    raise _problem(
                        f"toolboxes.{key} names the credential {name!r}, which credentials does not define",
                        "a name among credentials: " + (", ".join(self.credentials) or "none"),
                    )
        if self.trace.path is None:
            object.__setattr__(
                self,
                "trace",
                self.trace.model_copy(update={"path": os.path.join(self.state_dir, "trace.jsonl")}),
            )
        return self

    def toolbox_policy(self, name: str, agent_slug: str | None = None) -> ToolboxPolicy:
        """The policy entry for a toolbox: ``slug/name`` if present, else ``name``, else the defaults."""
        if agent_slug is not None and f"{agent_slug}/{name}" in self.toolboxes:
            return self.toolboxes[f"{agent_slug}/{name}"]
        return self.toolboxes.get(name, ToolboxPolicy())

    def effective_limits(self, name: str, agent_slug: str | None = None) -> Limits:
        """``limits`` with the toolbox's overrides applied (only the keys the override wrote)."""
        return self.toolbox_policy(name, agent_slug).limits.applied_to(self.limits)

    def effective_validation(self, name: str, agent_slug: str | None = None) -> Validation:
        """``validation`` with the toolbox's overrides applied (only the keys the override wrote)."""
        return self.toolbox_policy(name, agent_slug).validation.applied_to(self.validation)

    def shared_gids(self, name: str, agent_slug: str) -> tuple[int, ...]:
        """The ``shared_groups`` the toolbox is in (by ``slug/name``, or by bare ``name``)."""
        keys = {f"{agent_slug}/{name}", name}
        return tuple(sorted({g.gid for g in self.shared_groups if keys & set(g.toolboxes)}))

    def loopback_for(self, name: str, agent_slug: str | None = None) -> bool:
        """Whether the policy opens the host's loopback to the toolbox (``network`` or its own
        ``allow_loopback``)."""
        return self.network.allow_loopback or self.toolbox_policy(name, agent_slug).allow_loopback

    def private_ranges_for(self, name: str, agent_slug: str | None = None) -> tuple[str, ...]:
        """The private ranges the toolbox's proxy may dial: ``network``'s and its own."""
        own = self.toolbox_policy(name, agent_slug).allow_private_ranges
        return tuple(dict.fromkeys([*self.network.allow_private_ranges, *own]))

    def worker_env_for(self, name: str, agent_slug: str | None = None) -> dict[str, str]:
        """``worker_env`` plus the toolbox's ``env`` extras."""
        return {**self.worker_env, **self.toolbox_policy(name, agent_slug).env}


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the policy file."""
    schema = Policy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    otel = schema["$defs"]["Trace"]["properties"]["otel"]
    otel["anyOf"] = [{"type": "boolean"}, {"$ref": otel.pop("$ref")}] if "$ref" in otel else [{"type": "boolean"}]
    schema.setdefault("title", "agents-supervise policy")
    return schema
