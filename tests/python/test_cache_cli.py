"""`kiln cache ...` on entries the real daemon wrote (tests/python/conftest.py
points KILN_CACHE_DIR at the session daemon's cache directory)."""
from __future__ import annotations

import itertools
import os
import struct
import time

import pytest
import torch
from torch import nn

from kiln import cache_files, cli

# Every model gets its own input width, so its graph (and cache key) is new
# to the session daemon and is written to disk rather than found in memory.
_widths = itertools.count(5)


def _compile_new_model() -> tuple[nn.Module, torch.Tensor]:
    width = next(_widths)
    torch.manual_seed(width)
    model = nn.Sequential(nn.Linear(width, width + 3), nn.ReLU(), nn.Linear(width + 3, 2)).eval()
    x = torch.randn(4, width)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="kiln")(x), model(x))
    return model, x


def _new_entries(cache_dir: str, count: int) -> list[cache_files.Entry]:
    """Compiles models until `count` new entries exist; returns them."""
    before = {e.path for e in cache_files.list_entries(cache_dir)}
    for _ in range(count):
        _compile_new_model()
    new = [e for e in cache_files.list_entries(cache_dir) if e.path not in before]
    assert len(new) >= count
    return new


def _run(capsys, cache_dir: str, *args: str) -> tuple[int, str, str]:
    code = cli.main(["cache", "--cache-dir", cache_dir, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ls_stats_and_verify_see_the_daemons_entries(daemon_up, capsys):
    new = _new_entries(daemon_up.cache_dir, 2)
    everything = cache_files.list_entries(daemon_up.cache_dir)

    code, out, _ = _run(capsys, daemon_up.cache_dir, "ls")
    assert code == 0
    for e in new:
        assert e.key[:16] in out
        assert e.runtime_version and e.cpu_features and e.header_error is None
    assert len(out.strip().splitlines()) == len(everything) + 1  # a header line

    code, out, _ = _run(capsys, daemon_up.cache_dir, "stats")
    assert code == 0
    total = sum(e.size for e in everything)
    assert f"entries:      {len(everything)} (" in out and f"{total} bytes" in out
    assert f"runtime {new[0].runtime_version}:" in out and "size cap:" in out

    code, out, _ = _run(capsys, daemon_up.cache_dir, "verify")
    assert code == 0, out
    assert f"{len(everything)} entries checked, 0 bad" in out


def test_ls_lists_most_recently_used_first(daemon_up, capsys):
    a, b = _new_entries(daemon_up.cache_dir, 2)[:2]
    now = time.time()
    os.utime(a.path, (now + 20, now + 20))
    os.utime(b.path, (now + 10, now + 10))
    _, out, _ = _run(capsys, daemon_up.cache_dir, "ls")
    lines = out.splitlines()
    assert a.key[:16] in lines[1] and b.key[:16] in lines[2]


def test_verify_reports_corrupt_and_truncated_entries_then_deletes_them(daemon_up, capsys):
    corrupt, truncated = _new_entries(daemon_up.cache_dir, 2)[:2]
    with open(corrupt.path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0x5A]))
    os.truncate(truncated.path, truncated.size - 10)

    code, out, _ = _run(capsys, daemon_up.cache_dir, "verify")
    assert code == 1
    assert f"{corrupt.key[:16]}: checksum mismatch" in out
    assert f"{truncated.key[:16]}: truncated or oversized payload" in out
    assert os.path.exists(corrupt.path) and os.path.exists(truncated.path)

    code, out, _ = _run(capsys, daemon_up.cache_dir, "verify", "--delete")
    assert code == 0
    assert "2 bad, 2 removed" in out
    assert not os.path.exists(corrupt.path) and not os.path.exists(truncated.path)
    assert _run(capsys, daemon_up.cache_dir, "verify")[0] == 0


def test_verify_reports_a_bad_header(daemon_up, capsys):
    (entry,) = _new_entries(daemon_up.cache_dir, 1)[:1]
    with open(entry.path, "r+b") as f:
        f.write(b"NOTKILN!")
    code, out, _ = _run(capsys, daemon_up.cache_dir, "verify", "--delete")
    assert code == 0 and f"{entry.key[:16]}: bad magic" in out
    assert not os.path.exists(entry.path)


