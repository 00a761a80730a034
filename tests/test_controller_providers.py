"""Setting up the API providers: choosing one, credentials checked before anything is sent, the price table and
the default models as data. The tool conversations themselves are in tests/test_agent_providers.py.

anthropic >= 2 and openai >= 3 send through httpx2, which respx cannot intercept; each test hands the SDK
``http_client=httpx2.Client(transport=httpx2.MockTransport(handler))``.
"""

from __future__ import annotations

import json

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from controller.providers.anthropic import AnthropicProvider  # noqa: E402
from controller.providers.base import ProviderError  # noqa: E402
from controller.providers.registry import PROVIDERS, default_provider, make_provider, preflight  # noqa: E402
from controller.providers.openai import OpenAIProvider  # noqa: E402
from harness.data.generation_request import Budget, Constraints, GenerationRequest, Incumbent  # noqa: E402

from support import ROOT  # noqa: E402

INCUMBENT = {"name": "inc", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "t",
             "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                      "dependencies": [], "destination_passing_style": True},
             "sources": [{"path": "kernel.py", "content": "def run(*a):\n    pass\n"}]}


def request(**budget) -> GenerationRequest:
    return GenerationRequest(run_id="run-t", round=1, key="r1/explore", definition=INCUMBENT["definition"],
                             incumbent=Incumbent(name="inc", solution=INCUMBENT),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             budget=Budget(**{"max_candidates": 1, "max_output_tokens": 4096, **budget}))


