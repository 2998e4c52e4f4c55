#!/usr/bin/env python3
"""Fails when a lower layer of fcp includes a header of a higher one.

Usage: scripts/check_layers.py [--root DIR] [--links FILE]
  --root   the tree to check (default: the repository)
  --links  also check the CMake link lines: FILE has one line a layer,
           "<layer>:<its LINK_LIBRARIES, ';'-separated>" (tests/CMakeLists.txt
           writes it at configure time); a layer may link only layers below it

Every source and header under src/ and every public header under
include/fcp/ belongs to one layer (LAYER_OF_FOLDER, PUBLIC_HEADERS below);
a file may include headers of its own layer and of the layers its layer
sits on (BELOW), nothing else. The table is the same as the CMake link
table (CMakeLists.txt, docs/architecture.md): keep them together.
An include of a header this table does not know ("fcp/new_thing.h") is an
error too, so a new header is placed in a layer when it is added.
Exit 0 and one summary line when every include is allowed; exit 1 and one
line per offending include (file:line, the header, both layers) otherwise;
exit 2 on a usage error.
"""
import os
import re
import sys

# Each layer and the layers it may use (transitively closed on purpose: the
# table is read as it is written, no inference).
BELOW = {
    "plan": set(),
    "io": {"plan"},
    "model": {"io", "plan"},
    "baselines": {"model", "io", "plan"},
    "registry": {"baselines", "model", "io", "plan"},
    "kernels": {"plan"},
    "lowering": {"kernels", "plan"},
    "runtime": {"lowering", "kernels", "io", "plan"},
}

# Folders under src/, longest prefix first.
LAYER_OF_FOLDER = [
    ("src/runtime/kernels", "kernels"),
    ("src/runtime", "runtime"),
    ("src/plan", "plan"),
    ("src/io", "io"),
    ("src/model", "model"),
    ("src/baselines", "baselines"),
    ("src/registry", "registry"),
    ("src/lowering", "lowering"),
]

# include/fcp/<name>.h -> layer.
PUBLIC_HEADERS = {
    "error": "plan", "mask": "plan", "plan": "plan", "workload": "plan",
    "plan_metrics": "plan", "reshuffle_floor": "plan", "token_permutation": "plan",
    "planner": "plan", "planner_options": "plan", "plan_limits": "plan",
    "step_estimate": "plan",
    "file_io": "io", "npy": "io", "chrome_trace": "io", "plan_json": "io",
    "lengths_file": "io",
    "cost_model": "model", "lower_bounds": "model", "simulator": "model",
    "baselines": "baselines",
    "planner_registry": "registry", "fcp_tuning": "registry",
    "attention_kernel": "kernels", "reference_attention": "kernels", "bfloat16": "kernels",
    "lowering": "lowering",
    "communicator": "runtime", "executor": "runtime", "trace": "io",
    "cuda_attention": "runtime",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def layer_of_path(rel):
    """The layer a file (path relative to the root) belongs to, or None."""
    rel = rel.replace(os.sep, "/")
    m = re.fullmatch(r"include/fcp/([A-Za-z0-9_]+)\.h", rel)
    if m:
        return PUBLIC_HEADERS.get(m.group(1), "?")
    for folder, layer in LAYER_OF_FOLDER:
        if rel == folder or rel.startswith(folder + "/"):
            return layer
    return None


def resolve(root, includer_rel, target):
    """The layer of `#include "target"` seen from includer_rel, or an error string."""
    here = os.path.dirname(includer_rel)
    if os.path.isfile(os.path.join(root, here, target)):  # next to the includer
        return layer_of_path(os.path.normpath(os.path.join(here, target)))
    m = re.fullmatch(r"fcp/([A-Za-z0-9_]+)\.h", target)
    if m:
        name = m.group(1)
        if name in PUBLIC_HEADERS:
            return PUBLIC_HEADERS[name]
        if os.path.isfile(os.path.join(root, "src/plan/internal", target)):
            return "plan"  # the planner's internal headers (src/plan/internal/fcp)
        return "unknown header (add it to PUBLIC_HEADERS in scripts/check_layers.py)"
    if os.path.isfile(os.path.join(root, "src", target)):  # "io/json_text.h"
        return layer_of_path("src/" + target)
    return None  # not fcp's (a system or third-party header in quotes)


def check_links(path):
    """Offending link lines of the layer targets listed in `path`."""
    bad, layers = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            layer, _, libs = line.strip().partition(":")
            if not layer:
                continue
            if layer not in BELOW:
                bad.append(f"{path}: unknown layer '{layer}'")
                continue
            layers += 1
            for used in re.findall(r"\bfcp_([a-z]+)\b", libs):
                if used in BELOW and used != layer and used not in BELOW[layer]:
                    bad.append(f"target fcp_{layer} links fcp_{used}, which is not below it")
    if layers == 0:
        bad.append(f"{path}: no layer targets listed")
    return bad


def main(argv):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    links = None
    args = argv[1:]
    while args:
        if args[0] in ("--root", "--links") and len(args) >= 2:
            if args[0] == "--root":
                root = args[1]
            else:
                links = args[1]
            args = args[2:]
        else:
            print("check_layers.py: usage: check_layers.py [--root DIR] [--links FILE]",
                  file=sys.stderr)
            return 2
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, "src")):
        print(f"check_layers.py: no src/ under '{root}'", file=sys.stderr)
        return 2
    files = []
    for top in ("src", "include/fcp"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(dirpath, n), root)
                      for n in names if n.endswith(SOURCE_SUFFIXES)]
    bad, checked = [], 0
    for rel in sorted(files):
        layer = layer_of_path(rel)
        if layer is None:
            bad.append(f"{rel}: in no layer (add its folder to LAYER_OF_FOLDER)")
            continue
        if layer == "?":
            bad.append(f"{rel}: a public header in no layer (add it to PUBLIC_HEADERS)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                if target is None:
                    continue
                checked += 1
                if target not in BELOW:
                    bad.append(f'{rel}:{number}: "{m.group(1)}": {target}')
                elif target != layer and target not in BELOW[layer]:
                    bad.append(f'{rel}:{number}: layer {layer} includes "{m.group(1)}" of layer '
                               f"{target}, which is not below it")
    if links is not None:
        bad += check_links(links)
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers.py: {len(bad)} include or link line(s) against the layer table", file=sys.stderr)
        return 1
    print(f"check_layers.py: {checked} includes in {len(files)} files follow the layer table")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
