"""Small GDN datasets for CPU tests: the official gdn definitions with a few of their own workloads (the captured
blobs are absent, so the family draws its stand-ins), and the official reference exec'd for direct checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support import DEFINITIONS, ROOT

DECODE = "gdn_decode_qk4_v8_d128_k_last"
PREFILL = "gdn_prefill_qk4_v8_d128_k_last"
SKILL = ROOT / "skills" / "gdn"
EXAMPLES = ROOT / "examples" / "gdn"
# Small enough for the Triton interpreter: one and four decode states; prefill of one short sequence and of two.
SMALL = {DECODE: ["b1_0", "b4_0"], PREFILL: ["t6_n1", "t28_n2"]}


def reference(definition: str):
    """The definition's Python reference `run`, exec'd from its JSON text (the ground truth)."""
    data = json.loads((DEFINITIONS / "definitions" / "gdn" / f"{definition}.json").read_text())
    namespace: dict = {}
    exec(data["reference"], namespace)  # noqa: S102 - the repository's own definition text
    return namespace["run"]


def make_gdn_dataset(root: Path, small: dict[str, list[str]] = SMALL) -> Path:
    """A trace-set folder with both gdn definitions, the named workloads of each and the `gdn` alias."""
    (root / "definitions" / "gdn").mkdir(parents=True, exist_ok=True)
    (root / "workloads" / "gdn").mkdir(parents=True, exist_ok=True)
    shutil.copy(DEFINITIONS / "eval_config.yaml", root / "eval_config.yaml")
    all_labels = json.loads((DEFINITIONS / "workloads" / "gdn" / "labels.json").read_text())
    labels = {}
    for definition, wanted in small.items():
        shutil.copy(DEFINITIONS / "definitions" / "gdn" / f"{definition}.json", root / "definitions" / "gdn")
        lines = []
        for line in (DEFINITIONS / "workloads" / "gdn" / f"{definition}.jsonl").read_text().splitlines():
            uuid = json.loads(line)["workload"]["uuid"]
            if all_labels.get(uuid) in wanted:
                lines.append(line)
                labels[uuid] = all_labels[uuid]
        assert len(lines) == len(wanted), (definition, wanted)
        (root / "workloads" / "gdn" / f"{definition}.jsonl").write_text("\n".join(lines) + "\n")
    (root / "workloads" / "gdn" / "labels.json").write_text(json.dumps(labels, indent=2))
    (root / "aliases.yaml").write_text("gdn:\n" + "".join(f"  - {d}\n" for d in small))
    return root