class Server:
    """Canned responses in order; records every request body (the credential tests: nothing may be sent)."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.bodies: list[dict] = []
        self.paths: list[str] = []

    def __call__(self, req):
        self.bodies.append(json.loads(req.content))
        self.paths.append(req.url.path)
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        status, body, headers = item if len(item) == 3 else (*item, {})
        return httpx2.Response(status, json=body, headers=headers)

    def client(self):
        return httpx2.Client(transport=httpx2.MockTransport(self))


# -- choosing a provider ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env, expected", [({}, "offline"), ({"ANTHROPIC_API_KEY": "k"}, "anthropic"),
                                           ({"OPENAI_API_KEY": "k"}, "openai"),
                                           ({"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}, "offline")])
def test_default_provider(env, expected):
    assert default_provider(env) == expected


def test_every_listed_provider_can_be_built(tmp_path):
    from controller.skills import load_skills

    skills_dir = ROOT / "skills"
    context = {"skills": load_skills(skills_dir), "skills_root": skills_dir, "store": object()}
    for name in PROVIDERS:
        assert make_provider(name, **context).name == name
    with pytest.raises(ProviderError, match="unknown provider"):
        make_provider("gpt-in-a-box", **context)


CREDENTIAL_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR",
                        "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_ORGANIZATION_ID", "ANTHROPIC_IDENTITY_TOKEN",
                        "ANTHROPIC_IDENTITY_TOKEN_FILE", "OPENAI_API_KEY", "OPENAI_ADMIN_KEY")


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No key in the environment and no SDK profile on disk (HOME is an empty folder)."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_missing_credentials_are_a_setup_error_not_a_round_error(no_credentials):
    never = Server()  # nothing may be sent
    with pytest.raises(ProviderError, match="anthropic provider has no API credential: set ANTHROPIC_API_KEY"):
        AnthropicProvider(base_url="http://anthropic.test", http_client=never.client()).generate(request())
    with pytest.raises(ProviderError, match="openai provider has no API credential: set OPENAI_API_KEY"):
        OpenAIProvider(base_url="http://openai.test/v1", http_client=never.client()).generate(request())
    assert never.bodies == []


def test_preflight_names_the_variable_to_set_and_sends_nothing(no_credentials):
    for name, variable in (("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")):
        with pytest.raises(ProviderError) as raised:
            preflight(name, {"model": "some-model"})
        assert f"set {variable}" in str(raised.value) and "\n" not in str(raised.value)
        no_credentials.setenv(variable, "sk-test")
        preflight(name, {"model": "some-model"})  # builds the client only: no network here
    no_credentials.delenv("ANTHROPIC_API_KEY")
    no_credentials.setenv("ANTHROPIC_AUTH_TOKEN", "token")  # the SDK's other credential
    preflight("anthropic")
    AnthropicProvider(api_key="sk-explicit").preflight()
    for name in ("offline", "replay"):
        preflight(name)  # need nothing
    with pytest.raises(ProviderError, match="unknown provider"):
        preflight("gpt-in-a-box")


def test_preflight_of_a_cli_agent_names_the_executable_missing_from_path(monkeypatch, tmp_path):
    from controller.providers.cli_agents import CLIAgentProvider

    monkeypatch.setenv("PATH", str(tmp_path))
    for name, exe in (("claude-code", "claude"), ("codex", "codex")):
        with pytest.raises(ProviderError, match=f"the {name} provider runs `{exe}`, which is not on PATH"):
            preflight(name)
        fake = tmp_path / exe
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
        preflight(name)
        CLIAgentProvider(name, skills_root=ROOT / "skills").preflight()
    with pytest.raises(ProviderError, match="`my-agent`"):
        preflight("codex", {"command": ["my-agent", "{prompt}"]})


@pytest.mark.parametrize("provider, variable", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_controller_loop_refuses_a_missing_key_before_evaluating_anything(no_credentials, tmp_path, provider,
                                                                            variable):
    from click.testing import CliRunner

    from controller import cli

    started = []
    no_credentials.setattr(cli, "run_loops", lambda *a, **k: started.append(a) or [])
    no_credentials.setattr(cli, "_gpus_for", lambda *a: started.append(a) or 0)
    folder = tmp_path / "archive"
    folder.mkdir()
    result = CliRunner().invoke(cli.main, ["loop", "-d", "gqa_paged_decode_h32_kv8_d128_ps1", "--provider", provider,
                                           "--archive", str(folder)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and variable in lines[0]
    assert started == [] and list(folder.iterdir()) == []  # no evaluation, nothing archived

    from controller.store import Store
    from harness.archive.database import Archive

    store = Store(Archive(folder))  # a resumed run is checked with its stored provider
    store.create_run("run-x", "gqa_paged_decode_h32_kv8_d128_ps1", provider, {"provider": provider})
    store.set_run_status("run-x", "INTERRUPTED")
    result = CliRunner().invoke(cli.main, ["loop", "--resume", "run-x", "--archive", str(folder)])
    assert result.exit_code == 2 and variable in result.stderr and started == []


def test_the_price_table_is_data_and_a_users_file_replaces_and_extends_it(tmp_path, monkeypatch):
    from controller.providers.base import ProviderError, load_prices, price_of

    shipped = load_prices()
    assert shipped["claude-sonnet-4-6"] == (3.0, 15.0) and price_of("claude-sonnet-4-5-20250929") == (3.0, 15.0)
    mine = tmp_path / "prices.yaml"
    mine.write_text("claude-sonnet-4-6: [2.5, 12]\nmy-model: [0.1, 0.2]\n")
    monkeypatch.setenv("CRUCIBLE_PRICES", str(mine))
    assert price_of("claude-sonnet-4-6") == (2.5, 12.0) and price_of("my-model") == (0.1, 0.2)
    assert price_of("gpt-5") == shipped["gpt-5"]
    mine.write_text("my-model: 3 dollars\n")
    with pytest.raises(ProviderError, match=r"expected `model: \[input, output\]`"):
        price_of("my-model")


def test_the_default_models_are_data_and_a_users_file_can_change_them(tmp_path, monkeypatch):
    from controller.providers.base import default_model

    monkeypatch.delenv("CRUCIBLE_PRICES", raising=False)
    assert AnthropicProvider(api_key="k").model == default_model("anthropic") == "claude-sonnet-4-6"
    assert OpenAIProvider(api_key="k").model == default_model("openai") == "gpt-5"
    mine = tmp_path / "prices.yaml"
    mine.write_text("defaults:\n  openai: gpt-5-mini\n")
    monkeypatch.setenv("CRUCIBLE_PRICES", str(mine))
    assert OpenAIProvider(api_key="k").model == "gpt-5-mini" and AnthropicProvider(api_key="k").model == (
        "claude-sonnet-4-6")
    assert OpenAIProvider(api_key="k", model="gpt-4.1").model == "gpt-4.1"  # an explicit choice wins
