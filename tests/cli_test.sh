#!/usr/bin/env bash
# End-to-end test of the `fcp` command: happy paths of workload, plan,
# validate and inspect, and every kind of bad input giving exactly one line
# on stderr and exit code 2 (usage) or 1 (other), never a crash (>= 128) or a
# hang (timeout, exit 124).
#   tests/cli_test.sh <path to fcp> <tests source dir>
set -u
fcp="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect <rc> <name> -- <args...>: runs fcp and checks the exit code; for a
# nonzero code also that stderr is exactly one line starting with "fcp:".
expect() {
  local want="$1" name="$2"
  shift 3
  timeout 60 "$fcp" "$@" >"$tmp/stdout" 2>"$tmp/stderr" <"${STDIN:-/dev/null}"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    fail "$name: exit code $rc, expected $want (fcp $*)"
    sed 's/^/    stderr: /' "$tmp/stderr" | head -5 >&2
    return
  fi
  if [[ $want -ne 0 ]]; then
    local lines
    lines=$(wc -l <"$tmp/stderr")
    if [[ $lines -ne 1 ]] || ! grep -q '^fcp: ' "$tmp/stderr"; then
      fail "$name: stderr is not one 'fcp: ...' line ($lines lines)"
      sed 's/^/    stderr: /' "$tmp/stderr" | head -5 >&2
    fi
  fi
  echo "ok: $name (exit $rc)"
}

# contains <name> <file> <text>
contains() {
  grep -qF -- "$3" "$2" || fail "$1: '$3' not in output: $(head -c 300 "$2")"
}

corpus="$src/fuzz/corpus"

# ---- happy paths --------------------------------------------------------------
expect 0 "workload to a file" -- workload --workers 4 --tokens-per-worker 1000 --max-len 3000 \
  --seed 3 --out "$tmp/lengths.txt"
total=$(awk '{s += $1} END {print s}' "$tmp/lengths.txt")
[[ "$total" == 4000 ]] || fail "workload: lengths sum to $total, expected 4000"

expect 0 "workload to stdout with stats" -- workload --dist uniform --workers 2 \
  --tokens-per-worker 500 --min-len 10 --max-len 100 --stats
contains "workload stats" "$tmp/stderr" "workload: "
total=$(awk '{s += $1} END {print s}' "$tmp/stdout")
[[ "$total" == 1000 ]] || fail "workload stdout: lengths sum to $total, expected 1000"

expect 0 "workload is deterministic" -- workload --workers 4 --tokens-per-worker 1000 \
  --max-len 3000 --seed 3
cmp -s "$tmp/stdout" "$tmp/lengths.txt" || fail "workload: same seed gave different lengths"

expect 0 "plan" -- plan --lengths "$tmp/lengths.txt" --workers 4 --block-size 256 --coalesce 2 \
  --out "$tmp/plan.json" --check
contains "plan" "$tmp/plan.json" '"format": "fcp-plan"'

expect 0 "plan sliding window to stdout" -- plan --lengths "$tmp/lengths.txt" --workers 3 \
  --block-size 100 --mask sliding_window --window 300 --out -
cp "$tmp/stdout" "$tmp/window.json"
contains "plan window" "$tmp/window.json" '"window": 300'

expect 0 "validate the plan" -- validate --plan "$tmp/plan.json"
contains "validate" "$tmp/stdout" "valid fcp-plan (4 workers"

STDIN="$tmp/window.json" expect 0 "validate from stdin" -- validate --plan -
contains "validate stdin" "$tmp/stdout" "valid fcp-plan (3 workers"

expect 0 "inspect the plan" -- inspect --plan "$tmp/plan.json"
contains "inspect" "$tmp/stdout" "stages:"
contains "inspect" "$tmp/stdout" "planning time:"
contains "inspect floor" "$tmp/stdout" "floor "
contains "inspect NIC" "$tmp/stdout" "across nodes of 8 (NIC)"
expect 0 "inspect with a profile's node size" -- inspect --plan "$tmp/plan.json" --profile gpu-y
expect 1 "inspect: unknown profile" -- inspect --plan "$tmp/plan.json" --profile gpu-z

expect 0 "simulate" -- simulate --plan "$tmp/plan.json" --profile gpu-x --trace "$tmp/trace.json"
contains "simulate" "$tmp/stdout" "MFU:"
contains "simulate bound" "$tmp/stdout" "time / bound"
contains "simulate trace" "$tmp/trace.json" '"traceEvents"'
expect 0 "simulate --json" -- simulate --plan "$tmp/plan.json" --profile gpu-y --json --reshuffle none
contains "simulate json" "$tmp/stdout" '"mfu"'
contains "simulate json bound" "$tmp/stdout" '"bound_ratio"'
expect 0 "simulate --transfers grouped" -- simulate --plan "$tmp/plan.json" --transfers grouped

