"""`kiln cache export` and `kiln cache import` with real daemons: an archive
of one daemon's cache directory, imported into an empty one, lets the next
daemon there answer without compiling; an archive changed after it was
written, or opened with another key, is refused record by record and
nothing of it is used.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile

import pytest

from cache_clients import CnnSpec
from kiln import cli
from test_shared_cache import _compile_here
from testing.daemons import Kilnd
from testing.redis_server import write_key_file

SPEC = CnnSpec(seed=7800, width=16, layers=3, size=12, batch_norm=True)


@pytest.fixture
def work():
    path = tempfile.mkdtemp(prefix="ka-", dir="/tmp")
    daemons: list[Kilnd] = []

    def start(name: str) -> Kilnd:
        d = Kilnd(os.path.join(path, name))
        os.makedirs(d.workdir, mode=0o700)
        d.start()
        daemons.append(d)
        return d

    start.path = path
    try:
        yield start
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(path, ignore_errors=True)


def _cache(capfd, cache_dir: str, *args: str) -> tuple[int, str]:
    code = cli.main(["cache", "--cache-dir", cache_dir, *args])
    out = capfd.readouterr()
    return code, out.out + out.err


def _exported(work, capfd) -> tuple[str, str, Kilnd]:
    """An archive of a daemon's directory after it compiled SPEC, and its key."""
    source = work("source")
    _compile_here(source.socket, SPEC)
    assert source.stats().graphs_compiled == 1, source.log(20)
    source.stop()
    key = write_key_file(os.path.join(work.path, "archive.key"))
    archive = os.path.join(work.path, "cache.kpak")
    code, out = _cache(capfd, source.cache_dir, "export", archive, "--key-file", key)
    assert code == 0, out
    assert "exported 1 compiled graphs" in out, out
    return archive, key, source


def test_an_imported_archive_makes_the_next_daemon_compile_nothing(work, capfd):
    archive, key, _ = _exported(work, capfd)
    dest = Kilnd(os.path.join(work.path, "dest"))
    os.makedirs(dest.workdir, mode=0o700)
    code, out = _cache(capfd, dest.cache_dir, "import", archive, "--key-file", key)
    assert code == 0, out
    assert "imported 1 compiled graphs" in out and "1 lowering entries" in out, out
    assert "refused" not in out, out
    dest.start()
    try:
        _compile_here(dest.socket, SPEC)  # checks eager's answer
        s = dest.stats()
        assert (s.graphs_compiled, s.disk_cache_hits) == (0, 1), dest.log(30)
    finally:
        dest.stop()


@pytest.mark.parametrize("how", ["changed", "another key"])
def test_an_archive_that_does_not_open_is_refused(work, capfd, how):
    archive, key, _ = _exported(work, capfd)
    if how == "changed":
        # One bit of the first record (the compiled graph's entry), past
        # the header's two strings and the record's kind, name and length.
        with open(archive, "r+b") as f:
            data = bytearray(f.read())
            pos = 12
            for _ in range(2):
                pos += 4 + struct.unpack_from("<I", data, pos)[0]
            pos += 1
            pos += 4 + struct.unpack_from("<I", data, pos)[0]
            pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            data[pos - 1] ^= 0x01
            f.seek(0)
            f.write(data)
    else:
        key = write_key_file(os.path.join(work.path, "other.key"))
    dest = Kilnd(os.path.join(work.path, "dest"))
    os.makedirs(dest.workdir, mode=0o700)
    code, out = _cache(capfd, dest.cache_dir, "import", archive, "--key-file", key)
    assert code != 0, out
    assert "refused" in out, out
    dest.start()
    try:
        _compile_here(dest.socket, SPEC)
        s = dest.stats()
        # What did not open was not written: the graph compiles here.
        assert (s.graphs_compiled, s.disk_cache_hits) == (1, 0), dest.log(30)
    finally:
        dest.stop()


def test_export_and_import_say_what_is_wrong(work, capfd, tmp_path):
    empty = str(tmp_path / "empty-cache")
    # No key file given and none in the environment.
    env_key = os.environ.pop("KILN_REMOTE_CACHE_KEY_FILE", None)
    try:
        code, out = _cache(capfd, empty, "export", str(tmp_path / "a.kpak"))
        assert code == 2 and "--key-file" in out, out
    finally:
        if env_key is not None:
            os.environ["KILN_REMOTE_CACHE_KEY_FILE"] = env_key
    loose = tmp_path / "loose.key"
    loose.write_text(os.urandom(32).hex() + "\n")
    loose.chmod(0o644)
    code, out = _cache(capfd, empty, "export", str(tmp_path / "a.kpak"), "--key-file", str(loose))
    assert code == 1 and "may be read by others" in out, out
    key = write_key_file(tmp_path / "k.key")
    not_archive = tmp_path / "not.kpak"
    not_archive.write_bytes(b"something else entirely")
    code, out = _cache(capfd, empty, "import", str(not_archive), "--key-file", key)
    assert code == 1 and "not a Kiln cache archive" in out, out
    code, out = _cache(capfd, empty, "import", str(tmp_path / "missing.kpak"), "--key-file", key)
    assert code == 1 and "cannot open" in out, out
