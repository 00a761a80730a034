"""`controller loop --dry-run`: the first request exactly as it would be sent, nothing sent or evaluated."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli import main

from support import KV8_PS1

pytest.importorskip("anthropic")


def dry_run(tmp_path, *args):
    hint = tmp_path / "hint.md"
    hint.write_text("Put the tokens on M and the query-head group on N.\n")
    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--dry-run", "--hint", str(hint),
                                       "--archive", str(tmp_path), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_anthropic_dry_run_shows_the_call_with_its_cacheable_prefix(tmp_path):
    out = dry_run(tmp_path, "--provider", "anthropic", "--max-turns", "5", "--provider-option",
                  "thinking_budget=4000")
    params = out["request"]["params"]
    assert out["request"]["kind"] == "api call" and out["model"] == params["model"]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    first = params["messages"][0]["content"]
    assert first[0]["cache_control"] == {"type": "ephemeral"} and "Skills you may read" in first[0]["text"]
    assert "Put the tokens on M" in first[1]["text"] and "Put the tokens on M" not in first[0]["text"]
    assert [t["name"] for t in params["tools"]] == out["tools"] and len(out["tools"]) == 5
    assert params["thinking"]["budget_tokens"] == 4000
    assert out["limits"]["max_turns"] == 5 and out["skills_listed"][0] == "gqa-decode"
    assert out["skills_whole"] == ["promotion-rules"] and out["size_tokens_estimate"] > 1000
    assert list(tmp_path.iterdir()) == [tmp_path / "hint.md"]  # no archive made, nothing evaluated


def test_openai_dry_run_and_a_missing_key_is_reported_not_fatal(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = dry_run(tmp_path, "--provider", "openai", "--provider-option", "effort=medium")
    params = out["request"]["params"]
    assert params["reasoning"] == {"effort": "medium"} and params["store"] is False
    assert params["input"][0]["content"][0]["text"].startswith("# Definition")
    assert "OPENAI_API_KEY" in out["preflight"]


def test_offline_dry_run_shows_the_request_document(tmp_path):
    out = dry_run(tmp_path, "--provider", "offline")
    assert out["request"]["kind"] == "request document"
    assert "## A person's direction for this run" in out["request"]["document"]


@pytest.mark.parametrize("provider", ["openai", "offline"])
def test_a_provider_option_it_does_not_take_is_one_line_exit_2(tmp_path, provider):
    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--provider", provider, "--dry-run",
                                       "--provider-option", "efort=high", "--archive", str(tmp_path)])
    assert result.exit_code == 2 and "efort" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output + result.stderr