expect 0 "compare" -- compare --dist lognormal --workers 2,4 --tokens-per-worker 2048 \
  --max-len 8192 --block-size 256 --planners fcp,ring,magi --csv "$tmp/compare.csv"
contains "compare" "$tmp/stdout" "magi"
[[ $(wc -l <"$tmp/compare.csv") -eq 7 ]] || fail "compare: expected a header and 6 CSV rows"
head -1 "$tmp/compare.csv" | grep -q '^dist,seed,workers,.*,plan_s,sim_s,bound_s,bound_ratio,forward_bound_' ||
  fail "compare: the bound columns follow the existing ones"
[[ $(awk -F, '{print NF}' "$tmp/compare.csv" | sort -u | wc -l) -eq 1 ]] || fail "compare: ragged CSV rows"
expect 0 "compare in balance mode" -- compare --workers 4 --tokens-per-worker 2048 \
  --max-len 8192 --block-size 256 --planners fcp --network-flops-per-byte 0
expect 0 "plan in balance mode" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
  --block-size 256 --network-flops-per-byte 0 --out "$tmp/balanced.json"
contains "plan records its options" "$tmp/balanced.json" '"network_flops_per_byte": 0.0'
expect 0 "inspect re-plans with the recorded options" -- inspect --plan "$tmp/balanced.json"
if grep -q "gives a different plan" "$tmp/stdout"; then fail "inspect: re-planning ignored the options"; fi

