"""The policy and agent files: their models, loading with bounds, and the errors they raise."""

from ._agent_loader import load_agent_file
from ._agent_loop import AgentLoop
from ._agent_schema import agent_json_schema
from ._agent_toolboxes import LoadedAgent, ToolboxConfig
from ._agent_tree import AgentTree, expand_agents
from ._ceilings import ANY_HOST, HTTP_METHODS, Ceiling
from ._credentials import CredentialPolicy, CredentialSource, binding_of, reference_environ
from ._errors import ConfigError, ConfigProblem, display_path
from ._http_address import host_is_served, normalise_origin, parse_listen, public_url_for, served_host_names
from ._http_frontend import HttpFrontend
from ._load_errors import LoadError, load_error_line, load_error_owner, load_error_reason, toolbox_not_loaded
from ._loader import LoadedConfig, load_config
from ._policy import DEFAULT_SYSTEM_PATHS, Policy, policy_json_schema
from ._sessions_policy import Introspection
from ._subagent_rules import SubagentLink, path_within
from ._supervision import Supervision
from ._tenants import OAuthResourceServer, Tenant
from ._trace_policy import OtelExport

__all__ = [
    "ANY_HOST",
    "DEFAULT_SYSTEM_PATHS",
    "HTTP_METHODS",
    "AgentLoop",
    "AgentTree",
    "Ceiling",
    "ConfigError",
    "ConfigProblem",
    "CredentialPolicy",
    "CredentialSource",
    "HttpFrontend",
    "Introspection",
    "LoadError",
    "LoadedAgent",
    "LoadedConfig",
    "OAuthResourceServer",
    "OtelExport",
    "Policy",
    "SubagentLink",
    "Supervision",
    "Tenant",
    "ToolboxConfig",
    "agent_json_schema",
    "binding_of",
    "display_path",
    "expand_agents",
    "host_is_served",
    "load_agent_file",
    "load_config",
    "load_error_line",
    "load_error_owner",
    "load_error_reason",
    "normalise_origin",
    "parse_listen",
    "path_within",
    "policy_json_schema",
    "public_url_for",
    "reference_environ",
    "served_host_names",
    "toolbox_not_loaded",
]
