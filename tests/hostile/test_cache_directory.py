"""Point 7: the cache directory is input too.

Whatever is planted in the daemon's cache directory, kilnd keeps serving
right answers: a directory someone else could write is refused (caching
off, said once); an entry that is a FIFO, a link to /dev/zero, larger than
its header says, of another owner or mode, or whose bytes are not what its
name says (an uploaded weight that does not hash to its name, a derived
weight without a valid MAC) is a logged miss, never a hang, an OOM, a
wrong answer or an "already present" that is never true. And what the
daemon verified is what it uses (point 3, the cache's side): saved weights
rewritten or truncated under a running graph change nothing.

Restarts go through SIGTERM, which finishes the daemon's queued writes of
saved weights before it exits: a test never waits on the background writer.
"""
from __future__ import annotations

import os
import stat
import hashlib
import struct
from pathlib import Path

import grpc
import pytest
import torch
import torch.nn.functional as F

from conftest import Bystander, RawClient, call, graph, placeholder, relu_graph, sha256_hex
from kiln import shm
from kiln.v1 import kiln_pb2

OTHER_UID = 65534  # nobody: any uid but the daemon's (root's) own
HEADER = 4096      # of a saved weight (cache/constant_files.h)
DISABLED = "compiled-graph cache disabled"


# ---- Graphs and the client's side of a compile ---------------------------------

def _ints(*values: int) -> kiln_pb2.Argument:
    return kiln_pb2.Argument(list=kiln_pb2.ArgumentList(
        items=[kiln_pb2.Argument(int_value=v) for v in values]))


def _constant(name: str, t: torch.Tensor) -> kiln_pb2.Node:
    node = kiln_pb2.Node(name=name)
    node.constant.hash = sha256_hex(t)
    node.constant.meta.CopyFrom(shm.tensor_meta(t.dtype, t.shape))
    return node


