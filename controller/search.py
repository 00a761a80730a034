"""Search that does not stall: a population per regime and a design switch when a regime stops improving.

The offline provider used to look only at one-step neighbours of the single incumbent. Two things stalled it on
the H200: a round's only idea was the same design with other numbers, and a move that helped one regime but lost
overall was forgotten with its candidate. Here, from the run's history alone (pure functions, table-driven tests):

- **population**: the best distinct configurations on the regime being worked on (by their mean latency there),
  the incumbent among them, so neighbours of the runners-up are explored too;
- **stalled**: the regime's best latency has not improved by ``min_gain`` over the last ``patience`` rounds
  that evaluated a candidate on it;
- on a stall, **escape**: the next proposals switch design (another template of the skill, from its starting
  point) before any neighbour, the "stall escape" of search-based kernel tuning.

Settings are data: the skill's machine block may carry ``search: {population, patience, min_gain, halving}``;
``halving: {eta, finalists, rungs, max_proposals, screen_iterations, screen_trials}`` turns on successive halving
of a round's candidates on short timing runs (controller/halving.py decides, controller/screening.py runs it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from harness.data.generation_request import HistoryItem

from .dispatch import DISPATCH


def _checked(cls: Any, data: Any, what: str) -> dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``cls``: a mapping of its fields only (ValueError otherwise)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected a mapping, got {data!r}")
    unknown = set(data) - set(cls.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{what}: unknown keys {sorted(unknown)}")
    return data


@dataclass(frozen=True)
class HalvingSettings:
    """Successive halving of a round's candidates (controller/halving.py): every candidate is screened with a short
    run, the best ``ceil(n / eta)`` are timed again with a run ``eta`` times longer, and so on until ``finalists``
    remain; only those are evaluated in full. With halving on, a round proposes ``candidates * eta ** rungs``
    candidates (at most ``max_proposals``)."""

    eta: int = 2  # each rung keeps ceil(n / eta)
    finalists: int = 1  # candidates per round (per repair depth) that get the full evaluation
    rungs: int = 2  # how many halvings a round's widened proposal pays for
    max_proposals: int = 8  # the widened proposal's bound
    screen_iterations: int = 10  # timed iterations of rung 0's run; rung r runs screen_iterations * eta ** r
    screen_trials: int = 1  # correctness trials (seeds) of a screening run

    def __post_init__(self) -> None:
        for name, low in (("eta", 2), ("finalists", 1), ("rungs", 0), ("max_proposals", 1),
                          ("screen_iterations", 1), ("screen_trials", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"halving settings: {name} must be an integer >= {low}, got {value!r}")

    @classmethod
    def from_block(cls, block: Any) -> Optional["HalvingSettings"]:
        """None (off) for an absent or false block; the defaults for ``true``; else the mapping's values."""
        if block is None or block is False:
            return None
        if block is True:
            return cls()
        return cls(**_checked(cls, block, "halving settings"))

    def proposals(self, candidates: int) -> int:
        """How many candidates a round proposes when it halves: ``candidates * eta ** rungs``, bounded."""
        return max(candidates, min(self.max_proposals, candidates * self.eta ** self.rungs))

    def iterations(self, rung: int) -> int:
        """Timed iterations of rung ``rung``'s run: each rung's survivors get a run ``eta`` times longer."""
        return self.screen_iterations * self.eta ** rung


@dataclass(frozen=True)
class SearchSettings:
    population: int = 3  # configurations whose neighbours are explored per regime
    patience: int = 2  # rounds without a gain on a regime before the design switches
    min_gain: float = 0.02  # a relative improvement smaller than this is noise, not progress
    halving: Optional[HalvingSettings] = None  # successive halving of a round's candidates; None: off
    # A configuration more than this many times the regime's best latency is no population member: its neighbours
    # would not come near (H200 run 16: the naive kernel, 10-25x the incumbent, took half of round 2's proposals).
    population_within: float = 2.0
    # regime -> parameters whose one-step moves come first, in this order (what the skill's measurements say moves
    # that regime); the other moves follow, rotated by round.
    first_moves: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.population_within, (int, float)) or self.population_within < 1:
            raise ValueError(f"search settings: population_within must be >= 1, got {self.population_within!r}")
        if not (isinstance(self.first_moves, dict) and all(
                isinstance(v, list) and all(isinstance(n, str) for n in v) for v in self.first_moves.values())):
            raise ValueError(f"search settings: first_moves must map a regime to parameter names, got "
                             f"{self.first_moves!r}")

    @classmethod
    def from_block(cls, block: Optional[dict[str, Any]]) -> "SearchSettings":
        data = dict(_checked(cls, block or {}, "search settings"))
        if "halving" in data:
            data["halving"] = HalvingSettings.from_block(data["halving"])
        return cls(**data)


