"""One interface for every generator, and the checks they all share.

A provider turns a ``GenerationRequest`` into a ``GenerationResponse``: proposals (Solution JSON) plus
the raw text, tokens, cost and wall time, and, where a bound stopped it, why. Providers never evaluate
anything; the loop hands proposals to the harness.
"""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Protocol, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.data.generation_request import GenerationRequest, GenerationResponse, Proposal, Rejection
from harness.data.schema import SchemaError, Solution, dump_json, read_text


@runtime_checkable
class Provider(Protocol):
    name: str

    def generate(self, request: GenerationRequest) -> GenerationResponse: ...


class ProviderError(RuntimeError):
    """A provider cannot be set up (missing SDK, missing executable, no price for a cost budget)."""


# -- price table: data in prices.yaml, USD per million tokens, (input, output) -----------------------------

PRICES_FILE = Path(__file__).with_name("prices.yaml")
DEFAULTS_KEY = "defaults"  # the section of the price table naming each API provider's default model


def _price_sources(path: Optional[Path] = None) -> list[tuple[Path, dict[str, Any]]]:
    """The shipped table, then ``path`` or ``$CRUCIBLE_PRICES`` (whose entries replace and extend it), parsed."""
    user = path or (Path(os.environ["CRUCIBLE_PRICES"]) if os.environ.get("CRUCIBLE_PRICES") else None)
    parsed = []
    for source in (PRICES_FILE, user):
        if source is None:
            continue
        try:  # a regular file of at most 1 MiB: a FIFO or /dev/zero named by $CRUCIBLE_PRICES is refused unread
            data = yaml.safe_load(read_text(source, 1 << 20)) or {}
        except (SchemaError, yaml.YAMLError, RecursionError) as err:
            raise ProviderError(f"price table {source}: {' '.join(str(err).split())[:300]}") from None
        if not isinstance(data, dict):
            raise ProviderError(f"price table {source}: expected `model: [input, output]` USD per million tokens, "
                                f"got {' '.join(repr(data).split())[:200]}")
        parsed.append((Path(source), data))
    return parsed


def load_prices(path: Optional[Path] = None) -> dict[str, tuple[float, float]]:
    """The shipped price table, with the entries of ``$CRUCIBLE_PRICES`` (or ``path``) replacing and extending it."""
    table: dict[str, tuple[float, float]] = {}
    for source, data in _price_sources(path):
        for model, pair in data.items():
            if model == DEFAULTS_KEY:
                continue
            if not (isinstance(model, str) and isinstance(pair, list) and len(pair) == 2
                    and all(isinstance(x, (int, float)) and x >= 0 for x in pair)):
                raise ProviderError(f"price table {source}: expected `model: [input, output]` USD per million "
                                    f"tokens, got {model!r}: {pair!r}")
            table[model] = (float(pair[0]), float(pair[1]))
    return table


def default_model(provider: str, path: Optional[Path] = None) -> Optional[str]:
    """The model ``provider`` uses when none is given: the ``defaults:`` section of the price table (the user's
    file first), so a new model generation is an edit of one data file, not of the code."""
    chosen = None
    for source, data in _price_sources(path):
        defaults = data.get(DEFAULTS_KEY) or {}
        if not isinstance(defaults, dict):
            raise ProviderError(f"price table {source}: expected `{DEFAULTS_KEY}:` to map providers to model ids")
        if isinstance(defaults.get(provider), str):
            chosen = defaults[provider]
    return chosen


def no_price(model: str) -> str:
    """Why a cost budget refuses a model: and where to add its price."""
    return (f"cost budget set but no price is known for {model}: add `{model}: [input, output]` (USD per million "
            f"tokens) to {PRICES_FILE.relative_to(PRICES_FILE.parents[2])} or to a file named by the CRUCIBLE_PRICES "
            "environment variable")


def price_of(model: str, prices: Optional[dict[str, tuple[float, float]]] = None) -> Optional[tuple[float, float]]:
    """(input, output) USD per million tokens; a dated model id matches its undated entry."""
    table = load_prices() if prices is None else prices
    if model in table:
        return table[model]
    for name in table:  # a dated snapshot: claude-sonnet-4-5-20250929, gpt-5-2025-08-07
        if model.startswith(name + "-20"):
            return table[name]
    return None


def cost_usd(tokens_in: int, tokens_out: int, price: Optional[tuple[float, float]]) -> float:
    if price is None:
        return 0.0
    return (tokens_in * price[0] + tokens_out * price[1]) / 1e6