class ConvNet:
    """conv -> batch norm -> relu, twice, channels C to C: compiling folds
    each batch norm into its convolution and packs the folded weights, so
    the cache directory gets uploaded weights, folds and packings, two of
    each of equal size."""

    C, HW = 8, 10

    def __init__(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        c = self.C
        self.layers = [{
            "w": torch.randn(c, c, 3, 3, generator=g) * 0.3,
            "b": torch.randn(c, generator=g) * 0.1,
            "gamma": torch.rand(c, generator=g) + 0.5,
            "beta": torch.randn(c, generator=g) * 0.5,
            "mean": torch.randn(c, generator=g) * 0.2,
            "var": torch.rand(c, generator=g) + 0.5,
        } for _ in range(2)]
        self.weights = [t for layer in self.layers for t in layer.values()]
        nodes = [placeholder("x", shm.tensor_meta(torch.float32, self.input_shape))]
        x = 0
        for i, layer in enumerate(self.layers):
            ref = {}
            for name, t in layer.items():
                ref[name] = len(nodes)
                nodes.append(_constant(f"{name}{i}", t))
            conv = len(nodes)
            nodes.append(call(f"conv{i}", "aten.convolution.default", x, ref["w"], ref["b"],
                              _ints(1, 1), _ints(1, 1), _ints(1, 1),
                              kiln_pb2.Argument(bool_value=False), _ints(0, 0),
                              kiln_pb2.Argument(int_value=1)))
            bn = len(nodes)
            nodes.append(call(f"bn{i}", "aten.native_batch_norm.default", conv, ref["gamma"],
                              ref["beta"], ref["mean"], ref["var"],
                              kiln_pb2.Argument(bool_value=False),
                              kiln_pb2.Argument(float_value=0.1),
                              kiln_pb2.Argument(float_value=1e-5)))
            x = len(nodes)
            nodes.append(call(f"relu{i}", "aten.relu.default",
                              kiln_pb2.Argument(node=kiln_pb2.NodeRef(node=bn, output=0))))
        self.graph = graph(nodes, [x])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (1, self.C, self.HW, self.HW)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.conv2d(x, layer["w"], layer["b"], padding=1)
            x = F.batch_norm(x, layer["mean"], layer["var"], layer["gamma"], layer["beta"],
                             training=False, eps=1e-5)
            x = torch.relu(x)
        return x


def _weights_graph(w: torch.Tensor) -> kiln_pb2.Graph:
    """relu(w): the daemon's answer is the stored constant, as it holds it."""
    return graph([_constant("w", w), call("relu", "aten.relu.default", 0)], [1])


def _input_plus_weights_graph(w: torch.Tensor) -> kiln_pb2.Graph:
    """x + w: every run reads w, so a warm compile looks it up."""
    return graph([placeholder("x", shm.tensor_meta(w.dtype, w.shape)), _constant("w", w),
                  call("add", "aten.add.Tensor", 0, 1)], [2])


def _upload(client: RawClient, weights: list[torch.Tensor], hashes: set[str]) -> None:
    todo = [w for w in weights if sha256_hex(w) in hashes]
    if not todo:
        return
    offsets, size = [], 0
    for w in todo:
        offsets.append(size)
        size += (w.numel() * w.element_size() + 63) // 64 * 64
    region = client.region(size)
    client.upload([(sha256_hex(w), region.write(off, w.contiguous()))
                   for w, off in zip(todo, offsets)])


def compile_cached(client: RawClient, g: kiln_pb2.Graph, weights: list[torch.Tensor],
                   timeout: float = 60) -> kiln_pb2.CompileResponse:
    """What kiln's client does: asks which weights the daemon lacks, uploads
    those, compiles with model caching; a compile that finds weights
    missing after all (a saved copy failed its check) uploads them and
    compiles again."""
    hashes = [sha256_hex(w) for w in weights]
    request = kiln_pb2.QueryConstantsRequest(session_id=client.session, hashes=hashes)
    missing = client.stub.QueryConstants(request, timeout=30).missing
    _upload(client, weights, set(missing))
    request = kiln_pb2.CompileRequest(session_id=client.session, graph=g, model_caching=True)
    try:
        return client.stub.Compile(request, timeout=timeout)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.FAILED_PRECONDITION or "upload them first" not in e.details():
            raise
    _upload(client, weights, set(hashes))
    return client.stub.Compile(request, timeout=timeout)


def run(client: RawClient, handle: int, x: torch.Tensor | None,
        out_shape: tuple[int, ...]) -> torch.Tensor:
    n_in = 0 if x is None else x.numel() * 4
    region = client.region(n_in + shm.nbytes(torch.float32, out_shape) + 64)
    inputs = [] if x is None else [region.write(0, x)]
    out_at = (n_in + 63) // 64 * 64
    client.execute(handle, inputs, [region.descriptor(out_at, torch.float32, out_shape)])
    return region.view(out_at, torch.float32, out_shape).clone()


def check_net(client: RawClient, net: ConvNet) -> int:
    """Compiles `net` (cached) and checks one run against eager; its handle."""
    handle = compile_cached(client, net.graph, net.weights).handle
    x = torch.randn(net.input_shape)
    torch.testing.assert_close(run(client, handle, x, net.input_shape), net.reference(x),
                               rtol=1e-4, atol=1e-4)
    return handle


# ---- The daemon's files ------------------------------------------------------

def saved_constants(cache_dir: str) -> dict[str, Path]:
    """Saved weights by the key in their header ("h:<hash>" for a client's,
    "d:..." for folds, "pack|..." for packed weights)."""
    out = {}
    for path in Path(cache_dir, "constants").glob("*/*.kcst"):
        head = path.read_bytes()[:HEADER]
        (length,) = struct.unpack_from("<I", head, 12)
        out[head[32:32 + length].decode()] = path
    return out


def uploaded_path(cache_dir: str, digest: str) -> Path:
    """Where a client's weight of content hash `digest` is saved: the name
    is the SHA-256 of its key, "h:<digest>"."""
    name = hashlib.sha256(f"h:{digest}".encode()).hexdigest()
    return Path(cache_dir, "constants", name[:2], name + ".kcst")


def plant_under(source: Path, target: Path, key: str) -> None:
    """`source`'s file (header and bytes) at `target`, its header naming
    `key`: it passes every check but the one that binds the bytes to the
    name (a content hash, or a MAC over key and bytes)."""
    data = bytearray(source.read_bytes())
    (old_length,) = struct.unpack_from("<I", data, 12)
    struct.pack_into("<I", data, 12, len(key))
    data[32:32 + max(old_length, len(key))] = key.encode().ljust(max(old_length, len(key)), b"\0")
    target.parent.mkdir(mode=0o755, exist_ok=True)
    tmp = target.with_name(target.name + ".planted")
    tmp.write_bytes(bytes(data))
    tmp.chmod(0o600)
    tmp.replace(target)


def artifact_path(cache_dir: str, key: str) -> Path:
    return Path(cache_dir, "artifacts", key[:2], key + ".kart")


def log_text(kilnd) -> str:
    return Path(kilnd.log_file).read_text(errors="replace")


def restart(kilnd) -> int:
    """Stops kilnd (its queued writes finish) and starts it on the same
    directory; the offset in its log where the new run begins."""
    kilnd.stop()
    start = Path(kilnd.log_file).stat().st_size
    kilnd.start()
    return start


def stats(client: RawClient) -> kiln_pb2.StatsResponse:
    return client.stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)


