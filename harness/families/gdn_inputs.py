"""Stand-ins for the captured inputs of the GDN definitions (op_type ``gdn``), whose official blobs are not public.

Every input of every official GDN workload but ``scale`` comes from one captured safetensors blob per workload
(activations and recurrent states of Qwen3-Next's linear-attention layers at TP=4). Without the blobs, the
generic rule (``randn`` for every float) would make inputs no model produces, and the definitions' kernels
would then be judged on a different problem:

- **q, k: unit L2 norm per head.** Qwen3-Next normalises q and k before the recurrence (the definitions'
  kernels take them already normalised: no ``use_qk_l2norm``). With ``randn`` keys (|k|^2 ~ 128) the delta
  rule's ``S (I - beta k k^T)`` has an eigenvalue 1 - 128 beta: the state grows by ~100x per token and a
  prefill overflows within a few dozen tokens.
- **v**: N(0, 1) bf16, the scale of a projection output.
- **a, b, A_log, dt_bias**: the gate inputs of a trained model. ``A = exp(A_log)`` in [1, 16] (Qwen3-Next
  initialises A uniform on [0, 16]; a trained model keeps it away from 0), ``dt_bias`` small (in [-4, 0]:
  softplus(a + dt_bias) is then mostly below 1, so some heads keep a long memory, g near 1, while others
  forget within a token, as trained GDN heads do), ``a`` ~ N(0, 1) and ``b`` ~ N(0, 1.5) (beta = sigmoid(b)
  spread over (0.05, 0.95)); a and b are bf16 as captured.
- **state**: what a model carries after a history of tokens, not an N(0, 1) draw (whose entries are 100x too
  large and unrelated to any key). It is built as the decayed sum of outer products the recurrence makes of a
  history of ``STATE_HISTORY`` tokens: ``S = sum_j w_j v_j k_j^T``, unit keys, N(0, 1) values and
  ``w_j = beta_j x prod_{i<j} g_i`` (most recent first) from the same gate distribution as the live tokens.
  That is the delta rule's state when the history's keys are near-orthogonal (128-dim random unit keys
  nearly are), bounded by ``sum_j w_j |v_j|``, and it has the rank structure and per-head memory length a
  captured state has, so ``k . S`` and ``q . S`` are of the size a real call sees.
- **cu_seqlens** (prefill): 0 first, ``total_seq_len`` last, every one of the ``num_seqs`` sequences
  non-empty, lengths spread log-normally (a batch of prompts mixes short and long ones).

``scale`` is a scalar in every official workload and is used as given. Where a blob is present (a dataset
holding the official blobs), its tensor is used unchanged; only absent or ``random`` inputs are drawn.
Every draw comes from the generator the harness hands over for that input's name, so the reference's and
the candidate's workers draw identical tensors.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import torch

from ..data.schema import Definition, RandomInput, SafetensorsInput, ScalarInput, Workload

# Gate parameters of a trained layer (module docstring).
A_MIN, A_MAX = 1.0, 16.0
DT_BIAS_MIN, DT_BIAS_MAX = -4.0, 0.0
A_STD = 1.0  # the decay projection's output, before dt_bias
B_STD = 1.5  # the update gate's logit
# Tokens of history folded into a drawn state: past 64 tokens, w_j is below 1e-3 for all but the
# longest-memory heads (g ~ 0.99), whose states are then still a fair sample of a long history.
STATE_HISTORY = 64
# Spread (log-normal sigma) of sequence lengths within a prefill batch.
LENGTH_LOG_SIGMA = 1.0


def _from_blob(workload: Workload, name: str, inputs: Mapping[str, Any]) -> bool:
    """Whether ``inputs[name]`` is the official tensor (its blob was present), to be kept unchanged."""
    return name in inputs and isinstance(workload.inputs.get(name), SafetensorsInput)


def _given(workload: Workload, name: str, inputs: Mapping[str, Any]) -> bool:
    """Kept as the generic rules made it: a present blob or a scalar the workload gives."""
    source = workload.inputs.get(name, RandomInput(type="random"))
    return _from_blob(workload, name, inputs) or (name in inputs and isinstance(source, ScalarInput))


def unit_heads(shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """bf16 vectors of unit L2 norm along the last dim (a normalised q or k head)."""
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return (x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)).to(torch.bfloat16)


def draw_a_log(heads: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    a = A_MIN + (A_MAX - A_MIN) * torch.rand((heads,), generator=gen, device=device, dtype=torch.float32)
    return torch.log(a)


def draw_dt_bias(heads: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    u = torch.rand((heads,), generator=gen, device=device, dtype=torch.float32)
    return DT_BIAS_MIN + (DT_BIAS_MAX - DT_BIAS_MIN) * u


def gates(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
    """(g, beta) as the definitions' references compute them, float32, broadcast over the last (head) dim."""
    g = torch.exp(-torch.exp(a_log.float()) * torch.nn.functional.softplus(a.float() + dt_bias.float()))
    return g, torch.sigmoid(b.float())


