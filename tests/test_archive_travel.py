"""A travel copy of an archive (harness/archive/travel.py, `harness copy-archive`): every record, blob and the seal
key, without the reference's cached outputs unless asked; seals verify in the copy and it reads like the original."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from harness.archive.database import Archive, ArchiveError
from harness.archive.travel import JIT_CACHE, travel_copy
from harness.cli import main

from test_archive_transfer import finished_submission

JIT_MODULE = ".cache/flashinfer/0.6.18/90a/cached_ops/batch_decode"
OUTPUT_BYTES = b"\x01" * 50_000  # stands in for a reference's safetensors outputs


def populated(tmp_path):
    archive = Archive(tmp_path / "source")
    sub = finished_submission(archive)
    archive.cache_trusted_outputs("k1", json.dumps({"ok": True}), OUTPUT_BYTES)
    archive.cache_trusted_outputs("k2", json.dumps({"ok": True}), b"\x02" * 1000)
    archive.cache_reference_latency("lat1", 0.25)
    # FlashInfer's JIT folder as its workers leave it: a module's .so beside its objects and build files
    module = tmp_path / "source" / JIT_CACHE / JIT_MODULE
    module.mkdir(parents=True)
    (module / "batch_decode.so").write_bytes(b"\x7fELF" + b"\0" * 100)
    (module / "batch_decode.cuda.o").write_bytes(b"\0" * 5000)
    (module / "build.ninja").write_text("rule link\n")
    (module / "helper.so").write_bytes(b"\0" * 7)  # not <name>/<name>.so: FlashInfer never loads it
    generated = tmp_path / "source" / JIT_CACHE / ".cache/flashinfer/0.6.18/90a/generated/batch_decode"
    generated.mkdir(parents=True)
    (generated / "kernel.cu").write_text("// generated source")
    return archive, sub


def _count(db, sql):
    return sqlite3.connect(db).execute(sql).fetchone()[0]


def test_the_copy_keeps_every_record_and_leaves_the_cached_outputs_out(tmp_path):
    source, sub = populated(tmp_path)
    report = travel_copy(source, tmp_path / "copy")
    assert report.outputs_left_out == 2 and report.output_bytes_left_out == len(OUTPUT_BYTES) + 1000
    assert report.blobs_copied == 4 and report.jit_bytes == 0  # solution, two logs, the build log
    assert not list((tmp_path / "copy").glob("archive.db-*"))  # one self-contained file to carry
    copy = Archive.open_existing(tmp_path / "copy")
    assert copy.verify_seal(sub).state == "sealed"  # seal key copied, sealed rows unchanged
    assert copy.submission(sub)["evaluations"] == source.submission(sub)["evaluations"]
    assert copy.get_blob(copy.submission(sub)["evaluations"][0]["log_blob"]) == b"log of w1"
    assert copy.cached_trusted_outputs("k1") is None and source.cached_trusted_outputs("k1") is not None
    assert copy.cached_reference_latency("lat1") == 0.25  # figures travel: they are what saves a cold start
    assert copy.seed_secret() == source.seed_secret()  # the same seeds, so the outputs recomputed there match
    db = tmp_path / "copy" / "archive.db"
    assert _count(db, "select count(*) from blobs where kind = 'trusted_outputs'") == 0
    assert not (tmp_path / "copy" / "cache").exists()


def test_outputs_and_jit_modules_travel_when_asked(tmp_path):
    source, _ = populated(tmp_path)
    report = travel_copy(source, tmp_path / "copy", with_outputs=True, with_jit=True)
    assert report.outputs_left_out == 0 and report.jit_bytes == 104
    copy = Archive.open_existing(tmp_path / "copy")
    assert copy.cached_trusted_outputs("k1")[1] == OUTPUT_BYTES
    # the module's .so alone, where FlashInfer's prebuilt lookup finds it; objects, build files and sources stay
    carried = sorted(p.relative_to(tmp_path / "copy" / JIT_CACHE).as_posix()
                     for p in (tmp_path / "copy" / JIT_CACHE).rglob("*") if p.is_file())
    assert carried == [f"{JIT_MODULE}/batch_decode.so"]
    assert (tmp_path / "copy" / JIT_CACHE / JIT_MODULE / "batch_decode.so").read_bytes().startswith(b"\x7fELF")


@pytest.mark.parametrize("dest", ["nonempty", "same"])
def test_the_copy_never_overwrites(tmp_path, dest):
    source, _ = populated(tmp_path)
    target = tmp_path / "source" if dest == "same" else tmp_path / "busy"
    if dest == "nonempty":
        target.mkdir()
        (target / "x").write_text("keep me")
    with pytest.raises(ArchiveError):
        travel_copy(source, target)
    if dest == "nonempty":
        assert (target / "x").read_text() == "keep me"


def test_cli_copy_archive(tmp_path):
    populated(tmp_path)
    runner = CliRunner()
    r = runner.invoke(main, ["copy-archive", str(tmp_path / "copy"), "--archive", str(tmp_path / "source"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["outputs_left_out"] == 2
    again = runner.invoke(main, ["copy-archive", str(tmp_path / "copy"), "--archive", str(tmp_path / "source")])
    assert again.exit_code == 2 and "not an empty folder" in again.output
    missing = runner.invoke(main, ["copy-archive", str(tmp_path / "c2"), "--archive", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and not (tmp_path / "nowhere").exists() and not (tmp_path / "c2").exists()


def test_a_link_to_nothing_as_the_destination_is_said_so(tmp_path):
    source, _ = populated(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    result = CliRunner().invoke(main, ["copy-archive", str(tmp_path / "dangling"), "--archive", str(source.folder)])
    assert result.exit_code == 2 and "is a link to nothing" in result.output, result.output
    assert not (tmp_path / "nowhere").exists()


def test_only_blobs_are_copied_as_blobs(tmp_path):
    """A copy made inside the source's blobs/ folder (blobs/zz) put its archive.db and seal key where the next copy
    read every file as a blob, and carried them into its own blobs/."""
    source, _ = populated(tmp_path)
    travel_copy(source, source.folder / "blobs" / "zz")
    travel_copy(source, tmp_path / "next")
    copied = [p.relative_to(tmp_path / "next" / "blobs") for p in (tmp_path / "next" / "blobs").rglob("*")
              if p.is_file()]
    assert copied and all(len(p.parts) == 2 and len(p.parts[0] + p.parts[1]) == 64 for p in copied), copied