@pytest.fixture
def fresh_bystander(kilnd):
    """A bystander that joins after the test's restarts (the fixture's own
    would have lost its session with the daemon it started on); the test
    calls it, and it must be served at the end."""
    made = []

    def make() -> Bystander:
        made.append(Bystander(kilnd.socket))
        return made[-1]

    yield make
    for b in made:
        assert kilnd.alive(), f"kilnd {kilnd.exit_description()}; log:\n{kilnd.log()}"
        b.check()
        b.close()


def _cold_then_restart(kilnd, seed: int) -> tuple[ConvNet, int]:
    """Compiles a ConvNet with caching on a fresh daemon, then restarts it;
    the net and the new run's log offset."""
    net = ConvNet(seed)
    c = RawClient(kilnd.socket, name="cold")
    try:
        check_net(c, net)
    finally:
        c.close()
    return net, restart(kilnd)


# ---- Entries that are not what a reader expects ------------------------------

def _compiled_relu_entry(kilnd, client: RawClient, shape=(8, 8)) -> tuple[kiln_pb2.Graph, Path]:
    """Compiles relu with caching, releases the handle (so the next compile
    looks on disk) and returns the graph and its entry's path."""
    g = relu_graph(shape)
    resp = compile_cached(client, g, [])
    client.stub.Release(kiln_pb2.ReleaseRequest(session_id=client.session, handle=resp.handle),
                        timeout=10)
    path = artifact_path(kilnd.cache_dir, resp.graph_key)
    assert path.is_file(), list(Path(kilnd.cache_dir).rglob("*"))
    return g, path