def _key(origin: dict[str, Any]) -> str:
    return json.dumps({"template": origin.get("template"), "params": origin.get("params", {})}, sort_keys=True)


def regime_latency(item: HistoryItem, regime: str) -> Optional[float]:
    """A candidate's mean latency on ``regime`` (None where it was not timed there or failed)."""
    return (item.regime_latency_ms or {}).get(regime)


def configuration_on(origin: dict[str, Any], regime: str) -> Optional[dict[str, Any]]:
    """The configuration that ran on ``regime``: the origin itself, or, for a solution dispatching by regime
    (controller/dispatch.py), the variant it runs there (its latency on the regime is that variant's)."""
    if origin.get("template") == DISPATCH:
        return ((origin.get("params") or {}).get("variants") or {}).get(regime)
    return origin if origin.get("template") else None


def population(history: Iterable[HistoryItem], regime: str, size: int, within: Optional[float] = None
               ) -> list[dict[str, Any]]:
    """The ``size`` fastest distinct configurations (template + params) on ``regime``, fastest first; a dispatching
    solution counts as the variant it runs on the regime. ``within``: only those at most that many times the
    fastest's latency."""
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for item in history:
        latency = regime_latency(item, regime)
        origin = configuration_on(item.origin, regime)
        if latency is None or origin is None:
            continue
        key = _key(origin)
        if key not in best or latency < best[key][0]:
            best[key] = (latency, {"template": origin["template"], "params": dict(origin.get("params", {}))})
    ranked = sorted(best.values(), key=lambda t: t[0])
    if ranked and within is not None:
        ranked = [t for t in ranked if t[0] <= ranked[0][0] * within]
    return [origin for _, origin in ranked[:size]]


def best_by_round(history: Iterable[HistoryItem], regime: str) -> dict[int, float]:
    """Round -> the fastest latency on ``regime`` among that round's candidates (rounds that timed none left out)."""
    out: dict[int, float] = {}
    for item in history:
        latency = regime_latency(item, regime)
        if latency is not None:
            out[item.round] = min(latency, out.get(item.round, latency))
    return out


def stalled(history: Iterable[HistoryItem], regime: str, settings: SearchSettings) -> bool:
    """Whether the last ``patience`` rounds that timed a candidate on ``regime`` all failed to beat, by
    ``min_gain``, the best that came before them."""
    rounds = sorted(best_by_round(history, regime).items())
    if len(rounds) <= settings.patience:
        return False  # not enough tries since the start to call it a stall
    before = min(latency for _, latency in rounds[:-settings.patience])
    recent = min(latency for _, latency in rounds[-settings.patience:])
    return recent > before * (1.0 - settings.min_gain)


def stalled_regimes(history: Iterable[HistoryItem], regimes: Iterable[str], settings: SearchSettings
                    ) -> frozenset[str]:
    """The regimes among ``regimes`` whose search has stalled (``stalled``): the planner attacks them last."""
    items = list(history)
    return frozenset(g for g in regimes if stalled(items, g, settings))


def moved_parameter(move: dict[str, Any], template: str, params: dict[str, Any]) -> Optional[str]:
    """The one parameter a one-step move of ``template``'s ``params`` changed; None for a template switch."""
    if move["template"] != template:
        return None
    changed = [k for k, v in move["params"].items() if params.get(k) != v]
    return changed[0] if len(changed) == 1 else None


def interleave(*lists: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First of each list, then second of each...: every population member gets its best moves in early."""
    out: list[dict[str, Any]] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def design_switches(population_templates: set[str], templates: list[str], start: dict[str, dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """One origin per template the population does not use yet, from ``start`` (template -> its origin for this
    regime); templates in the skill's order."""
    return [start[t] for t in templates if t not in population_templates and t in start]
