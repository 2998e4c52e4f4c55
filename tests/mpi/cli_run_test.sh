#!/usr/bin/env bash
# `fcp run` end to end under mpirun, and its failure modes: every bad input
# must give one clear error on every rank and a non-zero exit, never a hang
# (each run is bounded by `timeout`); a rank that dies must take the job down.
# Usage: cli_run_test.sh FCP WRITE_TEST_PLAN MPIEXEC CASE
#        cli_run_test.sh FCP WRITE_TEST_PLAN MPIEXEC good greedy|ring MASK COALESCE NP
#        cli_run_test.sh FCP WRITE_TEST_PLAN MPIEXEC planner NAME MASK COALESCE NP [PLAN ARGS...]
#          (fcp plan --planner NAME PLAN ARGS...; with --node-relays the plan must relay K/V and dK/dV)
set -u
FCP=$1; WRITE_PLAN=$2; MPIEXEC=$3; CASE=$4
MPIRUN=("$MPIEXEC" --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT

fail() { echo "FAIL ($CASE): $*"; echo "---- output:"; cat "$DIR/log"; exit 1; }
# run NP ARGS...: runs fcp under mpirun with a 60 s bound, output in $DIR/log.
run() {
  local np=$1; shift
  timeout 60 "${MPIRUN[@]}" -np "$np" "$FCP" "$@" >"$DIR/log" 2>&1
  RC=$?
  [ "$RC" -ne 124 ] || fail "hung (killed by timeout)"
}
# expect_error NP MESSAGE ARGS...: non-zero exit and MESSAGE printed by every rank.
expect_error() {
  local np=$1 msg=$2; shift 2
  run "$np" "$@"
  [ "$RC" -ne 0 ] || fail "exit code 0, expected an error"
  local n; n=$(grep -c -- "$msg" "$DIR/log")
  [ "$n" -ge "$np" ] || fail "expected '$msg' from all $np ranks, found $n"
  echo "ok: exit $RC, '$msg' on all $np ranks"
}

"$WRITE_PLAN" greedy 2 causal 1 "$DIR/plan2.json" || fail "write plan"
"$WRITE_PLAN" greedy 3 causal 1 "$DIR/plan3.json" || fail "write plan"
"$FCP" make-inputs --plan "$DIR/plan2.json" --out "$DIR/in" --seed 5 >/dev/null || fail "make-inputs"
ARGS=(--inputs "$DIR/in" --out "$DIR/out" --backward --timeout-s 20)

case "$CASE" in
  good|planner)
    kind=$5; mask=$6; coalesce=$7; np=$8; extra=("${@:9}")
    if [ "$CASE" = planner ]; then
      printf '1\n16\n37\n5\n32\n60\n9\n1\n23\n' >"$DIR/lengths.txt"
      window=(); [ "$mask" = sliding_window ] && window=(--window 20)
      "$FCP" plan --planner "$kind" --lengths "$DIR/lengths.txt" --workers "$np" --block-size 16 \
        --coalesce "$coalesce" --mask "$mask" "${window[@]}" --heads-q 4 --heads-kv 2 --head-dim 8 \
        "${extra[@]}" --out "$DIR/plan.json" >/dev/null || fail "fcp plan"
      if [[ " ${extra[*]} " == *" --node-relays true "* ]]; then  # a K/V sent on by a non-owner, a partial to one
        python3 -c "
import json, sys
p = json.load(open(sys.argv[1])); owner = [b['worker'] for b in p['blocks']]
assert any(s != owner[j] for st in p['forward'] for j, s, d in st['send']), 'no K/V relay'
assert any(d != owner[j] for st in p['backward'] for j, s, d in st['send_dkv']), 'no dK/dV relay'
" "$DIR/plan.json" || fail "plan without relays"
      fi
      if [[ " ${extra[*]} " == *" --spread-stages true "* ]]; then  # stages other than consecutive ones
        consecutive=("${extra[@]}")
        for i in "${!consecutive[@]}"; do
          [ "${consecutive[$i]}" = --spread-stages ] && consecutive[i + 1]=false
        done
        "$FCP" plan --planner "$kind" --lengths "$DIR/lengths.txt" --workers "$np" --block-size 16 \
          --coalesce "$coalesce" --mask "$mask" "${window[@]}" --heads-q 4 --heads-kv 2 --head-dim 8 \
          "${consecutive[@]}" --out "$DIR/consecutive.json" >/dev/null || fail "fcp plan"
        python3 -c "