def _bytes_read(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/<pid>/io")


def _run_relu(client: RawClient, handle: int, shape=(8, 8)) -> None:
    x = torch.randn(shape)
    region = client.region(2 * x.numel() * 4)
    out = region.descriptor(x.numel() * 4, torch.float32, shape)
    client.execute(handle, [region.write(0, x)], [out])
    assert torch.equal(region.view(x.numel() * 4, torch.float32, shape), torch.relu(x))


def test_fifo_in_place_of_an_entry_is_a_miss_not_a_hang(kilnd, bystander, hostile):
    g, path = _compiled_relu_entry(kilnd, hostile)
    path.unlink()
    os.mkfifo(path, 0o600)
    try:
        # Before: the daemon's open() waited for a writer that never came.
        handle = compile_cached(hostile, g, [], timeout=30).handle
    finally:
        # Lets a daemon stuck in open() go (the code before the fix).
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    _run_relu(hostile, handle)
    assert f"cache entry {path} rejected (a FIFO)" in log_text(kilnd)
    assert stat.S_ISREG(os.lstat(path).st_mode)  # the compile stored a good entry again


# Before the fix the daemon read a link to /dev/zero until memory ran out;
# held to this much address space, it stops sooner instead of taking the
# machine's memory with it. Well above what kilnd needs (about 1.1 GiB,
# and up to 1 GiB more of malloc arenas under load).
ADDRESS_SPACE = 3 << 30


@pytest.mark.kilnd_address_space(ADDRESS_SPACE)
def test_link_to_dev_zero_in_place_of_an_entry_is_a_miss_not_an_oom(kilnd, bystander, hostile):
    g, path = _compiled_relu_entry(kilnd, hostile)
    path.unlink()
    path.symlink_to("/dev/zero")
    before = _bytes_read(kilnd.proc.pid)
    handle = compile_cached(hostile, g, []).handle
    read = _bytes_read(kilnd.proc.pid) - before
    _run_relu(hostile, handle)
    assert read < 16 << 20, f"kilnd read {read} bytes to reject one entry"
    assert f"cache entry {path} rejected (a symbolic link)" in log_text(kilnd)
    assert stat.S_ISREG(os.lstat(path).st_mode)


def test_entry_larger_than_its_header_says_is_not_read(kilnd, bystander, hostile):
    g, path = _compiled_relu_entry(kilnd, hostile)
    with open(path, "r+b") as f:  # sparse: no disk, but 256 MiB for a reader
        f.truncate(256 << 20)
    before = _bytes_read(kilnd.proc.pid)
    handle = compile_cached(hostile, g, []).handle
    read = _bytes_read(kilnd.proc.pid) - before
    _run_relu(hostile, handle)
    assert read < 16 << 20, f"kilnd read {read} bytes to reject one entry"
    assert f"cache entry {path} rejected (truncated or oversized payload)" in log_text(kilnd)


# ---- Saved weights whose bytes are not what their name says --------------------

def test_uploaded_weight_whose_bytes_do_not_match_its_hash_is_not_used(kilnd, fresh_bystander):
    a = torch.randn(64, 64)
    b = -a.abs() - 1  # relu(b) is all zeros; relu(a) is not
    c = RawClient(kilnd.socket, name="cold")
    compile_cached(c, _weights_graph(a), [a])
    c.close()
    restart(kilnd)
    a_file = uploaded_path(kilnd.cache_dir, sha256_hex(a))
    b_file = uploaded_path(kilnd.cache_dir, sha256_hex(b))
    assert a_file.is_file()
    plant_under(a_file, b_file, f"h:{sha256_hex(b)}")

    bystander = fresh_bystander()
    client = RawClient(kilnd.socket)
    try:
        handle = compile_cached(client, _weights_graph(b), [b]).handle
        got = run(client, handle, None, (64, 64))
    finally:
        client.close()
    assert torch.equal(got, torch.relu(b)), "kilnd computed with bytes planted under b's hash"
    assert f"cached constant {b_file} rejected (content does not match its hash)" in log_text(kilnd)
    bystander.check()


def test_derived_weight_without_a_valid_mac_is_derived_again(kilnd, fresh_bystander):
    net, since = _cold_then_restart(kilnd, seed=7001)
    # Each derived file (fold or packing) gets the bytes of its twin of
    # equal size from the other layer, under its own name and key.
    saved = saved_constants(kilnd.cache_dir)
    derived = {k: p for k, p in saved.items() if not k.startswith("h:")}
    groups: dict[tuple[str, int], list[tuple[str, Path]]] = {}
    for key, path in derived.items():
        groups.setdefault((key.split(":")[0].split("|")[0], path.stat().st_size), []).append(
            (key, path))
    pairs = [g for g in groups.values() if len(g) == 2]
    assert pairs, f"no two derived weights of one size: {sorted(derived)}"
    contents = {path: path.read_bytes() for group in pairs for _, path in group}
    planted = []
    for (k0, p0), (k1, p1) in pairs:
        for (key, path), source in (((k0, p0), p1), ((k1, p1), p0)):
            tmp = path.with_name(path.name + ".source")
            tmp.write_bytes(contents[source])
            plant_under(tmp, path, key)
            tmp.unlink()
            planted.append(path)

    bystander = fresh_bystander()
    client = RawClient(kilnd.socket)
    try:
        check_net(client, net)  # the eager answer: nothing planted was used
    finally:
        client.close()
    log = log_text(kilnd)[since:]
    for path in planted:
        if f"cached constant {path} rejected" in log:  # read: then refused, once
            assert log.count(f"cached constant {path} rejected (no valid MAC)") == 1, log
    # The packed weights are read by every run: those at least were checked.
    assert any(f"cached constant {p} rejected (no valid MAC)" in log for p in planted), log
    bystander.check()


def test_saved_weights_rewritten_or_truncated_under_a_running_graph_change_nothing(
        kilnd, fresh_bystander):
    net, _ = _cold_then_restart(kilnd, seed=7002)
    bystander = fresh_bystander()
    client = RawClient(kilnd.socket)
    try:
        handle = check_net(client, net)  # a warm compile: weights read from the files
        assert stats(client).constant_bytes_from_cache > 0
        for path in saved_constants(kilnd.cache_dir).values():
            with open(path, "r+b") as f:
                f.seek(HEADER)
                f.write(b"\x7f" * (path.stat().st_size - HEADER))
                f.truncate(HEADER // 2)
        # Before: the weights were mapped from the files, and a run read
        # the new bytes, or past the end (SIGBUS: the daemon died).
        x = torch.randn(net.input_shape)
        torch.testing.assert_close(run(client, handle, x, net.input_shape), net.reference(x),
                                   rtol=1e-4, atol=1e-4)
    finally:
        client.close()
    bystander.check()


# ---- Entries that cannot be used are never "already present" ------------------

@pytest.mark.parametrize("spoil", ["mode 000", "another owner"])
def test_unusable_saved_weight_is_not_already_present(kilnd, fresh_bystander, spoil):
    w = torch.randn(32, 32)
    c = RawClient(kilnd.socket, name="cold")
    compile_cached(c, _input_plus_weights_graph(w), [w])
    c.close()
    restart(kilnd)
    path = uploaded_path(kilnd.cache_dir, sha256_hex(w))
    if spoil == "mode 000":
        path.chmod(0)
    else:
        os.chown(path, OTHER_UID, OTHER_UID)

    bystander = Bystander(kilnd.socket)
    client = RawClient(kilnd.socket)
    try:
        query = kiln_pb2.QueryConstantsRequest(session_id=client.session, hashes=[sha256_hex(w)])
        # A daemon of another user could not even open it: never "present".
        assert list(client.stub.QueryConstants(query, timeout=10).missing) == [sha256_hex(w)]
        _upload(client, [w], {sha256_hex(w)})
        assert list(client.stub.QueryConstants(query, timeout=10).missing) == []
        handle = compile_cached(client, _input_plus_weights_graph(w), [w]).handle
        x = torch.randn(32, 32)
        assert torch.equal(run(client, handle, x, (32, 32)), x + w)
    finally:
        client.close()
    assert f"cached constant {path} rejected (" in log_text(kilnd)
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}; log:\n{kilnd.log()}"
    bystander.check()
    bystander.close()
    # Saved again by the compile, as the daemon's own.
    kilnd.stop()
    st = path.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600)
    kilnd.start()
    fresh_bystander()


