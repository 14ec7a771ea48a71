"""Lint and dry-parse deploy/Dockerfile: hadolint (syntax, instructions,
COPY --from aliases, shell practice), then what hadolint cannot know:
stages, COPY sources in the build context (.dockerignore), the runtime
stage slim and unprivileged, every library kilnd links installed or copied
there, pip packages pinned, the build stage installing what
deploy/apt-packages.txt lists.

No Docker engine is needed; building the image is not tested.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from testing.daemons import REPO
from testing.kilnd_flags import kilnd_binary

DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"

# Packages debian:12-slim already has (Priority: required, or what apt needs).
SLIM_BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


# --- Dockerfile ---------------------------------------------------------------

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
                "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK",
                "SHELL"}


@dataclass
class Instruction:
    line: int
    keyword: str
    flags: dict[str, str]
    args: str

    def words(self) -> list[str]:
        """Arguments of the exec (JSON) form, else split like a shell."""
        if self.args.startswith("["):
            return json.loads(self.args)
        return shlex.split(self.args)


@dataclass
class Stage:
    name: str
    base: str
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments dropped,
    leading --flags of an instruction split off."""
    logical: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments and blank lines end nothing, even inside a continuation
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        logical.append((start, " ".join(pending)))
        pending = []
    assert not pending, "Dockerfile ends inside a continuation"

    stages: list[Stage] = []
    for number, line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        assert keyword in INSTRUCTIONS, f"Dockerfile:{number}: unknown instruction {keyword}"
        flags: dict[str, str] = {}
        rest = rest.strip()
        while rest.startswith("--"):
            word, _, rest = rest.partition(" ")
            name, _, value = word[2:].partition("=")
            flags[name] = value
            rest = rest.strip()
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, f"Dockerfile:{number}: FROM {rest!r}"
            stages.append(Stage(name=m.group(2) or "", base=m.group(1), line=number))
            continue
        assert stages or keyword == "ARG", f"Dockerfile:{number}: {keyword} before FROM"
        if stages:
            stages[-1].instructions.append(Instruction(number, keyword, flags, rest))
    return stages


@lru_cache(maxsize=1)
def dockerfile() -> tuple[Stage, ...]:
    return tuple(parse_dockerfile(DOCKERFILE.read_text()))


def stage(name: str) -> Stage:
    found = [s for s in dockerfile() if s.name == name]
    assert found, f"Dockerfile has no stage {name!r}"
    return found[0]


def stage_chain(s: Stage) -> list[Stage]:
    """s and the stages it is built FROM, down to the one on an image."""
    names = {x.name: x for x in dockerfile()}
    chain = [s]
    while chain[-1].base in names:
        chain.append(names[chain[-1].base])
    return chain


def apt_installed(s: Stage) -> set[str]:
    """Packages the stage's RUN instructions install with apt-get."""
    packages: set[str] = set()
    for run in s.all("RUN"):
        for command in re.split(r"&&|;|\|", run.args):
            words = command.split()
            if "apt-get" in words and "install" in words:
                tail = words[words.index("install") + 1:]
                packages |= {w for w in tail if not w.startswith("-")}
    return packages


def copy_sources(copy: Instruction) -> tuple[list[str], str]:
    words = copy.words()
    return words[:-1], words[-1]


# .dockerignore, as the Docker builder reads it (moby/patternmatcher): the
# last pattern matching a path or one of its parent directories decides;
# '!' lets a path back in.

def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out += "(?:.*/)?"  # zero or more whole directories
                i += 1
            else:
                out += ".*"
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out + r"\Z")


@lru_cache(maxsize=1)
def dockerignore() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        patterns.append((exclusion, _pattern_regex(pattern)))
    return tuple(patterns)


def in_build_context(path: str) -> bool:
    parts = Path(path).parts
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for exclusion, regex in dockerignore():
        if exclusion != excluded:
            continue  # an inclusion of an excluded path or vice versa changes nothing
        if any(regex.match(c) for c in candidates):
            excluded = not exclusion
    return not excluded


@lru_cache(maxsize=1)
def tracked_files() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return tuple(p for p in out.stdout.decode().split("\0") if p)