def estimate_tokens(text: str) -> int:
    """A deliberately high estimate (3 characters a token) for budget checks before sending."""
    return len(text) // 3 + 16


def output_allowance(request: GenerationRequest, prompt: str, price: Optional[tuple[float, float]],
                     spent_tokens: int, spent_cost: float) -> tuple[int, Optional[str]]:
    """max_tokens for the next call within the request's budget, or (0, why not)."""
    b = request.budget
    est_in = estimate_tokens(prompt)
    allowed = b.max_output_tokens
    if b.max_total_tokens is not None:
        allowed = min(allowed, b.max_total_tokens - spent_tokens - est_in)
        if allowed < 1:
            return 0, (f"token budget: {b.max_total_tokens - spent_tokens} tokens left, the prompt alone is "
                       f"about {est_in}")
    if b.max_cost_usd is not None:
        if price is None:
            return 0, "cost budget set but no price is known for this model (add it to the price table)"
        left = b.max_cost_usd - spent_cost - est_in * price[0] / 1e6
        affordable = int(left * 1e6 / price[1]) if price[1] > 0 else allowed
        allowed = min(allowed, affordable)
        if allowed < 1:
            return 0, f"cost budget: ${b.max_cost_usd - spent_cost:.4f} left does not pay for the prompt"
    return allowed, None


# -- the structured reply every model is asked for -----------------------------------------------------------


