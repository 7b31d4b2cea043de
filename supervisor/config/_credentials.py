"""The policy's ``credentials`` section: secrets the egress proxy adds to a toolbox's requests, never a worker's.

Each entry (key: the credential's name, letters, digits and ``_``) says where the value comes from (``source``:
exactly one of ``env`` (a variable of the supervisor's environment), ``file`` (an absolute path of a file only root
can read) or ``command`` (an argv the supervisor runs; its standard output is the value)), where it may be sent
(``bindings``: ``hosts``, optional ``ports``, ``schemes`` (default ``https``), ``path_prefixes``) and how
(``header: "Authorization: Bearer {value}"``, or ``query: api_key``, or neither: then only its placeholder is
swapped where a request carries it). The values are read by :mod:`._credential_values`; the matching and the
injection are :mod:`sandbox._credentials`'s.

A toolbox uses a credential when its agent file references it (``Token: "${NAME}"``, or a ``Headers`` value, where
``NAME`` is the credential's name or its ``env`` source: :func:`reference_environ` makes such a reference expand to
the placeholder, never to the value) or when its policy entry grants it (``toolboxes.<name>.credentials``, or
``credential_env``, which also puts the placeholder in an environment variable of the worker for tools that insist
on one).
"""

from __future__ import annotations

import re
from collections import ChainMap
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from sandbox import NAME_RE, CredentialBinding, HostError, placeholder

from ._errors import problem
from ._model import StrictModel as _Model

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CredentialBindingPolicy",
    "CredentialName",
    "CredentialPolicy",
    "CredentialSource",
    "EnvName",
    "binding_of",
    "reference_environ",
]

_HEADER_RE = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*)$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def _credential_name(value: str) -> str:
    if not NAME_RE.match(value):
        raise problem(
            f"invalid credential name {value!r}",
            "1 to 64 letters, digits or '_' (it is part of the placeholder AGENTS_SUPERVISE_CREDENTIAL_<name>)",
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.match(value):
        raise problem(
            f"invalid environment variable name {value!r}", "letters, digits and '_', not starting with a digit"
        )
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise problem(f"the path {value!r} is not absolute", "an absolute path (/etc/agents-supervise/github.token)")
    return value


def _header(value: str) -> str:
    match = _HEADER_RE.match(value)
    if not match:
        raise problem(
            f"invalid header {value!r}",
            "'Name: template' with {value} in the template, such as 'Authorization: Bearer {value}'",
        )
    name, template = match.groups()
    if name.lower() in _HOP_BY_HOP:
        raise problem(
            f"the header {name} cannot carry a credential (the proxy sets it itself)",
            "a request header such as Authorization or X-Api-Key",
        )
    if template.count("{value}") != 1 or re.search(r"[\x00-\x1f\x7f]", template):
        raise problem(
            f"the header template {template!r} must hold {{value}} exactly once and no control character",
            "'Authorization: Bearer {value}'",
        )
    return value


def _path_prefix(value: str) -> str:
    if not value.startswith("/") or "?" in value or "#" in value or re.search(r"[\x00-\x20\x7f]", value):
        raise problem(f"invalid path prefix {value!r}", "a path starting with '/', without query or spaces: /v1/")
    return value


CredentialName = Annotated[str, AfterValidator(_credential_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]


class CredentialSource(_Model):
    """Where the value comes from: exactly one of ``env``, ``file``, ``command``."""

    env: EnvName | None = Field(default=None, description="a variable of the supervisor's environment")
    file: Annotated[str, AfterValidator(_absolute)] | None = Field(
        default=None,
        description="an absolute path of a regular file owned by root and readable by no one else "
        "(mode 0600 or 0400); opened without following links",
    )
    command: list[str] | None = Field(
        default=None,
        min_length=1,
        description="an argv the supervisor runs (no shell; the first word an "
        "absolute path); its standard output, without the final line break, is the value",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="how long the command may take")

    @model_validator(mode="after")
    def _one(self) -> CredentialSource:
        given = [k for k in ("env", "file", "command") if getattr(self, k) is not None]
        if len(given) != 1:
            raise problem(
                "a credential source needs exactly one of env, file, command"
                + (f" (found {', '.join(given)})" if given else ""),
                "{env: GITHUB_TOKEN}, {file: /etc/agents-supervise/github.token} or {command: [...]}",
            )
        if self.command is not None and not self.command[0].startswith("/"):
            raise problem(
                f"the command {self.command[0]!r} is not an absolute path",
                "the program's absolute path, such as /usr/local/bin/vault-read",
            )
        return self


class CredentialBindingPolicy(_Model):
    """Where a credential may be sent."""

    hosts: list[str] = Field(
        min_length=1, description="names (that name only), '*.suffix' (strict subdomains) or IP literals, without port"
    )
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default=[], description="the ports; empty: the scheme's default port (443, 80)"
    )
    schemes: list[Literal["https", "http"]] = Field(
        default=["https"],
        min_length=1,
        description="https, and http only when written (the value then crosses the network in clear text)",
    )
    path_prefixes: list[Annotated[str, AfterValidator(_path_prefix)]] = Field(
        default=[], description="path prefixes, matched at a '/' boundary; empty: any path"
    )

    @model_validator(mode="after")
    def _hosts_parse(self) -> CredentialBindingPolicy:
        binding_of(self)
        return self


def binding_of(model: CredentialBindingPolicy) -> CredentialBinding:
    """The proxy's form of a binding. Raises a config problem naming a malformed host."""
    try:
        return CredentialBinding(
            tuple(h.strip().lower() for h in model.hosts),
            tuple(model.ports),
            tuple(model.schemes),
            tuple(model.path_prefixes),
        )
    except HostError as exc:
        raise problem(
            f"invalid host in a credential binding: {exc}",
            "a name, '*.suffix' or an IP literal, without port (ports go in ports:)",
        ) from None
    except ValueError as exc:
        raise problem(f"invalid credential binding: {exc}", None) from None


class CredentialPolicy(_Model):
    """One credential: its source, where it may be sent, and how."""

    source: CredentialSource
    bindings: list[CredentialBindingPolicy] = Field(min_length=1, description="where the value may be sent")
    header: Annotated[str, AfterValidator(_header)] | None = Field(
        default=None,
        description="'Name: template', {value} in the template ('Authorization: Bearer {value}'); "
        "set on every request a binding matches, replacing a header of that name the client sent",
    )
    query: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.~-]{1,64}$")] | None = Field(
        default=None, description="a query parameter set to the value on every request a binding matches"
    )

    @model_validator(mode="after")
    def _how(self) -> CredentialPolicy:
        if self.header is not None and self.query is not None:
            raise problem(
                "a credential is sent as a header or as a query parameter, not both", "header: ... or query: ..."
            )
        return self

    def header_pair(self) -> tuple[str, str] | None:
        if self.header is None:
            return None
        match = _HEADER_RE.match(self.header)
        assert match is not None  # checked by the validator
        return match.group(1), match.group(2)


def reference_environ(credentials: Mapping[str, CredentialPolicy], environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` as agent files' ``${VAR}`` see it: a credential's name and its ``env`` source name expand to the
    credential's placeholder, so neither its value nor its source variable ever lands in a worker's config."""
    overlay: dict[str, str] = {}
    for name, cred in credentials.items():
        overlay[name] = placeholder(name)
        if cred.source.env is not None:
            overlay[cred.source.env] = placeholder(name)
    return ChainMap(overlay, dict(environ)) if overlay else environ
