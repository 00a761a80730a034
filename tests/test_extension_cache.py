"""The torch extensions a solution built, kept for its next evaluation (harness/sandbox/extension_cache.py): what a
kept folder may hold, and, through the harness on CPU, a second evaluation of a solution that builds a C++
extension at import getting its first build back instead of compiling again."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import time

import pytest

from harness.sandbox.extension_cache import ExtensionCache, pack, unpack

from support import KV8_PS1, ROOT


def _build_folder(root):
    folder = root / "ext" / "probe"
    folder.mkdir(parents=True)
    for name, text in [("build.ninja", "rule cxx\n"), ("main.cpp", "int f();\n"), ("main.o", "\x7fELF"),
                       ("probe.so", "\x7fELF"), (".ninja_log", "# ninja log v5\n"), ("notes.txt", "not a build file")]:
        (folder / name).write_text(text)
    os.utime(folder / "main.o", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    (folder / "link.so").symlink_to(folder / "probe.so")
    return root / "ext"


def test_a_kept_build_comes_back_with_its_files_and_their_times(tmp_path):
    data, what = pack(_build_folder(tmp_path))
    assert data is not None and what.startswith("5 files")
    out = tmp_path / "again"
    assert unpack(data, out) == 5
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["probe/.ninja_log", "probe/build.ninja", "probe/main.cpp", "probe/main.o", "probe/probe.so"]
    # ninja decides what to rebuild by modification times, its deps log to the nanosecond: they come back exactly
    assert os.stat(out / "probe" / "main.o").st_mtime_ns == 1_700_000_000_123_456_789


@pytest.mark.parametrize("folder_state, why", [("missing", "no extension folder"), ("empty", "nothing built"),
                                               ("large", "over the")])
def test_nothing_is_kept_without_a_build_or_past_the_limit(tmp_path, folder_state, why):
    folder = tmp_path / "ext"
    if folder_state != "missing":
        folder.mkdir()
    if folder_state == "large":
        (folder / "big.so").write_bytes(b"x" * 4096)
    data, what = pack(folder, max_bytes=1024)
    assert data is None and why in what


@pytest.mark.parametrize("member, refused", [("../escape.so", True), ("/abs/escape.so", False), ("link.so", False)])
def test_a_forged_copy_cannot_write_outside_its_folder(tmp_path, member, refused):
    """A parent path is refused, an absolute one lands inside the folder, a link is not extracted at all."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(member)
        if member == "link.so":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        else:
            info.size = 4
        tar.addfile(info, io.BytesIO(b"evil") if info.size else None)
    out = tmp_path / "box" / "ext"
    try:
        unpack(buffer.getvalue(), out)
        raised = False
    except tarfile.FilterError:
        raised = True
    assert raised == refused
    written = [p for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()]
    assert all(out in p.parents for p in written), written
    assert not (out / "link.so").is_symlink() and not (out / "link.so").exists()


def test_the_cache_keeps_one_copy_per_solution_and_toolchain(tmp_path):
    cache = ExtensionCache(tmp_path / "cache", max_bytes=100)
    a, b = ExtensionCache.key("hash-a", "torch 2.11"), ExtensionCache.key("hash-a", "torch 2.12")
    assert a != b and a != ExtensionCache.key("hash-b", "torch 2.11")
    assert cache.get(a) is None
    assert cache.put(a, b"first") and cache.get(a) == b"first" and cache.get(b) is None
    assert cache.put(a, b"newer") and cache.get(a) == b"newer"  # a fresh build replaces the kept one
    assert not cache.put(b, b"x" * 101) and cache.get(b) is None  # over the limit: not kept
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_the_store_keeps_the_recently_used_copies_within_its_limit(tmp_path):
    cache = ExtensionCache(tmp_path / "cache", max_bytes=100, max_total_bytes=250)
    keys = [ExtensionCache.key(f"hash-{i}", "t") for i in range(4)]
    for i, key in enumerate(keys[:2]):
        assert cache.put(key, b"x" * 100)
        os.utime(cache._path(key), (1_000 + i, 1_000 + i))
    assert cache.get(keys[0]) is not None  # used now: newer than keys[1]
    assert cache.put(keys[2], b"y" * 100)  # 300 bytes > 250: the least recently used (keys[1]) goes
    assert [cache.get(k) is not None for k in keys[:3]] == [True, False, True]