for f in "$corpus"/*.json; do
  expect 0 "validate $(basename "$f")" -- validate --plan "$f"
  expect 0 "inspect $(basename "$f")" -- inspect --plan "$f"
done
contains "inspect hand plan" "$tmp/stdout" "plan: planner hand"

# ---- usage errors: exit 2 ---------------------------------------------------------
expect 2 "no subcommand" --
expect 2 "unknown subcommand" -- frobnicate
expect 2 "unknown flag" -- plan --lengths "$tmp/lengths.txt" --workers 4 --out "$tmp/x.json" --bogus
expect 2 "unknown workload flag" -- workload --bogus 1
expect 2 "missing --workers" -- plan --lengths "$tmp/lengths.txt" --out "$tmp/x.json"
expect 2 "missing --lengths" -- plan --workers 4 --out "$tmp/x.json"
expect 2 "missing --out" -- plan --lengths "$tmp/lengths.txt" --workers 4
expect 2 "missing --plan" -- validate
expect 2 "missing --plan (inspect)" -- inspect
expect 2 "--workers abc" -- plan --lengths "$tmp/lengths.txt" --workers abc --out "$tmp/x.json"
expect 2 "--block-size 1.5" -- plan --lengths "$tmp/lengths.txt" --workers 2 --block-size 1.5 \
  --out "$tmp/x.json"
expect 2 "--mask foo" -- plan --lengths "$tmp/lengths.txt" --workers 4 --mask foo --out "$tmp/x.json"
expect 2 "sliding_window without --window" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
  --mask sliding_window --out "$tmp/x.json"
expect 2 "--dist zipf" -- workload --dist zipf
expect 2 "--tokens-per-worker x" -- workload --tokens-per-worker x
expect 2 "--workers without value" -- workload --workers
expect 2 "--seed -1 (would wrap around)" -- workload --workers 2 --seed -1
contains "--seed -1" "$tmp/stderr" "must be >= 0, got -1"
expect 2 "compare --seed -1" -- compare --workers 2 --planners fcp --seed -1
expect 2 "--token-cap past int64 (not clamped)" -- plan --lengths "$tmp/lengths.txt" --workers 2 \
  --token-cap 99999999999999999999 --out "$tmp/x.json"
contains "--token-cap overflow" "$tmp/stderr" "out of range for a 64-bit integer"
expect 2 "--seed past uint64" -- workload --workers 2 --seed 99999999999999999999
expect 2 "--reshuffle-locality maybe" -- plan --lengths "$tmp/lengths.txt" --workers 2 \
  --reshuffle-locality maybe --out "$tmp/x.json"
expect 2 "--traffic-leveling maybe" -- plan --lengths "$tmp/lengths.txt" --workers 2 \
  --traffic-leveling maybe --out "$tmp/x.json"
expect 1 "compare --csv on a full disk" -- compare --workers 2 --planners fcp --csv /dev/full

# ---- other errors: exit 1 -------------------------------------------------------
expect 1 "unreadable lengths file" -- plan --lengths "$tmp/missing.txt" --workers 4 \
  --out "$tmp/x.json"
contains "unreadable lengths" "$tmp/stderr" "missing.txt"
printf '100\n200\nabc\n' >"$tmp/bad_lengths.txt"
expect 1 "malformed lengths file" -- plan --lengths "$tmp/bad_lengths.txt" --workers 4 \
  --out "$tmp/x.json"
contains "malformed lengths" "$tmp/stderr" "line 3"
: >"$tmp/empty.txt"
expect 1 "empty lengths file" -- plan --lengths "$tmp/empty.txt" --workers 4 --out "$tmp/x.json"
expect 1 "unreadable plan" -- validate --plan "$tmp/missing.json"
expect 1 "unreadable plan (inspect)" -- inspect --plan "$tmp/missing.json"
printf '{"format": "fcp-plan", "version": 1,' >"$tmp/truncated.json"
expect 1 "truncated plan JSON" -- validate --plan "$tmp/truncated.json"
contains "truncated plan" "$tmp/stderr" "not valid JSON"
sed 's/"version": 1/"version": 1, "workers": 9/' "$corpus/two_workers.json" >"$tmp/twice.json"
expect 1 "a key twice in one object" -- validate --plan "$tmp/twice.json"
contains "key twice" "$tmp/stderr" 'the key "workers" appears twice in one object'
sed 's/"version": 1/"version": 7/' "$corpus/two_workers.json" >"$tmp/v7.json"
expect 1 "wrong plan version" -- validate --plan "$tmp/v7.json"
contains "wrong version" "$tmp/stderr" "'version'"
sed 's/"coalesce": 1/"coalesce": "one"/' "$corpus/two_workers.json" >"$tmp/type.json"
expect 1 "wrongly typed field" -- inspect --plan "$tmp/type.json"
contains "wrong type" "$tmp/stderr" "'coalesce'"
sed 's/\[\[1, 0\], \[2, 0\]\]/[[1, 0]]/' "$corpus/two_workers.json" >"$tmp/invalid.json"
expect 1 "invalid plan (missing pair)" -- validate --plan "$tmp/invalid.json"
contains "invalid plan" "$tmp/stderr" "required pair [2, 0] is never computed"
expect 1 "invalid plan (inspect)" -- inspect --plan "$tmp/invalid.json"
expect 1 "infeasible token cap" -- plan --lengths "$tmp/lengths.txt" --workers 4 --token-cap 10 \
  --out "$tmp/x.json"
contains "token cap" "$tmp/stderr" "below ceil(T/N) = 1000"
expect 1 "--workers 0" -- plan --lengths "$tmp/lengths.txt" --workers 0 --out "$tmp/x.json"
expect 1 "--window with causal" -- plan --lengths "$tmp/lengths.txt" --workers 2 --window 5 \
  --out "$tmp/x.json"
expect 1 "unwritable plan output" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
  --out "$tmp/no/such/dir/plan.json"
expect 1 "unwritable workload output" -- workload --out "$tmp/no/such/dir/lengths.txt"
expect 1 "workload --max-len 0" -- workload --max-len 0
echo 12000 >"$tmp/one.txt"
expect 1 "too many block pairs" -- plan --lengths "$tmp/one.txt" --workers 1 --block-size 1 \
  --mask full --out "$tmp/x.json"
contains "too many block pairs" "$tmp/stderr" "candidate block pairs"
expect 1 "simulate: unknown profile" -- simulate --plan "$tmp/plan.json" --profile gpu-z
echo '{"gpus_per_node": 4294967297}' >"$tmp/wrap_profile.json"
expect 1 "profile gpus_per_node past int32 (not wrapped to 1)" -- simulate --plan "$tmp/plan.json" \
  --profile "$tmp/wrap_profile.json"
sed 's/"max_split": [0-9.e+]*/"max_split": 1e30/' "$tmp/plan.json" >"$tmp/odd_options.json"
expect 0 "inspect: planner_options this version rejects only skip the re-plan" -- \
  inspect --plan "$tmp/odd_options.json"
contains "inspect odd options" "$tmp/stdout" "not re-planned"
expect 1 "simulate: unreadable plan" -- simulate --plan "$tmp/missing.json"
expect 1 "simulate: unknown transfer mode" -- simulate --plan "$tmp/plan.json" --transfers push
expect 2 "compare: bad --workers" -- compare --workers 2,x --planners fcp
expect 1 "compare: unknown planner" -- compare --workers 2 --planners fcp,nope
contains "compare unknown planner" "$tmp/stderr" "nope"
expect 1 "negative network ratio" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
  --network-flops-per-byte -1 --out "$tmp/x.json"
contains "negative network ratio" "$tmp/stderr" "network_flops_per_byte must be >= 0"
expect 1 "negative rescue limit" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
  --rescue-max-split -1 --out "$tmp/x.json"
contains "negative rescue limit" "$tmp/stderr" "rescue_max_split must be >= 0"
expect 1 "compare: negative network ratio" -- compare --workers 2 --planners fcp \
  --network-flops-per-byte -1
[[ -e "$tmp/x.json" ]] && fail "a failed plan command left $tmp/x.json behind"

if [[ $failures -ne 0 ]]; then
  echo "$failures CLI check(s) failed" >&2
  exit 1
fi
echo "all CLI checks passed"