# ---- Directories someone else could write ------------------------------------

def _spoil_directory(cache_dir: str, what: str) -> tuple[Path, str]:
    """Makes one directory of the cache writable by others or theirs; the
    directory and the reason the daemon must give."""
    root = Path(cache_dir)
    if what == "root group-writable":
        root.chmod(0o775)
        return root, f"{root} is writable by its group or others (mode 0775)"
    if what == "root of another user":
        os.chown(root, OTHER_UID, OTHER_UID)
        return root, f"{root} belongs to uid {OTHER_UID}, not to kilnd's uid {os.geteuid()}"
    if what == "subdirectory world-writable":
        sub = root / "artifacts"
        sub.chmod(0o777)
        return sub, f"{sub} is writable by its group or others (mode 0777)"
    shard = next((root / "constants").iterdir())
    os.chown(shard, OTHER_UID, OTHER_UID)
    return shard, f"{shard} belongs to uid {OTHER_UID}, not to kilnd's uid {os.geteuid()}"


@pytest.mark.parametrize("what", ["root group-writable", "root of another user",
                                  "subdirectory world-writable", "shard of another user"])
def test_directory_others_can_write_is_refused_and_said_once(kilnd, fresh_bystander, what):
    net, _ = _cold_then_restart(kilnd, seed=7003)
    kilnd.stop()
    before = sorted(str(p) for p in Path(kilnd.cache_dir).rglob("*"))
    _, reason = _spoil_directory(kilnd.cache_dir, what)
    since = Path(kilnd.log_file).stat().st_size
    kilnd.start()

    bystander = fresh_bystander()
    client = RawClient(kilnd.socket)
    try:
        check_net(client, net)  # served, and right: without the cache
        check_net(client, ConvNet(seed=7004))
        s = stats(client)
        assert s.cache_dir == "" and s.constant_bytes_from_cache == 0, s
    finally:
        client.close()
    log = log_text(kilnd)[since:]
    assert log.count(DISABLED) == 1, log
    assert f"{DISABLED}: {reason}; compiling without caching" in log, log
    # Nothing written, nothing removed.
    assert sorted(str(p) for p in Path(kilnd.cache_dir).rglob("*")) == before
    bystander.check()
