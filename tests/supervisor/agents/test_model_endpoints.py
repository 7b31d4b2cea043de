"""An agent file's ``modelUrl`` opens no door: the supervisor (root, outside every sandbox) sends the agent loops'
model requests under the egress proxy's address rules (``supervisor/agents/_model_network.py``).

The model is the one part that cannot be real here: a scripted OpenAI-compatible server on this host's 127.0.0.1
(``tests/supervisor/_model_server.py``). The policy is the shipped ``strict.yaml`` unchanged, but for what names this
test's world (agents, state dir, the model key) and, where a test says so, the one key under test. Names are resolved
by a hostile resolver the test controls (``Supervisor.open(model_resolve=...)``, the hook the egress tests use for
the proxy): it answers private, loopback and metadata addresses for public-looking names, and counts what it is asked.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import yaml

from sandbox import Resolution, ResolveError
from supervisor._supervisor import Supervisor
from supervisor.agents._model_network import ModelAccess, ModelEndpointRefused, model_endpoint
from supervisor.config import AgentLoop, load_config
from supervisor.frontends._http_auth import hash_token, http_frontend_from_policy
from supervisor.frontends._http_server import serve_mcp_http
from tests._policies import agent, shipped_policy
from tests.supervisor._model_server import Reply, answer, model_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

STRICT = Path(__file__).resolve().parents[3] / "policies" / "strict.yaml"
KEY = "agent_loop.allow_loopback: true"


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "sk-test-0123456789abcdef")


def _policy(root: Path, models: dict[str, str], *, loop: dict[str, Any] | None = None, **settings: Any) -> Path:
    """strict.yaml naming agent ``main``, whose sub-agents are ``models`` (slug -> its modelUrl); ``loop`` adds keys to
    strict.yaml's own ``agent_loop``."""
    strict = yaml.safe_load(STRICT.read_text())
    extra = []
    for slug, url in models.items():
        (root / f"{slug}.json").write_text(json.dumps(agent(slug, modelUrl=url)))
        extra.append({"slug": slug, "path": f"{slug}.json"})
    (root / "main.json").write_text(json.dumps(agent("main", extraAgents=extra)))
    return shipped_policy(
        root,
        STRICT,
        [root / "main.json"],
        model_keys={"test": "AGENTS_TEST_KEY"},
        agent_loop={**strict["agent_loop"], "retries": 0, **(loop or {})},
        **settings,
    )