def test_dockerfile_passes_hadolint(tmp_path):
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint not installed: deploy/setup.sh (deploy/requirements.txt)"
    config = tmp_path / "hadolint.yaml"  # so no config of the machine's applies
    config.write_text("failure-threshold: style\n")
    out = subprocess.run([str(hadolint), "--no-color", "--config", str(config),
                          str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


def test_dockerfile_stages_are_named_and_copy_from_earlier_ones():
    stages = dockerfile()
    names = [s.name for s in stages]
    assert all(names), f"every FROM needs AS <name>: {names}"
    assert len(set(names)) == len(names), names
    assert names[0] == "build" and names[-1] == "runtime", \
        "build first; the daemon image (runtime) last, so it is the default target"
    for index, s in enumerate(stages):
        earlier = set(names[:index])
        if s.base in names:
            assert s.base in earlier, f"stage {s.name} is FROM a later stage {s.base}"
        for copy in s.all("COPY"):
            source = copy.flags.get("from")
            if source is not None:
                assert source in earlier, \
                    f"Dockerfile:{copy.line}: --from={source} is not an earlier stage"
        assert not s.all("ADD"), "COPY, not ADD"


def test_dockerfile_copy_sources_are_in_the_build_context():
    assert (REPO / ".dockerignore").exists(), ".dockerignore missing: the context would hold .venv"
    for heavy in (".venv/bin/python", "build/server/kilnd", ".git/HEAD", "bench/README.md",
                  "client/kiln/__pycache__/x.pyc"):
        assert not in_build_context(heavy), f"{heavy} is in the build context"
    copied = 0
    for s in dockerfile():
        for copy in s.all("COPY"):
            if "from" in copy.flags:
                continue
            sources, _ = copy_sources(copy)
            for source in sources:
                path = os.path.normpath(source)
                where = f"Dockerfile:{copy.line}: COPY {source}"
                assert (REPO / path).exists(), f"{where}: no such path"
                assert in_build_context(path), f"{where}: excluded by .dockerignore"
                if (REPO / path).is_dir():
                    # Everything committed under a copied directory goes in.
                    under = [f for f in tracked_files() if f.startswith(path + "/")]
                    assert under, f"COPY {source}: nothing tracked under it"
                    left_out = [f for f in under if not in_build_context(f)]
                    assert not left_out, f"COPY {source}: .dockerignore drops {left_out[:5]}"
                copied += 1
    assert copied >= 5


def test_dockerfile_copy_from_sources_are_made_in_that_stage():
    for s in dockerfile():
        for copy in s.all("COPY"):
            if "from" not in copy.flags:
                continue
            producer = stage(copy.flags["from"])
            made = " ".join(i.args for i in producer.instructions if i.keyword in ("RUN", "COPY"))
            for source in copy_sources(copy)[0]:
                root = source.rstrip("/")
                assert root and root in made, \
                    f"Dockerfile:{copy.line}: nothing in stage {producer.name} writes {source}"


def test_dockerfile_run_commands_name_files_that_exist():
    """Repository paths a RUN names exist and are in the context; paths under
    /tmp are what an earlier COPY of the stage put there."""
    top_level = {p.name for p in REPO.iterdir()}
    for s in dockerfile():
        copied_to = [copy_sources(c)[1].rstrip("/") for x in reversed(stage_chain(s))
                     for c in x.all("COPY")]
        for run in s.all("RUN"):
            for word in shlex.split(run.args):
                if "/" in word and word.split("/")[0] in top_level:
                    assert (REPO / word).exists(), f"Dockerfile:{run.line}: {word} does not exist"
                    assert in_build_context(word), \
                        f"Dockerfile:{run.line}: {word} not in the build context"
                if word.startswith("/tmp/"):
                    assert any(word == d or word.startswith(d + "/") for d in copied_to), \
                        f"Dockerfile:{run.line}: {word}: nothing copied there"


def test_dockerfile_pip_installs_are_pinned():
    """Every package a RUN pip-installs is pinned in deploy/requirements.txt
    and installed with it as constraints (-c), or is the repo's own (--no-deps)."""
    pins = requirement_pins()
    installs = 0
    for s in dockerfile():
        for run in s.all("RUN"):
            for command in run.args.split("&&"):
                words = command.split()
                if not words or not words[0].endswith("pip") or "install" not in words:
                    continue
                installs += 1
                if "--no-deps" in words:
                    continue
                assert "-c" in words, \
                    f"Dockerfile:{run.line}: pip install without -c requirements.txt"
                constraints = words[words.index("-c") + 1]
                named = [w for w in words[words.index("install") + 1:]
                         if not w.startswith("-") and w != constraints]
                unpinned = [n for n in named if normalize(n) not in pins]
                assert named and not unpinned, \
                    f"Dockerfile:{run.line}: not pinned in deploy/requirements.txt: {unpinned}"
    assert installs >= 2


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=1)
def requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line} is not pinned"
            pins[normalize(name)] = version
    return pins


