#!/usr/bin/env python3
"""Fails the build when a runtime file includes a header of a layer it may
not use.

runtime/CMakeLists.txt declares the layers (which files each holds, which
layers each depends on) and writes them to a manifest; every layer's
library depends on this check, so an upward include, a dependency cycle or
a file that belongs to no layer stops the build before anything compiles.
A layer may include its own headers and those of the layers it depends on,
directly or through them.

Usage: check_layers.py MANIFEST SOURCE_ROOT STAMP
The manifest has one line per layer, "layer NAME DEP...", and one per
file, "file NAME PATH" (PATH relative to SOURCE_ROOT, e.g. runtime/ir/graph.h).
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*["<](runtime/[^">]+)[">]')
SUFFIXES = (".h", ".cc", ".def")


def read_manifest(path):
    deps, owner = {}, {}
    problems = []
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "layer":
                deps[words[1]] = words[2:]
            elif words[0] == "file":
                if words[2] in owner:
                    problems.append(f"{words[2]}: in layers '{owner[words[2]]}' and '{words[1]}'")
                owner[words[2]] = words[1]
    return deps, owner, problems


def find_cycle(deps):
    state = {}  # layer -> "visiting" or "done"

    def visit(layer, path):
        state[layer] = "visiting"
        for dep in deps.get(layer, []):
            if state.get(dep) == "visiting":
                return path + [layer, dep]
            if dep not in state:
                cycle = visit(dep, path + [layer])
                if cycle:
                    return cycle
        state[layer] = "done"
        return None

    for layer in sorted(deps):
        if layer not in state:
            cycle = visit(layer, [])
            if cycle:
                return cycle[cycle.index(cycle[-1]):]
    return None


def closure(deps, layer):
    seen, todo = set(), [layer]
    while todo:
        for dep in deps.get(todo.pop(), []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def main(manifest, root, stamp):
    deps, owner, problems = read_manifest(manifest)
    for layer, ds in deps.items():
        for dep in ds:
            if dep not in deps:
                problems.append(f"layer '{layer}' depends on undeclared layer '{dep}'")
    cycle = find_cycle(deps)
    if cycle:
        problems.append("layer dependencies form a cycle: " + " -> ".join(cycle))

    for dirpath, _, names in os.walk(os.path.join(root, "runtime")):
        for name in sorted(names):
            if not name.endswith(SUFFIXES):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), root)
            if path not in owner:
                problems.append(f"{path}: belongs to no layer (declare it in runtime/CMakeLists.txt)")

    allowed = {layer: closure(deps, layer) | {layer} for layer in deps}
    for path, layer in sorted(owner.items()):
        with open(os.path.join(root, path)) as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                header = m.group(1)
                target = owner.get(header)
                if target is None:
                    problems.append(f"{path}:{number}: includes {header}, which belongs to no layer")
                elif target not in allowed[layer]:
                    problems.append(
                        f"{path}:{number}: includes {header}: layer '{layer}' may not "
                        f"include layer '{target}' (it may use: "
                        f"{', '.join(sorted(allowed[layer]))})")

    if problems:
        # No stamp from an earlier pass may let a later build skip the check.
        if os.path.exists(stamp):
            os.remove(stamp)
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        print("runtime layering check failed (runtime/CMakeLists.txt declares the layers)",
              file=sys.stderr)
        return 1
    with open(stamp, "w") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
