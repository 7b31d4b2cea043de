"""What the policy adds for one toolbox (``toolboxes.<agent-slug>/<name>``: limits, hosts, environment, read
paths, credentials, start and spawn) and for every toolbox's network (``network``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ._credentials import CredentialName, EnvName
from ._limits import LimitsOverride
from ._model import StrictModel
from ._policy_fields import AbsolutePath, Cidr, Env
from ._types import check_cname_target, check_host
from ._validation_settings import ValidationOverride

__all__ = ["Network", "ToolboxPolicy"]


class ToolboxPolicy(StrictModel):
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


class Network(StrictModel):
    allow_private_ranges: list[Cidr] = Field(
        default=[], description="private ranges the egress proxy may dial, for every toolbox"
    )
    allow_loopback: bool = Field(
        default=False,
        description="the host's loopback is reachable by every toolbox's entries localhost, 127.0.0.1 and ::1 "
        "(never the supervisor's own listening ports); per toolbox: toolboxes.<agent>/<name>.allow_loopback",
    )