class FileEdit(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str
    content: str


class KernelReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    files: list[FileEdit] = Field(min_length=1)
    entry_point: str
    notes: str = ""

    @field_validator("files", mode="before")
    @classmethod
    def _files_as_a_mapping(cls, value: Any) -> Any:
        """``{"kernel.py": "..."}``, the shape models often send instead of a list of path and content."""
        if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
            return [{"path": k, "content": v} for k, v in value.items()]
        return value

    @field_validator("notes", mode="before")
    @classmethod
    def _no_notes(cls, value: Any) -> Any:
        return "" if value is None else value


def parse_reply(data: Any) -> tuple[Optional[KernelReply], Optional[str]]:
    try:
        return KernelReply.model_validate(data), None
    except ValidationError as err:
        return None, "reply does not match the schema: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])


def normalise(path: str) -> str:
    return PurePosixPath(path).as_posix()  # "./kernel.py" and "kernel.py" are one file


def forbidden_files(paths: list[str], allowed: list[str]) -> list[str]:
    """Paths a candidate touched that it may not touch."""
    ok = {normalise(p) for p in allowed}
    return sorted({normalise(p) for p in paths} - ok)


def candidate_name(request: GenerationRequest, provider: str, index: int) -> str:
    return f"{provider}_{request.key.replace('/', '_')}_{index}"


def same_entry_point(given: str, required: str) -> bool:
    """Whether ``given`` names the required entry point as models write it: ``kernel.py::run``, ``./kernel.py::run``,
    ``kernel.py:run``, ``run`` or ``run()``; another file or another symbol is another entry point."""
    file, _, symbol = required.partition("::")
    text = given.strip().removesuffix("()")
    if "::" in text or ":" in text:
        got_file, _, got_symbol = text.partition("::") if "::" in text else text.partition(":")
        return normalise(got_file.strip()) == normalise(file) and got_symbol.strip() == symbol
    return text == symbol or text == required


def proposal_from_files(request: GenerationRequest, files: dict[str, str], entry_point: str, name: str,
                        author: str, origin: dict[str, Any], notes: str = "") -> Proposal | Rejection:
    """A Solution proposal from edited files, or a rejection that says why (forbidden file, bad entry point)."""
    bad = forbidden_files(list(files), request.constraints.editable_files)
    if bad:
        return Rejection(name=name, reason=f"edits files it may not touch: {', '.join(bad)} "
                                            f"(allowed: {', '.join(request.constraints.editable_files)})", files=bad)
    if not same_entry_point(entry_point, request.constraints.entry_point):
        return Rejection(name=name, reason=f"entry point {entry_point!r} is not the required "
                                            f"{request.constraints.entry_point!r}")
    entry_point = request.constraints.entry_point  # "run" or "kernel.py:run" for it, written as required
    # The other files of what was edited (the failed candidate on repair, else the incumbent) stay as they are.
    base = request.repair.solution if request.repair is not None else request.incumbent.solution
    sources = {s["path"]: s["content"] for s in base.get("sources", [])}
    sources.update({normalise(p): c for p, c in files.items()})
    data = {"name": name, "definition": request.definition, "author": author,
            "spec": {"language": request.constraints.language, "target_hardware": [request.target_hardware],
                     "entry_point": entry_point, "dependencies": [], "destination_passing_style": True},
            "sources": [{"path": p, "content": c} for p, c in sorted(sources.items())],
            "description": notes[:2000] or None}
    try:
        solution = Solution.model_validate(data)
    except ValidationError as err:
        return Rejection(name=name, reason=f"not a valid solution: {err.errors()[0]['msg']}")
    return Proposal(solution=dump_json(solution), origin=origin, notes=notes)


def add(response: GenerationResponse, item: Proposal | Rejection) -> None:
    (response.proposals if isinstance(item, Proposal) else response.rejected).append(item)  # type: ignore[arg-type]


# -- the CLI agents' shared loop: one agent run per candidate, every bound checked -----------------------------


def candidate_slots(budget: Any, response: GenerationResponse, started: float):
    """Yield (index, seconds left) for each candidate the budget allows; record why it stopped early."""
    for index in range(budget.max_candidates):
        left = budget.wall_s - (time.monotonic() - started)
        if left <= 0:
            response.stopped = f"wall time: {budget.wall_s:g} s used up"
            return
        yield index, left


class SdkProvider:
    """Plumbing the API providers share: the SDK imported lazily, one client, configuration as data.

    Subclasses name their SDK (module, client class, base error class) and the environment variables it reads a
    credential from (the one to set first). ``max_retries`` caps the retries of one call (429, 529, 5xx,
    connection errors), which the chat models do themselves within the call's deadline; the SDK client retries
    nothing.
    """

    name = ""
    sdk_module = ""
    client_class = ""
    error_class = ""
    default_model = ""
    credential_env: tuple[str, ...] = ()

    def __init__(self, model: Optional[str] = None, api_key: Optional[str] = None, base_url: Optional[str] = None,
                 max_retries: int = 6, http_client: Any = None, client: Any = None,
                 prices: Optional[dict[str, tuple[float, float]]] = None):
        self.model = model or default_model(self.name) or self.default_model
        self.api_key, self.base_url = api_key, base_url
        self.max_retries, self.http_client, self.client, self.prices = max_retries, http_client, client, prices

    def _sdk(self) -> Any:
        import importlib

        try:
            return importlib.import_module(self.sdk_module)
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ProviderError(f"the {self.name} provider needs the SDK: pip install 'crucible[llm]'") from err

    def _client(self) -> Any:
        if self.client is None:
            # The SDK's own retries would each get the full timeout again: retries are ours, inside the deadline.
            kwargs: dict[str, Any] = {"max_retries": 0}
            if self.api_key:
                kwargs["api_key"] = self.api_key
            if self.base_url:
                kwargs["base_url"] = self.base_url
            sdk = self._sdk()
            http = self.http_client
            if http is None and hasattr(sdk, "DefaultHttpxClient"):  # the SDK's own settings, our watch added
                http = sdk.DefaultHttpxClient()
            if http is not None:
                from .cancel import watch_streams

                kwargs["http_client"] = watch_streams(http)
            try:
                self.client = getattr(sdk, self.client_class)(**kwargs)
            except getattr(sdk, self.error_class) as err:  # e.g. no API key
                raise ProviderError(f"{self.name}: {err}") from err
        return self.client

    def missing_credential(self) -> str:
        first, *others = self.credential_env
        return (f"the {self.name} provider has no API credential: set {first}"
                + (f" (or {' or '.join(others)})" if others else ""))

    def has_credential(self, client: Any) -> bool:
        """Whether the SDK's client found a credential (an API key by default)."""
        return bool(getattr(client, "api_key", None))

    def preflight(self) -> None:
        """Before anything is sent or evaluated: the SDK is installed and the client finds a credential (an
        explicit ``api_key``, the environment, whatever else the SDK reads). ProviderError naming the variable."""
        if self.client is not None:
            return
        self._sdk()
        try:
            client = self._client()
        except ProviderError as err:
            if self.api_key or any(os.environ.get(v) for v in self.credential_env):
                raise
            raise ProviderError(self.missing_credential()) from err
        except Exception as err:  # e.g. a malformed credentials profile
            raise ProviderError(f"{self.name}: cannot set up the client: {err}") from err
        if not self.has_credential(client):
            self.client = None
            raise ProviderError(self.missing_credential())
