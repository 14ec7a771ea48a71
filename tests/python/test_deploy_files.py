"""Lint and dry-parse the deployment files in deploy/ other than the
Dockerfile (test_deploy_dockerfile.py):

- deploy/kubernetes/: each document against the Kubernetes schema (strict:
  unknown or mistyped fields fail), then volumes, kilnd flags, probes and
  the client pod's view of the daemon's host paths.
- deploy/systemd/: `systemd-analyze verify`, kilnd flags, socket paths.
- deploy/kilnd-health (the container health check) against a real daemon.
- deploy/README.md names files and flags that exist.

No cluster is needed.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from testing.daemons import REPO
from testing.kilnd_flags import assert_known_flags, flags_of, kilnd_binary, kilnd_flags

DEPLOY = REPO / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
SYSTEMD = DEPLOY / "systemd"
HEALTH = DEPLOY / "kilnd-health"

# Kubernetes versions the manifests must be valid for: the schema package's
# newest and an older one still in wide use.
KUBERNETES_VERSIONS = ("1.28", "1.37")


# --- the health check -----------------------------------------------------------

def run_health(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(HEALTH), *args], capture_output=True, text=True,
                          timeout=30, env=env)


def test_health_check_passes_on_a_serving_daemon(daemon_up):
    assert shutil.which("curl"), "curl missing (deploy/apt-packages.txt)"
    out = run_health(daemon_up.socket)
    assert out.returncode == 0, out.stderr
    out = run_health(env={**os.environ, "KILN_SOCKET": daemon_up.socket})
    assert out.returncode == 0, out.stderr


def test_health_check_fails_without_a_daemon(tmp_path):
    out = run_health(str(tmp_path / "kilnd.sock"))
    assert out.returncode == 1
    assert "not serving" in out.stderr


def test_health_check_fails_on_a_socket_that_is_not_kilnd(tmp_path):
    import socket
    path = str(tmp_path / "other.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    try:
        out = run_health(path)  # connects, nobody answers: curl's timeout
    finally:
        listener.close()
    assert out.returncode == 1, out


# --- Kubernetes -----------------------------------------------------------------

@lru_cache(maxsize=None)
def manifest(name: str) -> tuple[dict, ...]:
    docs = tuple(d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d)
    assert docs, name
    return docs


def the(kind: str) -> dict:
    found = [d for path in MANIFESTS for d in manifest(path.name) if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s in deploy/kubernetes"
    return found[0]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_the_kubernetes_schema(path, version):
    from kubernetes_validate import utils as kv
    for doc in manifest(path.name):
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            pytest.fail(f"{path.name} ({doc['kind']}) at {where}: {e.message}")


def mounts_and_volumes(pod_spec: dict) -> tuple[list[dict], dict[str, dict]]:
    containers = pod_spec.get("initContainers", []) + pod_spec["containers"]
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    return containers, volumes


def host_path_of(container: dict, volumes: dict[str, dict], path: str) -> str | None:
    """The node's path behind `path` inside the container (hostPath mounts)."""
    best = None
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"].rstrip("/")
        if (path == mount or path.startswith(mount + "/")) and "hostPath" in volumes[m["name"]]:
            if best is None or len(mount) > len(best[0]):
                best = (mount, volumes[m["name"]]["hostPath"]["path"].rstrip("/"))
    return None if best is None else best[1] + path[len(best[0]):]


