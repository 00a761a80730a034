"""Pack every example folder into solution JSON files (run after editing an example's sources).

    python scripts/pack_examples.py          # rewrite the JSON files
    python scripts/pack_examples.py --check  # exit 1 if any JSON is out of date
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# (folder, output file, definition, entry point, name, author)
PS1 = ["gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps1"]
PS64 = ["gqa_paged_decode_h32_kv8_d128_ps64", "gqa_paged_decode_h32_kv4_d128_ps64"]
PLAN = (
    [("triton_gqa_decode", f"solutions/{d}.json", d, "kernel.py::run", "triton_gqa_decode", "crucible-examples") for d in PS1]
    + [("triton_gqa_decode", f"solutions/{d}.json", d, "kernel.py::run_paged", "triton_gqa_decode", "crucible-examples") for d in PS64]
    + [(bad, "solution.json", PS1[0], "kernel.py::run", f"example_{bad}", "crucible-examples")
       for bad in ("compile_error", "wrong_numerics", "hang", "illegal_address")]
)


def pack(folder: str, definition: str, entry: str, name: str, author: str) -> str:
    root = EXAMPLES / folder
    sources = [{"path": p.name, "content": p.read_text()} for p in sorted(root.glob("*.py"))]
    data = {"name": name, "definition": definition, "author": author,
            "spec": {"language": "triton", "target_hardware": ["H200", "B200"], "entry_point": entry,
                     "dependencies": [], "destination_passing_style": True, "binding": None},
            "sources": sources, "description": (root / sources[0]["path"]).read_text().split('"""')[1].strip()}
    return json.dumps(data, indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for folder, out, definition, entry, name, author in PLAN:
        text = pack(folder, definition, entry, name, author)
        path = EXAMPLES / folder / out
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run scripts/pack_examples.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