def test_runtime_stage_is_slim_unprivileged_and_runs_kilnd():
    runtime = stage("runtime")
    chain = stage_chain(runtime)
    base = chain[-1].base
    assert base.startswith("debian:12") and base.endswith("-slim"), base
    build_tools = re.compile(r"^(build-essential|gcc.*|g\+\+.*|clang.*|cmake|ninja-build|make|"
                             r".*-dev|python3.*|pip)$")
    for s in chain:
        heavy = sorted(p for p in apt_installed(s) if build_tools.match(p))
        assert not heavy, f"stage {s.name} installs build tools: {heavy}"
    users = [i.args for s in reversed(chain) for i in s.all("USER")]
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"runs as {users}"
    assert [i.words() for i in runtime.all("ENTRYPOINT")] == [["kilnd"]]
    env = {}
    for s in reversed(chain):
        for i in s.all("ENV"):
            env.update(dict(re.findall(r"(\w+)=(\S+)", i.args)))
    volumes = set(json.loads(runtime.all("VOLUME")[-1].args))
    assert os.path.dirname(env["KILN_SOCKET"]) in volumes, (env, volumes)
    assert env["KILN_CACHE_DIR"] in volumes, (env, volumes)
    (health,) = runtime.all("HEALTHCHECK")
    assert "kilnd-health" in health.args
    copied = [copy_sources(c) for s in chain for c in s.all("COPY")]
    assert (["deploy/kilnd-health"], "/opt/kiln/bin/kilnd-health") in copied
    # The client image does not run as root either.
    client_users = [i.args for s in reversed(stage_chain(stage("client"))) for i in s.all("USER")]
    assert client_users and client_users[-1].split(":")[0] not in ("root", "0"), client_users


def test_runtime_stage_has_every_library_kilnd_links():
    """ldd of the kilnd built here (Debian 12 too): each library outside the
    venv comes from a Debian package the runtime stage installs (or the slim
    base has); the venv's are copied by the build stage's ldd, so they must
    all come from the directory it copies (the RPATH, the venv's lib/)."""
    out = subprocess.run(["ldd", kilnd_binary()], capture_output=True, text=True, check=True).stdout
    assert "not found" not in out, out
    runtime_packages = set().union(*(apt_installed(s) for s in stage_chain(stage("runtime"))))
    venv_libs = 0
    missing = {}
    for path in re.findall(r"=> (/\S+)", out):
        for name in (os.path.realpath(path), path):
            owner = subprocess.run(["dpkg", "-S", name], capture_output=True, text=True)
            if owner.returncode == 0:
                break
        if owner.returncode == 0:
            package = owner.stdout.split(":")[0]
            if package not in runtime_packages | SLIM_BASE_PACKAGES:
                missing[os.path.basename(path)] = package
        else:
            lib_dir = Path(path).parent
            assert lib_dir.name == "lib" and (lib_dir.parent / "pyvenv.cfg").exists(), \
                f"{path}: neither a Debian package's nor the venv's; the image would lack it"
            venv_libs += 1
    assert not missing, f"runtime stage lacks the packages of {missing}"
    assert venv_libs >= 3, "expected oneDNN, oneTBB and the Intel runtime from the venv"


# deploy/apt-packages.txt entries the image build does without: the test and
# benchmark libraries (tests and benchmarks are off there), Python's headers
# (the client's C++ helper is off there too) and the tools these tests use.
NOT_FOR_THE_IMAGE = {"libgtest-dev", "libbenchmark-dev", "python3-dev", "curl", "systemd",
                     "redis-server", "openssl"}


def test_build_stage_installs_the_projects_build_dependencies():
    """The build stage's Debian packages are deploy/apt-packages.txt's, less
    the test-only ones: a build dependency added there must be added here."""
    listed = {line.strip() for line in (DEPLOY / "apt-packages.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    installed = apt_installed(stage("build"))
    extra = installed - listed - {"python3", "python3-venv"}
    assert not extra, f"build stage installs what deploy/apt-packages.txt lacks: {extra}"
    missing = listed - installed - NOT_FOR_THE_IMAGE
    assert not missing, f"build stage lacks deploy/apt-packages.txt's {missing}"
