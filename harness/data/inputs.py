"""Workload + seed -> input tensors, the same in every process that asks.

Random tensors follow FlashInfer-Bench's rules (floats: randn; fp8: randn clamped to +-2;
int8: [-128, 128); other ints: [-1024, 1024); bool: 0/1; random scalars: randn). Index tensors
cannot be random numbers, so they get structure: ``*_indices`` over a page pool become a random
permutation of the pool (pages scattered, never contiguous), a random ``*_indptr`` splits the indices
evenly, a random ``*_last_page_len`` marks every last page full. Every tensor draws from its own
generator seeded by (seed, input name), so the reference worker and the candidate worker produce
identical inputs without ever exchanging them. Inputs these rules cannot make (FP8 block scales, packed
caches, routing logits) come from the definition's operator family (``special_inputs``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Collection, Optional, Union

import torch

from .blobs import load_safetensors as _load_safetensors
from .dtypes import TORCH_DTYPES, torch_dtype  # noqa: F401  (callers import them from here)
from ..families import family_for
from ..families.base import OperatorFamily
from .schema import Definition, RandomInput, SafetensorsInput, ScalarInput, SchemaError, TensorSpec, Workload

Value = Union[torch.Tensor, float, int, bool]


def _generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator,
                  device: torch.device) -> torch.Tensor:
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        # drawn in its own dtype, as the official evaluator draws it: a float32 draw cast down would hold 3x
        # the tensor's bytes at once (a 4 GiB bf16 KV cache: 12 GiB)
        return torch.randn(shape, generator=gen, device=device, dtype=dtype)
    if dtype.is_floating_point:  # fp8 / fp4: drawn in slices, so the wide draw never exists whole
        out = torch.empty(shape, dtype=dtype, device=device)
        flat = out.view(-1) if out.numel() else out
        for start in range(0, flat.numel(), _DRAW_SLICE):
            piece = flat[start:start + _DRAW_SLICE]
            piece.copy_(torch.randn(piece.shape, generator=gen, device=device, dtype=torch.bfloat16).clamp_(-2, 2))
        return out
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen, device=device).bool()
    lo, hi = (-128, 128) if dtype == torch.int8 else (-1024, 1024)
    return torch.randint(lo, hi, shape, generator=gen, device=device, dtype=dtype)


_DRAW_SLICE = 1 << 27  # elements of one wide draw: 256 MiB of bf16


def _structured(name: str, spec: TensorSpec, shape: tuple[int, ...], dtype: torch.dtype, definition: Definition,
                workload: Workload, gen: torch.Generator, device: torch.device) -> torch.Tensor | None:
    """Valid index tensors for inputs the workload leaves random."""
    if dtype not in (torch.int32, torch.int64) or len(shape) != 1:
        return None
    if name.endswith("indices") and "num_pages" in workload.axes:
        pool = workload.axes["num_pages"]
        if shape[0] > pool:
            raise SchemaError(f"workload {workload.uuid}: {name} needs {shape[0]} pages but num_pages is {pool}")
        return torch.randperm(pool, generator=gen, device=device)[: shape[0]].to(dtype)
    if name.endswith("indptr"):
        total = next((workload.axes[a] for a in ("num_kv_indices", "num_indices") if a in workload.axes), None)
        if total is None:
            return None
        n = shape[0] - 1
        per = torch.full((n,), total // max(n, 1), dtype=torch.int64)
        per[: total - int(per.sum())] += 1
        return torch.cat([torch.zeros(1, dtype=torch.int64), per.cumsum(0)]).to(dtype).to(device)
    if name.endswith("last_page_len") and "page_size" in definition.const_axes:
        return torch.full(shape, definition.const_axes["page_size"], dtype=dtype, device=device)
    return None


def generate_inputs(definition: Definition, workload: Workload, seed: int, device: str | torch.device = "cpu",
                    root: Path | None = None, names: Optional[Collection[str]] = None) -> dict[str, Value]:
    """All inputs of a definition for one workload and seed, in the definition's order.

    ``names``: only these, the same values a whole draw gives them (each input has a generator of its own), without
    drawing the rest (an export needs a batch's page table, not its 8 GiB KV cache). A family with special inputs
    may read or replace any input, so there the whole set is drawn and then narrowed."""
    device = torch.device(device)
    family = family_for(definition.op_type)
    if names is not None:
        wanted = set(names)
        if type(family).special_inputs is not OperatorFamily.special_inputs:
            drawn = generate_inputs(definition, workload, seed, device, root)
            return {name: value for name, value in drawn.items() if name in wanted}
        definition = definition.model_copy(update={"inputs": {n: s for n, s in definition.inputs.items()
                                                              if n in wanted}})
    var_values = dict(workload.axes)
    missing = [a for a in definition.var_axes if a not in var_values]
    if missing:
        raise SchemaError(f"workload {workload.uuid}: var axes {missing} have no value")
    out: dict[str, Value] = {}
    absent: list[str] = []  # official blobs this dataset does not hold: the family draws stand-ins
    for name, spec in definition.inputs.items():
        source = workload.inputs.get(name, RandomInput(type="random"))
        gen = _generator(seed, name, device)
        if spec.shape is None:  # scalar
            if isinstance(source, ScalarInput):
                out[name] = source.value
            else:
                out[name] = float(torch.randn((), generator=gen, device=device).item())
            continue
        shape = definition.shape_of(spec, var_values)
        dtype = torch_dtype(spec.dtype)
        if isinstance(source, SafetensorsInput):
            if root is None:
                raise SchemaError(f"workload {workload.uuid}: {name} reads {source.path} but no dataset root is known")
            path = (Path(root) / source.path).resolve()
            if not path.exists() and family.synthesizes_absent_blobs:
                absent.append(name)
                continue
            if not path.exists():
                raise SchemaError(f"workload {workload.uuid}: {name}: blob {path} does not exist")
            tensors = _load_safetensors(str(path), str(device))
            if source.tensor_key not in tensors:
                raise SchemaError(f"{path}: no tensor {source.tensor_key!r} (has {sorted(tensors)})")
            t = tensors[source.tensor_key]
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise SchemaError(f"{path}: {source.tensor_key} is {tuple(t.shape)} {t.dtype}, "
                                  f"definition wants {shape} {dtype}")
            out[name] = t.clone()
        elif isinstance(source, ScalarInput):
            out[name] = torch.full(shape, source.value, dtype=dtype, device=device)
        else:
            t = _structured(name, spec, shape, dtype, definition, workload, gen, device)
            out[name] = t if t is not None else random_tensor(shape, dtype, gen, device)
    special = family.special_inputs(definition, workload, out, lambda name: _generator(seed, name, device), device)
    if special:
        unknown = sorted(set(special) - set(out) - set(absent))
        if unknown:
            raise SchemaError(f"{definition.op_type} family: special inputs {unknown} "
                              f"are not inputs of {definition.name}")
        out.update(special)
    missing = [n for n in absent if n not in out]
    if missing:
        raise SchemaError(f"workload {workload.uuid}: the {definition.op_type} family drew no stand-in for the "
                          f"absent blob input(s) {missing}")
    return {name: out[name] for name in definition.inputs}


def absent_blob_inputs(definition: Definition, workload: Workload, root: Path | None) -> list[str]:
    """Inputs this workload takes from blobs the dataset does not hold (drawn by the family instead)."""
    return [name for name, source in workload.inputs.items()
            if isinstance(source, SafetensorsInput) and name in definition.inputs
            and (root is None or not (Path(root) / source.path).exists())]


def allocate_outputs(definition: Definition, workload: Workload,
                     device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    device = torch.device(device)
    return {
        name: torch.empty(definition.shape_of(spec, workload.axes), dtype=torch_dtype(spec.dtype), device=device)
        for name, spec in definition.outputs.items()
    }


_FULL_HASH_LIMIT = 1 << 20
_DIGEST_COLUMNS = 4096  # words per row of the grid content_digest folds a tensor into
_DIGEST_ROWS = 4096  # rows per step: 16M words, 64 MiB read, 128 MiB of int64 temporaries


def content_digest(t: torch.Tensor) -> tuple[int, int]:
    """Every byte of ``t`` folded into two sums, on its own device, in slices (no copy of the tensor).

    Tells whether a tensor changed between two points of one process without keeping a clone of it (a KV
    cache of gigabytes): the plain sum of its 32-bit words and the sum of each word times its position + 1, so
    both a changed word and two swapped words show. Not a cryptographic hash; integer sums wrap, identically
    every time. The positional sum comes from row and column sums of the words laid out as a grid
    (sum_i w_i (i + 1) = C * sum_r r * row_r + sum_c (c + 1) * col_c for C columns): each word read once, no
    weight tensor of the input's size, and a single transfer to the host at the end (a KV cache of 8 GiB is
    hundreds of slices; a synchronising read per slice cost more than the sums).
    """
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return (0, 0)
    words = flat.view(torch.uint8)
    words = words.view(torch.int32) if words.numel() % 4 == 0 else words
    cols = _DIGEST_COLUMNS
    rows = words.numel() // cols
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    weighted = torch.zeros((), dtype=torch.int64, device=words.device)
    col_sums = torch.zeros(cols, dtype=torch.int64, device=words.device)
    grid = words[:rows * cols].view(rows, cols)
    for r0 in range(0, rows, _DIGEST_ROWS):
        block = grid[r0:r0 + _DIGEST_ROWS].to(torch.int64)
        row_sums = block.sum(dim=1)
        row_index = torch.arange(r0, r0 + block.shape[0], device=words.device, dtype=torch.int64)
        total += row_sums.sum()
        weighted += (row_sums * row_index).sum() * cols
        col_sums += block.sum(dim=0)
        del block, row_sums, row_index
    weighted += (col_sums * torch.arange(1, cols + 1, device=words.device, dtype=torch.int64)).sum()
    tail = words[rows * cols:].to(torch.int64)  # fewer than one row
    if tail.numel():
        total += tail.sum()
        weighted += (tail * torch.arange(rows * cols + 1, words.numel() + 1, device=words.device,
                                         dtype=torch.int64)).sum()
    mask = 2**64 - 1
    total_value, weighted_value = torch.stack([total, weighted]).tolist()
    return (total_value & mask, weighted_value & mask)


def trial_seed(secret: bytes, workload: Workload, trial: int) -> int:
    """The seed of one input set: secret to the candidate, reproducible by the harness and its reference worker."""
    return int.from_bytes(hashlib.sha256(secret + f"/{workload.uuid}/{trial}".encode()).digest()[:7], "little")


def fingerprint(values: dict[str, Any]) -> str:
    """A cheap content hash of tensors (and scalars), used to prove two processes hold the same inputs."""
    h = hashlib.sha256()
    for name, v in values.items():
        h.update(name.encode())
        if isinstance(v, torch.Tensor):
            h.update(str(tuple(v.shape)).encode())
            t = v.detach().reshape(-1)
            if t.numel() > _FULL_HASH_LIMIT:
                # Large inputs: a fixed strided sample keeps this cheap; it still tells two
                # generators apart, which is all it is for.
                t = t[:: t.numel() // _FULL_HASH_LIMIT + 1]
            t = t.contiguous().cpu()
            h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(v).encode())
    return h.hexdigest()