import json, sys
a, b = (json.load(open(f))['forward'] for f in sys.argv[1:])
assert len(a) == len(b) and a != b, 'spread stages equal the consecutive ones'
" "$DIR/plan.json" "$DIR/consecutive.json" || fail "spread stages not spread"
      fi
      # FCP under a sliding window: row ranges on by default, and these
      # lengths give receivers that attend part of a block (the run then
      # checks that the rows cut are the rows not needed).
      if [ "$kind" = fcp ] && [ "$mask" = sliding_window ] &&
        [[ " ${extra[*]} " != *" --row-ranges false "* ]]; then
        grep -q '"send_rows"' "$DIR/plan.json" && grep -q '"send_kv_rows"' "$DIR/plan.json" &&
          grep -q '"send_dkv_rows"' "$DIR/plan.json" || fail "fcp window plan without row ranges"
      fi
      if [[ " ${extra[*]} " == *" --row-ranges false "* ]] && grep -q '_rows"' "$DIR/plan.json"; then
        fail "plan with row ranges though --row-ranges false"
      fi
      if [ "$kind" = magi ]; then  # its transfers carry the rows attended: some are ranges
        grep -q '"send_rows"' "$DIR/plan.json" && grep -q '"send_dkv_rows"' "$DIR/plan.json" ||
          fail "magi plan without row ranges"
      fi
      if [ "$kind" = magi-dynamic ]; then  # some pairs computed away from their query's owner
        grep -q '"send_q"' "$DIR/plan.json" && grep -q '"send_o"' "$DIR/plan.json" &&
          grep -q '"send_dq"' "$DIR/plan.json" || fail "magi-dynamic plan without remote compute"
      fi
    else
      "$WRITE_PLAN" "$kind" "$np" "$mask" "$coalesce" "$DIR/plan.json" || fail "write plan"
    fi
    "$FCP" make-inputs --plan "$DIR/plan.json" --out "$DIR/in2" --seed 9 >/dev/null || fail "make-inputs"
    run "$np" run --plan "$DIR/plan.json" --inputs "$DIR/in2" --out "$DIR/out2" --backward --check --trace "$DIR/trace.json"
    [ "$RC" -eq 0 ] || fail "run failed"
    grep -q "matched the reference" "$DIR/log" || fail "no match line"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert {e['pid'] for e in d['traceEvents']} == set(range($np))" "$DIR/trace.json" \
      || fail "trace is not valid JSON with one process per rank"
    cat "$DIR/log";;
  wrong_rank_count)
    expect_error 2 "is for 3 workers but mpirun started 2 ranks" run --plan "$DIR/plan3.json" "${ARGS[@]}";;
  missing_file)
    rm "$DIR/in/do.npy"
    expect_error 2 "do.npy: cannot open" run --plan "$DIR/plan2.json" "${ARGS[@]}";;
  malformed_npy)
    echo "not numpy at all" >"$DIR/in/k.npy"
    expect_error 2 "bad magic" run --plan "$DIR/plan2.json" "${ARGS[@]}";;
  wrong_shape)
    cp "$DIR/in/q.npy" "$DIR/in/v.npy"  # 4 query heads where 2 key/value heads belong
    expect_error 2 "does not match the plan" run --plan "$DIR/plan2.json" "${ARGS[@]}";;
  malformed_plan)
    echo '{"format": "fcp-plan", "version": 1, "workers": ' >"$DIR/bad.json"
    expect_error 2 "bad.json" run --plan "$DIR/bad.json" "${ARGS[@]}";;
  plan_mismatch)
    "$WRITE_PLAN" ring 2 causal 1 "$DIR/ring2.json" || fail "write plan"
    timeout 60 "${MPIRUN[@]}" -np 1 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" : \
      -np 1 "$FCP" run --plan "$DIR/ring2.json" "${ARGS[@]}" >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -ne 124 ] || fail "hung"
    [ "$RC" -ne 0 ] || fail "exit code 0"
    [ "$(grep -c 'ranks disagree on the plan' "$DIR/log")" -ge 2 ] || fail "no disagreement error on both ranks"
    echo "ok: plan mismatch detected on both ranks, exit $RC";;
  check_detects_mismatch)
    run 2 run --plan "$DIR/plan2.json" "${ARGS[@]}" --check
    [ "$RC" -eq 0 ] || fail "run failed"
    cp "$DIR/in/q.npy" "$DIR/out/o.npy"  # same shape, wrong values
    "$FCP" check --plan "$DIR/plan2.json" --inputs "$DIR/in" --outputs "$DIR/out" >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -eq 1 ] || fail "fcp check exit $RC on a corrupted o.npy, expected 1"
    grep -q MISMATCH "$DIR/log" || fail "no MISMATCH line"
    echo "ok: corrupted output detected";;
  rank_dies)
    start=$(date +%s)
    run 2 run --plan "$DIR/plan2.json" "${ARGS[@]}" --debug-exit-rank 1 --debug-exit-stage 1
    [ "$RC" -ne 0 ] || fail "exit code 0 after a rank died"
    echo "ok: job exited $RC $(( $(date +%s) - start )) s after start with rank 1 dead";;
  in_process)
    # All workers as threads of one process, no mpirun.
    timeout 60 "$FCP" run --plan "$DIR/plan3.json" --inputs "$DIR/in" --out "$DIR/out" --backward --in-process \
      --check >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -eq 0 ] || fail "in-process run exit $RC"
    grep -q "3 ranks (in-process) on cpu" "$DIR/log" || fail "no in-process summary line"
    grep -q "matched the reference" "$DIR/log" || fail "no match line"
    echo "ok: in-process run matched the reference";;
  device_cuda)
    # With a GPU: the in-process run matches within bf16 tolerance. Without
    # one (or without CUDA in the build): exit 1 with one clear line.
    timeout 120 "$FCP" run --plan "$DIR/plan3.json" --inputs "$DIR/in" --out "$DIR/out" --backward --in-process \
      --device cuda --check --tolerance 2e-2 >"$DIR/log" 2>&1
    RC=$?
    if [ "$RC" -eq 0 ]; then
      grep -q "matched the reference" "$DIR/log" || fail "no match line"
      echo "ok: --device cuda matched the reference"
    else
      [ "$RC" -eq 1 ] || fail "exit $RC, expected 1"
      grep -Eq "^fcp: run: --device cuda: (no CUDA device|this fcp was built without CUDA)" "$DIR/log" \
        || fail "no clear no-device error"
      [ "$(wc -l <"$DIR/log")" -eq 1 ] || fail "more than one line of output"
      echo "ok: exit 1: $(cat "$DIR/log")"
    fi;;
  zero_gradients)
    # Every query sees one key: dQ and dK are exactly zero in the reference,
    # so the check must not divide the runtime's float noise by zero.
    printf '1\n1\n1\n1\n' >"$DIR/ones.txt"
    "$FCP" plan --lengths "$DIR/ones.txt" --workers 2 --heads-q 1 --heads-kv 1 --head-dim 4 \
      --out "$DIR/ones.json" >/dev/null || fail "fcp plan"
    "$FCP" make-inputs --plan "$DIR/ones.json" --out "$DIR/in1" --seed 1 >/dev/null || fail "make-inputs"
    timeout 60 "$FCP" run --plan "$DIR/ones.json" --inputs "$DIR/in1" --out "$DIR/out1" --backward \
      --in-process --check >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -eq 0 ] || fail "run --check exit $RC on zero gradients"
    grep -q "matched the reference" "$DIR/log" || fail "no match line"
    echo "ok: zero gradients matched the reference";;
  bad_flags)
    # Refused before any rank starts: one line, exit 2 (usage) or 1.
    for flags in "--tolerance nan" "--tolerance -1" "--tolerance inf" "--q-tile 0" "--kv-tile -1"; do
      # shellcheck disable=SC2086
      timeout 60 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" --in-process --check $flags >"$DIR/log" 2>&1
      RC=$?
      [ "$RC" -eq 2 ] || fail "run $flags: exit $RC, expected 2"
      [ "$(wc -l <"$DIR/log")" -eq 1 ] || fail "run $flags: more than one line"
    done
    touch "$DIR/a_file"
    "$FCP" make-inputs --plan "$DIR/plan2.json" --out "$DIR/a_file" >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -eq 1 ] || fail "make-inputs onto a file: exit $RC, expected 1"
    grep -q "^fcp: make-inputs: cannot create the output directory" "$DIR/log" || fail "no clear error"
    echo "ok: bad flags refused up front";;
  # ---- issue 19: hostile and careless inputs ----
  deep_plan)
    # 100000 nested arrays in a typed field: one error on every rank, no segfault.
    python3 -c "import sys; r=open(sys.argv[1]).read(); D=100000; open(sys.argv[2],'w').write(r.replace('\"workers\": 2,', '\"workers\": '+'['*D+']'*D+',', 1))" \
      "$DIR/plan2.json" "$DIR/deep.json"
    grep -q '\[\[\[' "$DIR/deep.json" || fail "deep plan not made"
    expect_error 2 "nest deeper than 64 levels" run --plan "$DIR/deep.json" "${ARGS[@]}"
    [ "$RC" -lt 128 ] || fail "killed by a signal ($RC)";;
  input_data_differs)
    # Same shapes, other contents on rank 1: refused on both ranks before any compute.
    "$FCP" make-inputs --plan "$DIR/plan2.json" --out "$DIR/other" --seed 6 >/dev/null || fail "make-inputs"
    timeout 60 "${MPIRUN[@]}" -np 1 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" : \
      -np 1 "$FCP" run --plan "$DIR/plan2.json" --inputs "$DIR/other" --out "$DIR/out" --backward --timeout-s 20 \
      >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -ne 124 ] || fail "hung"
    [ "$RC" -ne 0 ] || fail "exit code 0 with different inputs on one rank"
    [ "$(grep -c 'ranks disagree on the input data' "$DIR/log")" -ge 2 ] || fail "no input-data error on both ranks"
    [ ! -e "$DIR/out/o.npy" ] || fail "an output was left"
    echo "ok: different input data detected on both ranks, exit $RC";;
  full_disk)
    # Outputs to a 3 MB tmpfs that cannot hold them: exit 1 naming ENOSPC and
    # no output file left (they are written as hidden partials, renamed at the end).
    mkdir -p "$DIR/small"
    if ! mount -t tmpfs -o size=3m tmpfs "$DIR/small" 2>/dev/null; then
      echo "skipped: cannot mount a tmpfs here (needs root)"; exit 77
    fi
    trap 'umount "$DIR/small"; rm -rf "$DIR"' EXIT
    printf '3000\n2000\n1000\n' >"$DIR/big.txt"
    "$FCP" plan --lengths "$DIR/big.txt" --workers 2 --block-size 256 --heads-q 8 --heads-kv 8 --head-dim 32 \
      --out "$DIR/big.json" >/dev/null || fail "fcp plan"
    "$FCP" make-inputs --plan "$DIR/big.json" --out "$DIR/inbig" >/dev/null || fail "make-inputs"
    expect_error 2 "No space left on device" run --plan "$DIR/big.json" --inputs "$DIR/inbig" --out "$DIR/small/out" \
      --backward --timeout-s 20
    left=$(find "$DIR/small" -type f | wc -l)
    [ "$left" -eq 0 ] || fail "$left files left on the full disk: $(find "$DIR/small" -type f)"
    echo "ok: nothing left on the full disk";;
  stale_outputs)
    # A forward-only run into the folder of a backward run: no stale dq/dk/dv,
    # and `fcp check` of the new outputs passes.
    timeout 60 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" --in-process >"$DIR/log" 2>&1 || fail "backward run"
    [ -e "$DIR/out/dq.npy" ] || fail "no dq.npy after the backward run"
    timeout 60 "$FCP" run --plan "$DIR/plan2.json" --inputs "$DIR/in" --out "$DIR/out" --in-process --check \
      >"$DIR/log" 2>&1 || fail "forward run"
    for f in dq dk dv; do [ ! -e "$DIR/out/$f.npy" ] || fail "stale $f.npy kept"; done
    "$FCP" check --plan "$DIR/plan2.json" --inputs "$DIR/in" --outputs "$DIR/out" >"$DIR/log" 2>&1 \
      || fail "fcp check of the forward outputs failed"
    echo "ok: stale gradients removed";;
  thread_limit)
    if ldd "$FCP" | grep -q libasan; then
      echo "skipped: AddressSanitizer reserves more address space than the limit"; exit 77
    fi
    # More in-process workers than threads can be made under a 1 GB address
    # space: one error line, exit 1, no std::terminate.
    printf '1\n%.0s' $(seq 1 2000) >"$DIR/many.txt"
    "$FCP" plan --lengths "$DIR/many.txt" --workers 2000 --block-size 1 --heads-q 1 --heads-kv 1 --head-dim 1 \
      --out "$DIR/many.json" >/dev/null || fail "fcp plan"
    "$FCP" make-inputs --plan "$DIR/many.json" --out "$DIR/inmany" >/dev/null || fail "make-inputs"
    (ulimit -v 1500000; timeout 60 "$FCP" run --plan "$DIR/many.json" --inputs "$DIR/inmany" --out "$DIR/outmany" \
      --in-process --timeout-s 20 >"$DIR/log" 2>&1)
    RC=$?
    [ "$RC" -eq 1 ] || fail "exit $RC, expected 1"
    [ "$(wc -l <"$DIR/log")" -eq 1 ] || fail "not one line"
    grep -Eq "^fcp: (run --in-process: cannot create worker thread|.*out of memory)" "$DIR/log" || fail "no clear error"
    echo "ok: $(cat "$DIR/log")";;
  huge_tiles)
    # Bounded (exit 2 above 65536) and cut to the block size below that.
    timeout 60 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" --in-process --q-tile 2147483647 \
      --kv-tile 2147483647 >"$DIR/log" 2>&1
    RC=$?
    [ "$RC" -eq 2 ] || fail "exit $RC for 2^31-1 tiles, expected 2"
    timeout 60 "$FCP" run --plan "$DIR/plan2.json" "${ARGS[@]}" --in-process --q-tile 65536 --kv-tile 65536 \
      --check >"$DIR/log" 2>&1 || fail "65536-row tiles did not run"
    grep -q "matched the reference" "$DIR/log" || fail "no match line"
    echo "ok: tiles bounded and cut to the block size";;
  *) echo "unknown case $CASE"; exit 2;;
esac
