"""Contract tests of the API providers: the official SDKs against httpx2.MockTransport, never the network.

anthropic >= 1 and openai >= 3 send through httpx2, which respx cannot intercept; each test hands the SDK
``http_client=httpx2.Client(transport=httpx2.MockTransport(handler))`` with canned responses.
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
from harness.generation_request import Budget, Constraints, GenerationRequest, Incumbent  # noqa: E402

from support import ROOT  # noqa: E402

KERNEL = "import triton\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n    pass\n"
INCUMBENT = {"name": "inc", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "t",
             "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                      "dependencies": [], "destination_passing_style": True},
             "sources": [{"path": "kernel.py", "content": "def run(*a):\n    pass\n"}]}
REPLY = {"files": [{"path": "kernel.py", "content": KERNEL}], "entry_point": "kernel.py::run", "notes": "bigger tiles"}


def request(**budget) -> GenerationRequest:
    return GenerationRequest(run_id="run-t", round=1, key="r1/explore", definition=INCUMBENT["definition"],
                             incumbent=Incumbent(name="inc", solution=INCUMBENT),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             budget=Budget(**{"max_candidates": 1, "max_output_tokens": 4096, **budget}))


class Server:
    """Canned responses in order; records every request body."""

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


# -- Anthropic ------------------------------------------------------------------------------------------------


def message(reply=REPLY, stop="tool_use", tokens_in=1200, tokens_out=800):
    content = [{"type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": reply}] if reply else [
        {"type": "text", "text": "I'd rather chat."}]
    return (200, {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                  "content": content, "stop_reason": stop, "stop_sequence": None,
                  "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}})


RATE_LIMITED = (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
                {"retry-after-ms": "5"})


def claude(server: Server, retries: int = 2) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test", base_url="http://anthropic.test", max_retries=retries,
                             http_client=server.client())


def test_anthropic_structured_reply_becomes_a_solution_with_tokens_and_cost():
    server = Server(message())
    response = claude(server).generate(request())
    assert response.error is None and response.stopped is None
    (proposal,) = response.proposals
    assert proposal.solution["sources"] == [{"path": "kernel.py", "content": KERNEL}]
    assert proposal.solution["author"] == "controller/anthropic" and proposal.notes == "bigger tiles"
    assert (response.tokens_in, response.tokens_out) == (1200, 800)
    assert response.cost_usd == pytest.approx((1200 * 3 + 800 * 15) / 1e6)  # claude-sonnet-4-6 in the price table
    body = server.bodies[0]
    assert server.paths == ["/v1/messages"]
    assert body["max_tokens"] == 4096 and body["tool_choice"] == {"type": "tool", "name": "submit_kernel"}
    assert body["tools"][0]["input_schema"]["required"] == ["files", "entry_point", "notes"]
    assert "temperature" not in body and "Generation request r1/explore" in body["messages"][0]["content"]
    assert json.loads(response.raw_text)["id"] == "msg_1"


def test_anthropic_retries_a_429_then_succeeds():
    server = Server(RATE_LIMITED, message())
    response = claude(server).generate(request())
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None


def test_anthropic_429_without_retries_is_an_error_recorded_not_raised():
    response = claude(Server(RATE_LIMITED), retries=0).generate(request())
    assert response.proposals == [] and response.error.startswith("HTTP 429")


def test_anthropic_truncated_reply_is_stopped_and_discarded():
    response = claude(Server(message(stop="max_tokens", tokens_out=4096))).generate(request())
    assert response.proposals == [] and "max_tokens (4096" in response.stopped
    assert response.tokens_out == 4096  # the spend is still accounted


def test_anthropic_reply_over_the_cost_budget_is_discarded():
    # The pre-flight estimate allows the call; the server then reports far more input than estimated.
    response = claude(Server(message(tokens_in=200_000))).generate(request(max_cost_usd=0.5))
    assert response.proposals == [] and response.stopped.startswith("cost budget: $0.6120 > $0.5000")


def test_anthropic_request_the_budget_cannot_pay_for_is_never_sent():
    server = Server(message())
    response = claude(server).generate(request(max_cost_usd=0.000001))
    assert server.bodies == [] and "cost budget" in response.stopped and response.proposals == []


def test_anthropic_max_tokens_is_cut_to_the_cost_left():
    server = Server(message(tokens_in=10, tokens_out=10))
    claude(server).generate(request(max_cost_usd=0.03))
    assert 0 < server.bodies[0]["max_tokens"] < 4096  # $0.03 buys < 2000 output tokens at $15/MTok


def test_anthropic_timeout_stops_the_request():
    server = Server(httpx2.ReadTimeout("timed out"))
    response = claude(server, retries=0).generate(request(wall_s=5))
    assert response.proposals == [] and response.stopped.startswith("wall time")


def test_anthropic_reply_editing_a_forbidden_file_is_rejected():
    bad = {**REPLY, "files": [*REPLY["files"], {"path": "../harness/evaluate.py", "content": "x"}]}
    response = claude(Server(message(reply=bad))).generate(request())
    assert response.proposals == []
    assert "edits files it may not touch: ../harness/evaluate.py" in response.rejected[0].reason


def test_anthropic_reply_without_the_tool_call_is_rejected_and_the_next_one_used():
    server = Server(message(reply=None, stop="end_turn"), message())
    response = claude(server).generate(request(max_candidates=2))
    assert len(response.proposals) == 1 and "no submit_kernel tool call" in response.rejected[0].reason
    assert response.tokens_in == 2400


# -- OpenAI ---------------------------------------------------------------------------------------------------


def openai_response(reply=REPLY, status="completed", tokens_in=1000, tokens_out=500, incomplete=None):
    text = json.dumps(reply) if reply is not None else ""
    return (200, {"id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5", "status": status,
                  "incomplete_details": incomplete,
                  "output": [{"type": "message", "id": "m1", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                  "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                            "total_tokens": tokens_in + tokens_out, "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens_details": {"reasoning_tokens": 0}},
                  "parallel_tool_calls": True, "tool_choice": "auto", "tools": []})


def gpt(server: Server, retries: int = 2) -> OpenAIProvider:
    return OpenAIProvider(api_key="sk-test", base_url="http://openai.test/v1", max_retries=retries,
                          http_client=server.client())


def test_openai_strict_json_reply_becomes_a_solution_with_tokens_and_cost():
    server = Server(openai_response())
    response = gpt(server).generate(request())
    (proposal,) = response.proposals
    assert proposal.solution["sources"][0]["content"] == KERNEL
    assert response.cost_usd == pytest.approx((1000 * 1.25 + 500 * 10) / 1e6)
    body = server.bodies[0]
    assert server.paths == ["/v1/responses"] and body["max_output_tokens"] == 4096
    assert body["text"]["format"]["type"] == "json_schema" and body["text"]["format"]["strict"] is True


def test_openai_retries_a_429_then_succeeds():
    server = Server((429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"retry-after-ms": "5"}),
                    openai_response())
    response = gpt(server).generate(request())
    assert len(server.bodies) == 2 and len(response.proposals) == 1


def test_openai_incomplete_reply_is_stopped():
    server = Server(openai_response(reply=None, status="incomplete", tokens_out=4096,
                                    incomplete={"reason": "max_output_tokens"}))
    response = gpt(server).generate(request())
    assert response.proposals == [] and "max_tokens" in response.stopped


def test_openai_reply_over_the_token_budget_is_discarded():
    server = Server(openai_response(tokens_in=9000, tokens_out=900))
    response = gpt(server).generate(request(max_total_tokens=6000, max_output_tokens=1000))
    assert response.proposals == [] and response.stopped.startswith("token budget: 9900 tokens > 6000")


def test_openai_not_json_is_a_rejection():
    bad = openai_response()
    bad[1]["output"][0]["content"][0]["text"] = "here is your kernel: ..."
    response = gpt(Server(bad)).generate(request())
    assert response.proposals == [] and "not JSON" in response.rejected[0].reason


def test_one_call_per_candidate_and_the_spend_adds_up():
    server = Server(openai_response(), openai_response())
    response = gpt(server).generate(request(max_candidates=2))
    assert len(server.bodies) == 2 and len(response.proposals) == 2
    assert (response.tokens_in, response.tokens_out) == (2000, 1000)
    assert response.proposals[0].solution["name"] != response.proposals[1].solution["name"]


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
    from harness.archive import Archive

    store = Store(Archive(folder))  # a resumed run is checked with its stored provider
    store.create_run("run-x", "gqa_paged_decode_h32_kv8_d128_ps1", provider, {"provider": provider})
    store.set_run_status("run-x", "INTERRUPTED")
    result = CliRunner().invoke(cli.main, ["loop", "--resume", "run-x", "--archive", str(folder)])
    assert result.exit_code == 2 and variable in result.stderr and started == []


def test_a_model_without_a_price_is_marked_and_refused_under_a_cost_budget():
    server = Server(openai_response(), openai_response())
    provider = OpenAIProvider(model="gpt-9-preview", api_key="k", base_url="http://openai.test/v1",
                              http_client=server.client())
    response = provider.generate(request())
    assert response.cost_usd == 0.0 and response.model == "gpt-9-preview (no price: cost not counted)"
    refused = provider.generate(request(max_cost_usd=10.0))
    assert refused.proposals == [] and "no price is known" in refused.stopped and len(server.bodies) == 1


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