class HostileResolver:
    """Answers what the test says for each name (a public-looking name pointing anywhere), counting the questions."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str) -> Resolution:
        self.asked.append(host)
        if host not in self.answers:
            raise ResolveError(f"cannot resolve {host}", not_found=True)
        return Resolution(tuple(ipaddress.ip_address(a) for a in self.answers[host]))


async def test_under_strict_yaml_a_loopback_model_is_refused_naming_the_key(sandbox_tmp: Path) -> None:
    with model_server(lambda req: answer("hello")) as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        spellings = {
            "dotted": server.url,
            "short": f"http://127.1:{port}/v1",
            "hex": f"http://0x7f000001:{port}/v1",
            "name": f"http://LOCALHOST.:{port}/v1",
            "six": f"http://[::1]:{port}/v1",
            "mapped": f"http://[::ffff:127.0.0.1]:{port}/v1",
        }
        policy = _policy(sandbox_tmp, spellings)
        assert yaml.safe_load(policy.read_text())["agent_loop"]["allow_loopback"] is False  # strict.yaml's own
        async with Supervisor.open(policy) as sup:
            for slug in spellings:
                result = await sup.call(f"io_prompt_agent_{slug}", {"what": "hi"})
                assert result.status == "error", (slug, result.data)
                assert result.data is not None and f"agent {slug}: the policy refuses the model endpoint" in result.data
                if slug == "mapped":  # an IPv6 form carrying the loopback: judged by the IPv4 it carries
                    assert "carries IPv4-mapped 127.0.0.1" in result.data, result.data
                else:
                    assert KEY in result.data, (slug, result.data)
                assert result.meta("transient") == "false"  # not retried
    assert server.requests == []


async def test_the_policy_key_opens_a_local_model(sandbox_tmp: Path) -> None:
    with model_server(lambda req: answer("hello from the local model")) as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        models = {"dotted": server.url, "name": f"http://localhost:{port}/v1"}
        async with Supervisor.open(_policy(sandbox_tmp, models, loop={"allow_loopback": True})) as sup:
            for slug in models:
                result = await sup.call(f"io_prompt_agent_{slug}", {"what": "hi"})
                assert (result.status, result.data) == ("passed", "hello from the local model")
    assert len(server.requests) == 2
    assert server.headers[0]["authorization"] == "Bearer sk-test-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _serving(policy: Path) -> AsyncIterator[Supervisor]:
    settings, auth = await http_frontend_from_policy(load_config(str(policy)).policy)
    async with Supervisor.open(policy) as sup, trio.open_nursery() as nursery:
        await nursery.start(serve_mcp_http, sup, settings, auth)
        yield sup
        nursery.cancel_scope.cancel()


async def test_the_supervisors_own_http_port_is_refused_even_when_the_loopback_is_opened(sandbox_tmp: Path) -> None:
    own = _free_port()
    with model_server(lambda req: answer("local model")) as server:
        models = {"own": f"http://127.0.0.1:{own}/mcp", "ownname": f"http://localhost:{own}/", "local": server.url}
        policy = _policy(
            sandbox_tmp,
            models,
            loop={"allow_loopback": True},
            frontends={"http": {"listen": f"127.0.0.1:{own}"}},
            tenants={"acme": {"tokens": [hash_token("t0ken")], "agents": ["main"]}},
        )
        async with _serving(policy) as sup:
            assert sup.services.own_listeners.ports() == {own}  # the frontend recorded where it listens
            for slug in ("own", "ownname"):
                result = await sup.call(f"io_prompt_agent_{slug}", {"what": "hi"})
                assert result.status == "error" and result.data is not None
                assert f"127.0.0.1:{own} is a socket of the supervisor itself" in result.data, result.data
                assert "whatever the policy opens" in result.data
            assert (await sup.call("io_prompt_agent_local", {"what": "hi"})).data == "local model"  # opened
    assert len(server.requests) == 1


async def test_names_that_resolve_to_private_loopback_or_metadata_addresses_are_refused(sandbox_tmp: Path) -> None:
    resolver = HostileResolver(
        {
            "private.example.test": ["10.1.2.3"],
            "loop.example.test": ["127.0.0.1"],
            "meta.example.test": ["169.254.169.254"],
            "mapped.example.test": ["::ffff:169.254.169.254"],
            "cgnat.example.test": ["100.100.100.200"],  # Alibaba's metadata, inside an opened range
        }
    )
    models = {name.split(".")[0]: f"http://{name}:8000/v1" for name in resolver.answers}
    # The loopback and 100.64.0.0/10 opened: a name still reaches neither the loopback nor a metadata address.
    loop = {"allow_loopback": True, "allow_private_ranges": ["100.64.0.0/10"]}
    expected = {
        "private": "agent_loop.allow_private_ranges: [10.1.2.3/32]",
        "loop": "127.0.0.1 is a loopback address; only the entries localhost, 127.0.0.1 or ::1 reach it",
        "meta": "169.254.169.254 is a cloud metadata address",
        "mapped": "a cloud metadata address",
        "cgnat": "100.100.100.200 is a cloud metadata address",
    }
    async with Supervisor.open(_policy(sandbox_tmp, models, loop=loop), model_resolve=resolver) as sup:
        for slug, words in expected.items():
            result = await sup.call(f"io_prompt_agent_{slug}", {"what": "hi"})
            assert result.status == "error" and result.data is not None
            assert "the policy refuses the model endpoint" in result.data and words in result.data, result.data
    assert "(or network." not in json.dumps(expected)  # the network section opens nothing to model endpoints
    assert sorted(resolver.asked) == sorted(resolver.answers)  # each name asked once, and only the endpoints' names


async def test_metadata_is_never_dialled_whatever_is_opened(sandbox_tmp: Path) -> None:
    resolver = HostileResolver({})
    models = {
        "literal": "http://169.254.169.254/latest/meta-data",
        "azure": "http://168.63.129.16/v1",
        "ipv6": "http://[fd00:ec2::254]/v1",
        "nat64": "http://[64:ff9b::a9fe:a9fe]/v1",
        "gcp": "http://metadata.google.internal/computeMetadata/v1",
    }
    loop = {"allow_loopback": True, "allow_private_ranges": ["10.0.0.0/8", "100.64.0.0/10", "fc00::/7"]}
    async with Supervisor.open(_policy(sandbox_tmp, models, loop=loop), model_resolve=resolver) as sup:
        for slug in models:
            result = await sup.call(f"io_prompt_agent_{slug}", {"what": "hi"})
            assert result.status == "error" and result.data is not None
            assert "cloud metadata" in result.data, (slug, result.data)
    assert resolver.asked == []  # a metadata name is refused before any lookup


async def test_a_redirect_is_not_followed(sandbox_tmp: Path) -> None:
    with (
        model_server(lambda req: answer("you should not see this")) as target,
        model_server(lambda req: Reply("redirect", target.url + "/chat/completions", status=307)) as server,
    ):
        policy = _policy(sandbox_tmp, {"hop": server.url}, loop={"allow_loopback": True})
        async with Supervisor.open(policy) as sup:
            result = await sup.call("io_prompt_agent_hop", {"what": "hi"})
    assert result.status == "error" and "the model endpoint answered HTTP 307" in (result.data or "")
    assert len(server.requests) == 1 and target.requests == []


async def test_a_ceiling_bounds_which_model_endpoint_an_agent_file_may_name(sandbox_tmp: Path) -> None:
    with model_server(lambda req: answer("allowed")) as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        models = {"bounded": server.url, "named": f"http://localhost:{port}/v1"}
        policy = _policy(
            sandbox_tmp,
            models,
            loop={"allow_loopback": True},
            ceilings={"*": {"model_hosts": [f"127.0.0.1:{port}", "api.openai.com:443"]}},
        )
        async with Supervisor.open(policy) as sup:
            assert (await sup.call("io_prompt_agent_bounded", {"what": "hi"})).data == "allowed"
            refused = await sup.call("io_prompt_agent_named", {"what": "hi"})
    assert refused.status == "error"
    assert refused.data == (
        f"agent named cannot run: its modelUrl names the model endpoint localhost:{port}, past the policy's ceiling "
        f'ceilings."*".model_hosts (127.0.0.1:{port}, api.openai.com:443); the key that would open it: add a pattern '
        'covering it to ceilings."*".model_hosts'
    )
    assert len(server.requests) == 1
    records = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
    assert [r["agent"] for r in records if r["event"] == "model_refused"] == ["named"]


async def test_a_reload_that_closes_the_loopback_refuses_later_runs(sandbox_tmp: Path) -> None:
    with model_server(lambda req: answer("local")) as server:
        policy = _policy(sandbox_tmp, {"local": server.url}, loop={"allow_loopback": True})
        async with Supervisor.open(policy) as sup:
            assert (await sup.call("io_prompt_agent_local", {"what": "hi"})).data == "local"
            data = yaml.safe_load(policy.read_text())
            data["agent_loop"]["allow_loopback"] = False
            policy.write_text(yaml.safe_dump(data))
            outcome = await sup.reload()
            assert outcome.refused is None, outcome
            after = await sup.call("io_prompt_agent_local", {"what": "hi"})
    assert after.status == "error" and KEY in (after.data or ""), after.data
    assert len(server.requests) == 1


def test_a_model_endpoint_is_its_host_and_port() -> None:
    assert model_endpoint("https://api.openai.com/v1") == "api.openai.com:443"
    assert model_endpoint("http://LocalHost.:11434") == "localhost:11434"
    assert model_endpoint("http://[::1]:8080/v1") == "[::1]:8080"
    assert model_endpoint("http://0x7f000001/v1") == "127.0.0.1:80"
    for bad in ("file:///etc/passwd", "unix:///run/model.sock", "ftp://x/", "http:///v1", "not a url"):
        with pytest.raises(ModelEndpointRefused):
            model_endpoint(bad)


def test_the_rules_name_the_agent_loop_keys() -> None:
    rules = ModelAccess(private_ranges=("10.0.0.0/8",)).rules("model.example.test")
    assert rules.opener("allow_loopback") == KEY.removesuffix(": true")
    assert (rules.loopback, [str(n) for n in rules.private_networks], rules.subject) == (
        False,
        ["10.0.0.0/8"],
        "model endpoints",
    )
    assert ModelAccess.from_policy(AgentLoop(allow_loopback=True)) == ModelAccess(True, ())