def draw_state(seqs: int, heads: int, dim: int, a_log: torch.Tensor, dt_bias: torch.Tensor,
               gen: torch.Generator, device: torch.device, history: int = STATE_HISTORY) -> torch.Tensor:
    """[seqs, heads, V, K] float32, k-last: the decayed sum of ``history`` outer products (module docstring).

    Drawn in chunks of sequences so a full-size batch (64 x 8 heads) never holds more than a few MiB of
    history at once."""
    out = torch.empty((seqs, heads, dim, dim), dtype=torch.float32, device=device)
    chunk = 8
    for start in range(0, seqs, chunk):
        n = min(chunk, seqs - start)
        keys = unit_heads((n, heads, history, dim), gen, device).float()
        values = torch.randn((n, heads, history, dim), generator=gen, device=device, dtype=torch.bfloat16).float()
        a = torch.randn((n, history, heads), generator=gen, device=device, dtype=torch.bfloat16) * A_STD
        b = torch.randn((n, history, heads), generator=gen, device=device, dtype=torch.bfloat16) * B_STD
        g, beta = gates(a, b, a_log, dt_bias)  # [n, history, heads]; j = 0 is the most recent token
        # w_j = beta_j x prod_{i<j} g_i: token j was decayed by every later token's gate
        decay = torch.cat([torch.ones_like(g[:, :1]), torch.cumprod(g[:, :-1], dim=1)], dim=1)
        w = (beta * decay).permute(0, 2, 1)  # [n, heads, history]
        out[start:start + n] = torch.einsum("nhj,nhjv,nhjk->nhvk", w, values, keys)
    return out


def draw_cu_seqlens(total: int, seqs: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """int64 [seqs + 1]: 0, ..., total, every sequence at least one token, log-normal length spread."""
    if not 1 <= seqs <= total:
        raise ValueError(f"cannot split {total} tokens into {seqs} non-empty sequences")
    weights = torch.exp(torch.randn((seqs,), generator=gen, device=device, dtype=torch.float64) * LENGTH_LOG_SIGMA)
    share = weights / weights.sum() * (total - seqs)
    extra = share.floor().to(torch.int64)
    # largest remainders get the tokens the floor left over, so the lengths sum to total exactly
    left = (total - seqs) - int(extra.sum())
    if left:
        extra[torch.argsort(share - extra, descending=True)[:left]] += 1
    lengths = extra + 1
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=device), lengths.cumsum(0)])


def gdn_special_inputs(definition: Definition, workload: Workload, inputs: Mapping[str, Any],
                       generator: Callable[[str], torch.Generator],
                       device: torch.device) -> Optional[dict[str, Any]]:
    """Stand-ins for every input not given by a present blob or a scalar (module docstring)."""
    axes = {**definition.const_axes, **workload.axes}
    dim, v_heads = axes["head_size"], axes["num_v_heads"]
    decode = "batch_size" in axes
    tokens_shape = (axes["batch_size"], axes["seq_len"]) if decode else (axes["total_seq_len"],)
    seqs = axes["batch_size"] if decode else axes["num_seqs"]
    out: dict[str, Any] = {}

    def need(name: str) -> bool:
        return name in definition.inputs and not _given(workload, name, inputs)

    for name, heads in (("q", axes["num_q_heads"]), ("k", axes["num_k_heads"])):
        if need(name):
            out[name] = unit_heads((*tokens_shape, heads, dim), generator(name), device)
    if need("v"):
        out["v"] = torch.randn((*tokens_shape, v_heads, dim), generator=generator("v"), device=device,
                               dtype=torch.bfloat16)
    for name, std in (("a", A_STD), ("b", B_STD)):
        if need(name):
            x = torch.randn((*tokens_shape, v_heads), generator=generator(name), device=device, dtype=torch.float32)
            out[name] = (x * std).to(torch.bfloat16)
    if need("A_log"):
        out["A_log"] = draw_a_log(v_heads, generator("A_log"), device)
    if need("dt_bias"):
        out["dt_bias"] = draw_dt_bias(v_heads, generator("dt_bias"), device)
    if need("state"):
        a_log = out.get("A_log", inputs.get("A_log"))
        dt_bias = out.get("dt_bias", inputs.get("dt_bias"))
        out["state"] = draw_state(seqs, v_heads, dim, a_log, dt_bias, generator("state"), device)
    if need("cu_seqlens"):
        out["cu_seqlens"] = draw_cu_seqlens(axes["total_seq_len"], seqs, generator("cu_seqlens"), device)
    if need("scale"):
        # a random scalar would be N(0, 1), a sign no model uses: the definitions' default instead
        out["scale"] = 1.0 / math.sqrt(dim)
    return out or None