def test_daemon_recompiles_over_a_corrupt_entry(daemon_up, capsys):
    before = {e.path for e in cache_files.list_entries(daemon_up.cache_dir)}
    model, x = _compile_new_model()
    (entry,) = [e for e in cache_files.list_entries(daemon_up.cache_dir) if e.path not in before]
    with open(entry.path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0x5A]))
    # A fresh daemon has nothing in memory, so it must read the entry.
    daemon_up.stop()
    daemon_up.ensure_running()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="kiln")(x), model(x))
    assert "checksum mismatch" in daemon_up.log(200)
    rewritten = cache_files.read_entry(entry.path)
    assert cache_files.check(rewritten) is None


def _copy_with_runtime_version(entry: cache_files.Entry, version: str, key: str) -> str:
    """A copy of `entry` under `key` claiming another runtime version."""
    with open(entry.path, "rb") as f:
        data = f.read()
    old = entry.runtime_version.encode()
    prefix = cache_files.MAGIC + struct.pack("<I", cache_files.FORMAT_VERSION)
    assert data.startswith(prefix + struct.pack("<I", len(old)) + old)
    new = prefix + struct.pack("<I", len(version)) + version.encode() + \
        data[len(prefix) + 4 + len(old):]
    path = os.path.join(os.path.dirname(os.path.dirname(entry.path)), key[:2], key + ".kart")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(new)
    return path


def test_prune_by_version_age_and_size(daemon_up, capsys):
    old, recent = _new_entries(daemon_up.cache_dir, 2)[:2]
    other = _copy_with_runtime_version(recent, "0.0.9", "f" * 64)
    assert cache_files.read_entry(other).runtime_version == "0.0.9"
    assert cache_files.check(cache_files.read_entry(other)) is None

    code, out, _ = _run(capsys, daemon_up.cache_dir, "prune", "--other-versions")
    assert code == 0 and "runtime 0.0.9" in out
    assert not os.path.exists(other) and os.path.exists(recent.path)

    ten_days_ago = time.time() - 10 * 86400
    os.utime(old.path, (ten_days_ago, ten_days_ago))
    code, out, _ = _run(capsys, daemon_up.cache_dir, "prune", "--older-than", "5")
    assert code == 0 and old.key[:16] in out
    assert not os.path.exists(old.path) and os.path.exists(recent.path)

    code, out, _ = _run(capsys, daemon_up.cache_dir, "prune", "--max-mb", "0")
    assert code == 0 and "0 entries (0 B) remain" in out
    assert cache_files.list_entries(daemon_up.cache_dir) == []


def test_prune_needs_a_criterion(daemon_up, capsys):
    code, _, err = _run(capsys, daemon_up.cache_dir, "prune")
    assert code == 2 and "--max-mb" in err


def test_clear_removes_entries_and_stale_temporaries_only(daemon_up, capsys):
    entries = _new_entries(daemon_up.cache_dir, 1)
    shard = os.path.dirname(entries[0].path)
    artifacts = os.path.dirname(shard)
    stale_tmp = entries[0].path + ".tmp.1.2"
    fresh_tmp = entries[0].path + ".tmp.1.3"
    unrelated = [os.path.join(daemon_up.cache_dir, "notes.txt"),
                 os.path.join(artifacts, "README"),
                 os.path.join(shard, "notes.txt"),
                 os.path.join(daemon_up.cache_dir, "elsewhere", "ab", "x.kart"),
                 fresh_tmp]
    for path in unrelated + [stale_tmp]:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("keep")
    two_hours_ago = time.time() - 7200
    os.utime(stale_tmp, (two_hours_ago, two_hours_ago))
    count = len(cache_files.list_entries(daemon_up.cache_dir))
    try:
        code, out, _ = _run(capsys, daemon_up.cache_dir, "clear")
        assert code == 0 and f"removed {count} entries" in out
        assert cache_files.list_entries(daemon_up.cache_dir) == []
        assert not os.path.exists(stale_tmp)
        for path in unrelated:
            assert os.path.exists(path), path
    finally:
        for path in unrelated:
            os.remove(path)


@pytest.mark.parametrize("command", ["ls", "stats", "verify", "clear", "prune --max-mb 1"])
def test_commands_fail_clearly_without_a_cache_directory(tmp_path, capsys, command):
    missing = str(tmp_path / "missing")
    code, _, err = _run(capsys, missing, *command.split())
    assert code == 1 and f"no cache directory at {missing}" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_commands_fail_clearly_on_an_unreadable_directory(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        code, _, err = _run(capsys, str(locked), "ls")
        assert code == 1 and "cannot read" in err
    finally:
        locked.chmod(0o700)