PROBE = '''import torch.utils.cpp_extension as cpp

_ext = cpp.load_inline(name="crucible_cache_probe", functions=["built_at"],
                       cpp_sources='std::string built_at() { return std::string(__DATE__) + " " + __TIME__; }')
print("extension built at", _ext.built_at(), flush=True)
'''


@pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("c++")), reason="needs ninja and a C++ compiler")
def test_a_second_evaluation_reuses_the_extension_its_first_built(tiny_dataset_root, tmp_path):
    """Two sessions on one archive judge a solution that builds a C++ extension at import: the first compiles it
    and the harness keeps the build; the second worker gets it back before the import and ninja compiles nothing,
    so the library it loads is the first one (the same compile time stamp), and both pass."""
    from harness.archive.database import Archive
    from harness.archive.queries import artifact_rows
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    base = json.loads((ROOT / "examples" / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json").read_text())
    base["name"] = "extension_probe"
    base["sources"][0]["content"] = "from . import probe  # noqa: F401\n" + base["sources"][0]["content"]
    base["sources"].append({"path": "probe.py", "content": PROBE})
    solution = Solution.model_validate(base)
    stamps, walls = [], []
    for _ in range(2):
        archive = Archive(tmp_path / "archive")
        started = time.perf_counter()
        with Session(Dataset(tiny_dataset_root), archive,
                     SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as session:
            result = session.submit(solution)
        walls.append(time.perf_counter() - started)
        assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
        (log,) = [r for r in artifact_rows(archive.db, result.submission_id) if r["kind"] == "build_log"]
        text = archive.get_blob(log["blob"]).decode()
        stamps.append((re.search(r"extension built at (.+)", text).group(1), "put back before the import" in text))
    assert len(list((tmp_path / "archive" / "cache" / "extensions").glob("*.tar"))) == 1
    assert stamps[0][0] == stamps[1][0], f"compiled again: {stamps} ({walls})"
    assert stamps == [(stamps[0][0], False), (stamps[0][0], True)]


LEAVE_BEHIND = '''import os
from pathlib import Path

folder = Path(os.environ["TORCH_EXTENSIONS_DIR"])
seen = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) if folder.is_dir() else []
print("found at import:", seen)
(folder / "probe").mkdir(parents=True, exist_ok=True)
(folder / "probe" / "state.so").write_text("TAG")
(folder / "probe" / "notes.txt").write_text("not a build file")
if not (folder / "probe" / "link.so").is_symlink():
    (folder / "probe" / "link.so").symlink_to("/etc/hostname")
'''


def test_what_a_solution_leaves_in_its_extension_folder_reaches_only_its_own_next_evaluation(tiny_dataset_root,
                                                                                            tmp_path):
    """A candidate that writes into its extension folder at import (a file of a kept kind, one of another kind, a
    link out of the folder): its own next evaluation finds the kept file and nothing else; another solution, the
    same code with one byte changed, finds nothing; nor does its own full-audit evaluation (what a promotion rests
    on) or one with ``fresh_builds`` (``harness submit --fresh-builds``)."""
    from harness.archive.database import Archive
    from harness.archive.queries import artifact_rows
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    def solution(tag):
        base = json.loads((ROOT / "examples" / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json").read_text())
        base["name"] = f"leaves_{tag}"
        base["sources"][0]["content"] = "from . import probe  # noqa: F401\n" + base["sources"][0]["content"]
        base["sources"].append({"path": "probe.py", "content": LEAVE_BEHIND.replace("TAG", tag)})
        return Solution.model_validate(base)

    found = []
    for candidate, level, fresh in [(solution("a"), "fast", False), (solution("a"), "fast", False),
                                    (solution("b"), "fast", False), (solution("a"), "full", False),
                                    (solution("a"), "fast", True)]:
        archive = Archive(tmp_path / "archive")
        with Session(Dataset(tiny_dataset_root), archive,
                     SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300, fresh_builds=fresh)) as session:
            result = session.submit(candidate, audit_level=level)
        assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
        (log,) = [r for r in artifact_rows(archive.db, result.submission_id) if r["kind"] == "build_log"]
        found.append(re.search(r"found at import: (.+)", archive.get_blob(log["blob"]).decode()).group(1))
    assert found == ["[]", "['probe', 'probe/state.so']", "[]", "[]", "[]"]