def test_daemonset_shares_socket_cache_and_shm_and_runs_unprivileged():
    ds = the("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    containers, volumes = mounts_and_volumes(pod)
    for c in containers:
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']} mounts undefined volume {m['name']}"
    (kilnd,) = [c for c in pod["containers"] if c["name"] == "kilnd"]
    assert kilnd["command"] == ["kilnd"]
    flags = assert_known_flags(kilnd["args"], "DaemonSet kilnd args")
    socket_dir = os.path.dirname(flags["--socket"])
    assert host_path_of(kilnd, volumes, socket_dir), f"socket dir {socket_dir} is not a hostPath"
    assert host_path_of(kilnd, volumes, flags["--cache-dir"]), "cache dir is not a hostPath"
    assert host_path_of(kilnd, volumes, "/dev/shm") == "/dev/shm", "/dev/shm not the node's"
    # Unprivileged: a non-root uid, no privilege escalation, no capabilities.
    uid = pod["securityContext"]["runAsUser"]
    assert uid != 0
    sc = kilnd["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert sc.get("readOnlyRootFilesystem") is True
    # The init container hands the socket and cache dirs to that uid, 0700.
    (init,) = pod["initContainers"]
    command = init["command"]
    assert command[:2] == ["install", "-d"] and "0700" in command
    assert command[command.index("-o") + 1] == str(uid)
    for path in (socket_dir, flags["--cache-dir"]):
        assert path in command
        assert host_path_of(init, volumes, path) == host_path_of(kilnd, volumes, path)
    # Both probes are the image's health check on kilnd's socket.
    for probe in ("readinessProbe", "livenessProbe"):
        assert kilnd[probe]["exec"]["command"] == ["kilnd-health", flags["--socket"]], probe


def test_client_pod_reaches_the_daemon_through_the_same_host_paths():
    pod = the("Pod")["spec"]
    ds_pod = the("DaemonSet")["spec"]["template"]["spec"]
    ds_containers, ds_volumes = mounts_and_volumes(ds_pod)
    (kilnd,) = [c for c in ds_containers if c["name"] == "kilnd"]
    flags = flags_of(kilnd["args"])
    _, volumes = mounts_and_volumes(pod)
    (client,) = pod["containers"]
    env = {e["name"]: e["value"] for e in client["env"]}
    assert host_path_of(client, volumes, env["KILN_SOCKET"]) == \
        host_path_of(kilnd, ds_volumes, flags["--socket"])
    assert host_path_of(client, volumes, env["KILN_CACHE_DIR"]) == \
        host_path_of(kilnd, ds_volumes, flags["--cache-dir"])
    assert host_path_of(client, volumes, "/dev/shm") == "/dev/shm"
    assert env["KILN_AUTOSTART"] == "0"
    assert pod["securityContext"]["runAsUser"] == ds_pod["securityContext"]["runAsUser"]


# --- systemd --------------------------------------------------------------------

def unit(path: Path) -> dict[str, dict[str, str]]:
    """Sections of a unit file: {section: {key: value}} (last value wins)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{path.name}: {line!r} outside a section"
        key, _, value = line.partition("=")
        current[key.strip()] = value.strip()
    return sections


def exec_start(service: dict) -> tuple[str, dict[str, str | None]]:
    words = shlex.split(service["Service"]["ExecStart"])
    assert os.path.basename(words[0]) == "kilnd", words
    return words[0], assert_known_flags(words[1:], f"ExecStart {words}")


@pytest.fixture
def verify_env(tmp_path):
    """Units copied to tmp_path with ExecStart's kilnd resolvable: the user
    units' %h is a home holding .local/bin/kilnd; the system unit's path is
    replaced by the built binary."""
    units = tmp_path / "units"
    shutil.copytree(SYSTEMD, units)
    system = units / "kilnd@.service"
    path, _ = exec_start(unit(system))
    system.write_text(system.read_text().replace(path, kilnd_binary()))
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "kilnd").symlink_to(kilnd_binary())
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime),
           "SYSTEMD_LOG_COLOR": "0"}
    return units, env


def systemd_analyze_verify(env: dict[str, str], *args: str) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing (deploy/apt-packages.txt: systemd)"
    out = subprocess.run([analyze, "verify", *args], capture_output=True, text=True,
                         timeout=60, env=env)
    # verify exits 0 on unknown keys and the like but says so: any output fails.
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


def test_user_units_pass_systemd_analyze_verify(verify_env):
    units, env = verify_env
    systemd_analyze_verify(env, "--user", str(units / "kilnd.socket"), str(units / "kilnd.service"))


def test_system_unit_passes_systemd_analyze_verify(verify_env):
    units, env = verify_env
    # An instance of the template (systemd finds kilnd@.service beside it).
    systemd_analyze_verify(env, str(units / "kilnd@kiln.service"))


def test_user_socket_unit_is_the_path_the_service_serves():
    socket_unit = unit(SYSTEMD / "kilnd.socket")
    service = unit(SYSTEMD / "kilnd.service")
    _, flags = exec_start(service)
    assert socket_unit["Socket"]["ListenStream"] == flags["--socket"]
    assert socket_unit["Socket"]["SocketMode"] == "0600"
    assert socket_unit["Socket"]["DirectoryMode"] == "0700"
    assert "kilnd.socket" in service["Unit"]["Requires"]


def test_system_unit_serves_from_its_own_runtime_and_cache_directories():
    service = unit(SYSTEMD / "kilnd@.service")["Service"]
    _, flags = exec_start({"Service": service})
    assert service["User"] == "%i"
    assert os.path.dirname(flags["--socket"]) == "/run/" + service["RuntimeDirectory"]
    assert service["RuntimeDirectoryMode"] == "0700"
    assert flags["--cache-dir"] == "/var/cache/" + service["CacheDirectory"]


# --- deploy/README.md -----------------------------------------------------------

def test_deploy_readme_names_real_files_and_flags():
    text = (DEPLOY / "README.md").read_text()
    for path in set(re.findall(r"\bdeploy/[\w./@-]*[\w@]", text)):
        assert (REPO / path).exists(), f"deploy/README.md names {path}, which does not exist"
    # kilnd command lines (code blocks and inline code), and `docker run`
    # lines of the kiln image (what follows the image name goes to kilnd),
    # use real flags.
    segments = re.findall(r"`([^`\n]+)`", text)
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        segments += block.replace("\\\n", " ").splitlines()
    checked = 0
    for segment in segments:
        words = segment.split()
        if words and (words[0] == "kilnd" or words[0].endswith("/kilnd")):
            args = words[1:]
        elif words[:2] == ["docker", "run"] and "kiln" in words:
            args = words[words.index("kiln") + 1:]
        else:
            continue
        for flag in (w.split("=")[0] for w in args if w.startswith("--")):
            assert flag in kilnd_flags(), \
                f"deploy/README.md: {flag} is not a kilnd flag ({segment})"
            checked += 1
    assert checked, "no kilnd flags found in deploy/README.md's commands"
