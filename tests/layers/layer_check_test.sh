#!/usr/bin/env bash
# scripts/check_layers.py from CTest: the tree passes, and a copy of it with
# one deliberately upward include (or an unknown header, or an upward link
# line) fails,
# naming the file, the line, the header and both layers.
# Usage: layer_check_test.sh SOURCE_DIR tree|rejects_upward|rejects_unknown|rejects_upward_link
set -euo pipefail
src=$1 case=$2
check=(python3 "$src/scripts/check_layers.py")
copy() {  # a copy of the tree's src/ and include/ in $tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r "$src/src" "$src/include" "$tmp/"
}
expect_failure() {  # $1: the line the checker must print
  local out rc=0
  out=$("${check[@]}" --root "$tmp" 2>&1) || rc=$?
  if [[ $rc != 1 ]]; then echo "expected exit 1, got $rc: $out"; exit 1; fi
  if ! grep -qF -- "$1" <<<"$out"; then echo "expected '$1' in: $out"; exit 1; fi
}
case "$case" in
  tree) "${check[@]}" --root "$src" ;;  # (CTest runs the tree check directly, with --links)
  rejects_upward)
    copy
    # The planning layer reaching for the simulator: the dependency this check exists to stop.
    echo '#include "fcp/simulator.h"' >>"$tmp/src/plan/mask.cpp"
    line=$(wc -l <"$tmp/src/plan/mask.cpp")
    expect_failure "src/plan/mask.cpp:$line: layer plan includes \"fcp/simulator.h\" of layer model, which is not below it"
    ;;
  rejects_unknown)
    copy
    echo '#pragma once' >"$tmp/include/fcp/new_thing.h"
    expect_failure "include/fcp/new_thing.h: a public header in no layer"
    ;;
  rejects_upward_link)
    copy
    printf 'plan:fmt::fmt;fcp_model\nmodel:fcp_io;fcp_plan\n' >"$tmp/links.txt"
    check+=(--links "$tmp/links.txt")
    expect_failure "target fcp_plan links fcp_model, which is not below it"
    ;;
  *) echo "layer_check_test.sh: unknown case '$case'" >&2; exit 2 ;;
esac
