#!/usr/bin/env bash
# End-to-end test of the `fcp` command: happy paths of workload, plan,
# validate and inspect, and every kind of bad input giving exactly one line
# on stderr and exit code 2 (usage) or 1 (other), never a crash (>= 128) or a
# hang (timeout, exit 124), and no output file left that looks valid.
# One CTest entry per case (tests/CMakeLists.txt lists the case_* functions):
#   tests/cli_test.sh <path to fcp> <tests source dir> <case>
set -u
fcp="$1"
src="$2"
case_name="${3:-}"
tmp="$(mktemp -d)"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
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

# edited_plan_fails <name> <sed script> <command> <text>: the corpus's
# two-worker plan, edited by the sed script into $tmp/edited.json, makes
# `fcp <command> --plan` fail with exit 1 and <text> in its message.
edited_plan_fails() {
  sed "$2" "$corpus/two_workers.json" >"$tmp/edited.json"
  expect 1 "$1" -- "$3" --plan "$tmp/edited.json"
  contains "$1" "$tmp/stderr" "$4"
}

# The lengths and plan most cases start from.
setup() {
  "$fcp" workload --workers 4 --tokens-per-worker 1000 --max-len 3000 --seed 3 --out "$tmp/lengths.txt" \
    2>/dev/null || fail "setup: workload"
  "$fcp" plan --lengths "$tmp/lengths.txt" --workers 4 --block-size 256 --coalesce 2 --out "$tmp/plan.json" \
    2>/dev/null || fail "setup: plan"
}

case_happy_paths() {
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
  contains "simulate names the engine auto picked" "$tmp/stderr" "(network exact)"
  expect 0 "simulate --json" -- simulate --plan "$tmp/plan.json" --profile gpu-y --json --reshuffle none
  contains "simulate json" "$tmp/stdout" '"mfu"'
  contains "simulate json bound" "$tmp/stdout" '"bound_ratio"'
  expect 0 "estimate" -- estimate --plan "$tmp/plan.json" --profile gpu-y --reshuffle none
  contains "estimate json" "$tmp/stdout" '"total_s"'
  contains "estimate binding" "$tmp/stdout" '"binding"'
  expect 1 "estimate: unknown profile" -- estimate --plan "$tmp/plan.json" --profile gpu-z
  expect 2 "estimate: unknown reshuffle rule" -- estimate --plan "$tmp/plan.json" --reshuffle blocking
  expect 0 "simulate --transfers grouped" -- simulate --plan "$tmp/plan.json" --transfers grouped
  expect 0 "simulate --network quantized" -- simulate --plan "$tmp/plan.json" --network quantized \
    --network-quantum 0.5 --json
  contains "simulate quantized json" "$tmp/stdout" '"total_time_s"'
  contains "simulate names the engine asked for" "$tmp/stderr" "(network quantized, quantum 0.5)"

  expect 0 "compare" -- compare --dist lognormal --workers 2,4 --tokens-per-worker 2048 \
    --max-len 8192 --block-size 256 --planners fcp,ring,magi --csv "$tmp/compare.csv"
  contains "compare" "$tmp/stdout" "magi"
  contains "compare names the engine" "$tmp/stdout" "; network auto"
  [[ $(wc -l <"$tmp/compare.csv") -eq 13 ]] ||
    fail "compare: expected a header and 12 CSV rows (2 N x 3 planners x 2 rules)"
  head -1 "$tmp/compare.csv" | grep -q '^dist,seed,workers,.*,plan_s,sim_s,bound_s,bound_ratio,forward_bound_' ||
    fail "compare: the bound columns follow the existing ones"
  [[ $(awk -F, '{print NF}' "$tmp/compare.csv" | sort -u | wc -l) -eq 1 ]] || fail "compare: ragged CSV rows"
  contains "compare names both rules" "$tmp/stdout" "rule own-layout: every planner in its own layout"
  contains "compare names both rules" "$tmp/stdout" "rule dataloader: every planner from the dataloader"
  # Equal terms: under own-layout nobody is charged a reshuffle, under
  # dataloader everybody is (the same mode for every planner), and ring's and
  # magi's layouts move tokens, so their charge is not zero; every (N,
  # planner) has a row under each rule.
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    { rule = $col["rule"]; mode = $col["reshuffle"]; bytes = $col["reshuffle_bytes"] + 0
      p = $col["planner"]; seen[$col["workers"] " " p " " rule] = 1
      if (rule == "own-layout" && (mode != "none" || bytes != 0)) bad = bad " " p "/" rule
      if (rule == "dataloader" && mode != "overlap") bad = bad " " p "/" rule
      if (rule == "dataloader" && p != "fcp" && bytes <= 0) bad = bad " " p "/" rule "/bytes"
      if (rule != "own-layout" && rule != "dataloader") bad = bad " " p "/" rule }
    END { if (length(seen) != 12) bad = bad " rows"; if (bad != "") { print bad; exit 1 } }' \
    "$tmp/compare.csv" >"$tmp/rules.txt" || fail "compare: a planner off the rule of its row: $(cat "$tmp/rules.txt")"
  expect 0 "compare --reshuffle charged --reshuffle-charge blocking" -- compare --workers 4 \
    --tokens-per-worker 2048 --max-len 8192 --block-size 256 --planners fcp,magi --reshuffle charged \
    --reshuffle-charge blocking --csv "$tmp/charged.csv"
  [[ $(cut -d, -f9,10 "$tmp/charged.csv" | sort -u | tr '\n' ' ') == "dataloader,blocking rule,reshuffle " ]] ||
    fail "compare --reshuffle charged: every row under the dataloader rule, blocking"
  expect 0 "compare --reshuffle none" -- compare --workers 4 --tokens-per-worker 2048 \
    --max-len 8192 --block-size 256 --planners fcp,magi --reshuffle none --csv "$tmp/none.csv"
  [[ $(cut -d, -f9,10 "$tmp/none.csv" | sort -u | tr '\n' ' ') == "own-layout,none rule,reshuffle " ]] ||
    fail "compare --reshuffle none: every row under the own-layout rule"
  expect 0 "compare in balance mode" -- compare --workers 4 --tokens-per-worker 2048 \
    --max-len 8192 --block-size 256 --planners fcp --network-flops-per-byte 0
  # compare takes the planner's flags from the same table as plan.
  expect 0 "compare with more planner flags" -- compare --workers 4 --tokens-per-worker 2048 \
    --max-len 8192 --block-size 256 --planners fcp --node-workers 2 --local-search 0 --heads-q 8 \
    --heads-kv 2
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
}

case_usage_errors() {
  setup
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
}

# magi-dynamic (the remote-compute extension, docs/plan-format.md): its plans
# validate, simulate and inspect; it keeps the dataloader layout, so the
# dataloader rule charges it no reshuffle bytes.
case_magi_dynamic() {
  setup
  expect 0 "plan magi-dynamic" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --planner magi-dynamic --out "$tmp/md.json"
  contains "plan magi-dynamic" "$tmp/md.json" '"planner": "magi-dynamic"'
  expect 0 "validate magi-dynamic" -- validate --plan "$tmp/md.json"
  expect 0 "simulate magi-dynamic" -- simulate --plan "$tmp/md.json"
  expect 0 "inspect magi-dynamic" -- inspect --plan "$tmp/md.json"
  expect 0 "compare magi-dynamic charged" -- compare --workers 4,8 --tokens-per-worker 2048 \
    --max-len 8192 --planners magi-dynamic --reshuffle charged --csv "$tmp/md.csv"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    { n++; if ($col["reshuffle_bytes"] + 0 != 0) bad = 1 }
    END { exit (n == 2 && !bad) ? 0 : 1 }' "$tmp/md.csv" ||
    fail "compare magi-dynamic: no reshuffle bytes under the dataloader rule"
}

case_other_errors() {
  setup
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
  edited_plan_fails "a key twice in one object" 's/"version": 1/"version": 1, "workers": 9/' \
    validate 'the key "workers" appears twice in one object'
  edited_plan_fails "wrong plan version" 's/"version": 1/"version": 7/' validate "'version'"
  edited_plan_fails "wrongly typed field" 's/"coalesce": 1/"coalesce": "one"/' inspect "'coalesce'"
  edited_plan_fails "invalid plan (missing pair)" 's/\[\[1, 0\], \[2, 0\]\]/[[1, 0]]/' validate \
    "required pair [2, 0] is never computed"
  expect 1 "invalid plan (inspect)" -- inspect --plan "$tmp/edited.json"
  expect 1 "infeasible token cap" -- plan --lengths "$tmp/lengths.txt" --workers 4 --token-cap 10 \
    --out "$tmp/x.json"
  contains "token cap" "$tmp/stderr" "below ceil(T/N) = 1000"
  expect 2 "--workers 0" -- plan --lengths "$tmp/lengths.txt" --workers 0 --out "$tmp/x.json"
  expect 2 "--window with causal" -- plan --lengths "$tmp/lengths.txt" --workers 2 --window 5 \
    --out "$tmp/x.json"
  expect 1 "unwritable plan output" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --out "$tmp/no/such/dir/plan.json"
  expect 1 "unwritable workload output" -- workload --out "$tmp/no/such/dir/lengths.txt"
  expect 2 "workload --max-len 0" -- workload --max-len 0
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
  expect 2 "simulate: unknown transfer mode" -- simulate --plan "$tmp/plan.json" --transfers push
  expect 2 "compare: bad --workers" -- compare --workers 2,x --planners fcp
  expect 2 "compare: unknown planner" -- compare --workers 2 --planners fcp,nope
  contains "compare unknown planner" "$tmp/stderr" "nope"
  expect 2 "negative network ratio" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --network-flops-per-byte -1 --out "$tmp/x.json"
  contains "negative network ratio" "$tmp/stderr" "network_flops_per_byte must be >= 0"
  expect 2 "negative rescue limit" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --rescue-max-split -1 --out "$tmp/x.json"
  contains "negative rescue limit" "$tmp/stderr" "rescue_max_split must be >= 0"
  expect 2 "compare: negative network ratio" -- compare --workers 2 --planners fcp \
    --network-flops-per-byte -1
  expect 2 "compare: a bad planner flag" -- compare --workers 2 --planners fcp --node-workers 0
  contains "compare: a bad planner flag" "$tmp/stderr" "node_workers must be >= 1, got 0"
  expect 2 "compare: a worker count < 1 in the list" -- compare --workers 2,0 --planners fcp
  contains "compare: --workers 2,0" "$tmp/stderr" "--workers: Value 0 not in range 1 to"
  [[ -e "$tmp/x.json" ]] && fail "a failed plan command left $tmp/x.json behind"
}

# ---- issue 19: hostile and careless inputs -------------------------------------

# no_file <name> <path>: a failed command left nothing at <path>.
no_file() {
  [[ ! -e "$2" ]] || fail "$1: left $2 behind ($(head -c 80 "$2" | tr '\n' ' '))"
}

# A plan with 100000 nested arrays in "workers": every reader refuses it, no segfault.
case_deep_json() {
  setup
  python3 -c "import sys; r=open(sys.argv[1]).read(); D=100000; open(sys.argv[2],'w').write(r.replace('\"workers\": 4,', '\"workers\": '+'['*D+']'*D+',', 1))" \
    "$tmp/plan.json" "$tmp/deep.json"
  for cmd in validate inspect simulate "simulate --no-validate"; do
    # shellcheck disable=SC2086
    expect 1 "deep JSON: $cmd" -- $cmd --plan "$tmp/deep.json"
    contains "deep JSON: $cmd" "$tmp/stderr" "nest deeper than 64 levels"
  done
  if "$fcp" --help | grep -q make-inputs; then
    expect 1 "deep JSON: make-inputs" -- make-inputs --plan "$tmp/deep.json" --out "$tmp/in"
    no_file "deep JSON: make-inputs" "$tmp/in/q.npy"
    expect 1 "deep JSON: check" -- check --plan "$tmp/deep.json" --inputs "$tmp/in" --outputs "$tmp/out"
    expect 1 "deep JSON: run --in-process" -- run --in-process --plan "$tmp/deep.json" --inputs "$tmp/in" \
      --out "$tmp/out"
  fi
  python3 -c "D=100000; open('$tmp/deep_profile.json','w').write('{\"peak_flops\": '+'['*D+']'*D+'}')"
  expect 1 "deep JSON: --profile" -- simulate --plan "$tmp/plan.json" --profile "$tmp/deep_profile.json"
  contains "deep profile" "$tmp/stderr" "nest deeper than 64 levels"
}

# A 10 MB string where an integer belongs: the message quotes a short prefix.
case_long_value_quoted() {
  setup
  python3 -c "import sys; r=open(sys.argv[1]).read(); open(sys.argv[2],'w').write(r.replace('\"workers\": 4,', '\"workers\": \"'+'x'*10**7+'\",', 1))" \
    "$tmp/plan.json" "$tmp/long.json"
  expect 1 "10 MB string in workers" -- validate --plan "$tmp/long.json"
  contains "10 MB string" "$tmp/stderr" "a string of 10000000 bytes"
  local bytes
  bytes=$(wc -c <"$tmp/stderr")
  [[ $bytes -lt 300 ]] || fail "10 MB string: stderr has $bytes bytes"
  printf '1\n%s\n' "$(head -c 1000000 /dev/zero | tr '\0' 'y')" >"$tmp/long_lengths.txt"
  expect 1 "1 MB word in a lengths file" -- plan --lengths "$tmp/long_lengths.txt" --workers 2 --out "$tmp/x.json"
  bytes=$(wc -c <"$tmp/stderr")
  [[ $bytes -lt 300 ]] || fail "1 MB word: stderr has $bytes bytes"
}

# The plan reader holds about the plan, not a DOM of the file: peak memory of
# `fcp validate` (reader and validator) on a 19 MB plan stays within 6x the
# file above an idle fcp (main's fcp of 2026-12-01: 10.6x; now 4.9x),
# and running out of memory is one line and exit 1, never an abort.
case_plan_tune() {
  # ---- fcp plan --tune: the simulated step picks the heavy split ---------------------
  "$fcp" workload --dist uniform --min-len 16384 --max-len 131072 --workers 16 --seed 0 \
    --out "$tmp/u.txt" 2>/dev/null || fail "tune: workload"
  expect 0 "plan --tune" -- plan --lengths "$tmp/u.txt" --workers 16 --tune --out "$tmp/tuned.json"
  contains "plan --tune" "$tmp/stderr" "tuned on gpu-x (reshuffle overlap): heavy fraction"
  contains "plan --tune lists its tries" "$tmp/stderr" "(heavy fraction/max imbalance[/relays][/whole][/spread]: 0.1/0.05: "
  contains "plan --tune tries node relays" "$tmp/stderr" "0.1/0.05/relays: "
  contains "plan --tune tries a lifted bound" "$tmp/stderr" ", 0.1/1: "
  contains "plan --tune tries whole-block sends" "$tmp/stderr" ", 0.1/0.05/whole: "
  contains "plan --tune tries spread stages" "$tmp/stderr" ", 0.1/0.05/spread: "
  # The plan records the settings it was made with: planning with them writes the same file.
  local -a settings
  read -r -a settings < <(python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))["planner_options"]; print(o["heavy_fraction"], o["max_imbalance"], *(["false", "true"][int(o[k])] for k in ("node_relays", "row_ranges", "spread_stages")))' \
    "$tmp/tuned.json")
  expect 0 "plan at the tuned settings" -- plan --lengths "$tmp/u.txt" --workers 16 \
    --heavy-fraction "${settings[0]}" --max-imbalance "${settings[1]}" \
    --node-relays "${settings[2]}" --row-ranges "${settings[3]}" --spread-stages "${settings[4]}" \
    --out "$tmp/again.json"
  cmp -s "$tmp/tuned.json" "$tmp/again.json" || fail "plan --tune: its recorded settings re-make another plan"
  expect 0 "plan --tune on gpu-y, layout fed" -- plan --lengths "$tmp/u.txt" --workers 16 --tune \
    --profile gpu-y --reshuffle-locality false --out "$tmp/tuned_y.json"
  contains "plan --tune --profile" "$tmp/stderr" "tuned on gpu-y (reshuffle none)"
  # --profile alone: the hardware FCP ranks its candidates for, recorded in the plan.
  expect 0 "--profile without --tune" -- plan --lengths "$tmp/u.txt" --workers 16 --profile gpu-y \
    --out "$tmp/ranked_y.json"
  [[ $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["planner_options"]["step_costs.nic_bytes_per_us"])' \
    "$tmp/ranked_y.json") == "100000.0" ]] || fail "plan --profile gpu-y: its step costs are not recorded"
  expect 1 "--profile on a missing profile file" -- plan --lengths "$tmp/u.txt" --workers 16 \
    --profile "$tmp/no_such_profile.json" --out "$tmp/x.json"
  expect 2 "--tune with another planner" -- plan --lengths "$tmp/u.txt" --workers 16 --tune \
    --planner magi --out "$tmp/x.json"
  contains "--tune --planner magi" "$tmp/stderr" "tunes the fcp planner, not 'magi'"
  expect 1 "--tune on a missing profile file" -- plan --lengths "$tmp/u.txt" --workers 16 --tune \
    --profile "$tmp/no_such_profile.json" --out "$tmp/x.json"
  [[ ! -e "$tmp/x.json" ]] || fail "a refused --tune wrote its plan"
  # compare --tune: FCP's rows tuned on compare's profile, said in the header.
  expect 0 "compare --tune" -- compare --dist uniform --min-len 16384 --max-len 131072 --workers 16 \
    --planners fcp --tune
  contains "compare --tune" "$tmp/stdout" "fcp tuned (heavy split and imbalance bound by the simulated step)"
}

case_plan_reader_memory() {
  python3 -c "print('\n'.join(['1']*1000000))" >"$tmp/ones.txt"
  "$fcp" plan --lengths "$tmp/ones.txt" --workers 64 --block-size 128 --out "$tmp/big.json" 2>/dev/null ||
    fail "plan of 10^6 one-token sequences"
  local size base peak
  size=$(stat -c %s "$tmp/big.json")
  base=$(/usr/bin/time -f %M "$fcp" validate --plan "$tmp/plan_missing.json" 2>&1 >/dev/null | tail -1)
  peak=$(/usr/bin/time -f %M "$fcp" validate --plan "$tmp/big.json" 2>&1 >/dev/null | tail -1)
  echo "plan $size bytes: peak RSS $peak KB, baseline $base KB"
  # Not under AddressSanitizer: its allocator's redzones and quarantine
  # (measured: 34x the file) say nothing about the reader, and it reports
  # and aborts on exhaustion instead of throwing bad_alloc.
  if ldd "$fcp" | grep -q libasan; then
    echo "note: sanitized build: the memory bound and the out-of-memory part are skipped"
    return
  fi
  (( (peak - base) * 1024 < 6 * size )) || fail "reading a $size-byte plan took $(( (peak - base) * 1024 )) bytes"
  # Under address-space limits from too small to enough: exit 0 or one line
  # and exit 1, never a signal (bad_alloc is an fcp error at the boundary).
  local limit rc vm
  # The address space of an idle fcp (shared libraries included), in KB.
  sleep 2 | "$fcp" validate --plan - >/dev/null 2>&1 &
  local pid=$!
  sleep 1
  vm=$(awk '/^VmSize/ {print $2}' "/proc/$pid/status")
  wait "$pid"
  for limit in $((vm + 10000)) $((vm + 20000)) $((vm + 40000)) $((vm + 80000)) $((vm + 160000)); do
    (ulimit -v "$limit"; timeout 60 "$fcp" validate --plan "$tmp/big.json" >"$tmp/stdout" 2>"$tmp/stderr")
    rc=$?
    echo "ulimit -v $limit: exit $rc $(head -c 100 "$tmp/stderr")"
    [[ $rc -eq 0 || $rc -eq 1 ]] || fail "validate under ulimit -v $limit: exit $rc"
    [[ $rc -eq 0 ]] || [[ $(wc -l <"$tmp/stderr") -eq 1 ]] || fail "ulimit -v $limit: not one line"
  done
}

# Sizes are checked before anything is allocated.
case_size_limits() {
  echo 2147483648 >"$tmp/huge.txt"
  local start=$SECONDS
  expect 1 "2^31-token sequence at block 64" -- plan --lengths "$tmp/huge.txt" --workers 4 --block-size 64 \
    --out "$tmp/x.json"
  contains "2^31 tokens" "$tmp/stderr" "candidate block pairs, more than 2^27"
  [[ $((SECONDS - start)) -lt 5 ]] || fail "the size check took $((SECONDS - start)) s"
  no_file "2^31 tokens" "$tmp/x.json"
  expect 2 "workload of 2^40 sequences" -- workload --workers 1048576 --tokens-per-worker 1048576 \
    --min-len 1 --max-len 1 --out "$tmp/w.txt"
  contains "2^40 sequences" "$tmp/stderr" "more than 2^27"
  no_file "2^40 sequences" "$tmp/w.txt"
}

# Every output appears complete or not at all; a write error names its cause.
case_atomic_writes() {
  setup
  expect 1 "workload to /dev/full" -- workload --workers 2 --out /dev/full
  contains "workload /dev/full" "$tmp/stderr" "No space left on device"
  expect 1 "plan to /dev/full" -- plan --lengths "$tmp/lengths.txt" --workers 4 --out /dev/full
  contains "plan /dev/full" "$tmp/stderr" "No space left on device"
  expect 1 "simulate --trace to /dev/full" -- simulate --plan "$tmp/plan.json" --trace /dev/full
  contains "trace /dev/full" "$tmp/stderr" "No space left on device"
  [[ -c /dev/full ]] || fail "/dev/full is no longer a device"
  # An output over an earlier file is replaced whole, never left half-written.
  echo "old" >"$tmp/keep.json"
  expect 1 "plan fails: the old file stays" -- plan --lengths "$tmp/lengths.txt" --workers 4 --token-cap 1 \
    --out "$tmp/keep.json"
  contains "old file kept" "$tmp/keep.json" "old"
  mkdir -p "$tmp/small"
  if mount -t tmpfs -o size=64k tmpfs "$tmp/small" 2>/dev/null; then
    trap 'umount "$tmp/small"; cleanup' EXIT
    expect 1 "workload onto a full tmpfs" -- workload --workers 64 --tokens-per-worker 100000 --min-len 1 \
      --max-len 8 --out "$tmp/small/w.txt"
    contains "full tmpfs" "$tmp/stderr" "No space left on device"
    [[ -z "$(ls -A "$tmp/small")" ]] || fail "full tmpfs: files left: $(ls -A "$tmp/small")"
    if "$fcp" --help | grep -q make-inputs; then
      expect 1 "make-inputs onto a full tmpfs" -- make-inputs --plan "$tmp/plan.json" --out "$tmp/small/in"
      [[ -z "$(find "$tmp/small" -type f)" ]] || fail "make-inputs left $(find "$tmp/small" -type f)"
    fi
  else
    echo "note: no tmpfs here (not root); full-disk cases ran on /dev/full only"
  fi
  if ls -A "$tmp" | grep -q '\.tmp\.'; then fail "a temporary was left: $(ls -A "$tmp")"; fi
}

# --no-validate skips the plan rules, never memory safety.
case_no_validate_overflow() {
  setup
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['blocks'][0]['segments'][0]=[0,2**31-1,2**31-1]; json.dump(p,open(sys.argv[2],'w'))" \
    "$tmp/plan.json" "$tmp/ovf.json"
  expect 1 "simulate --no-validate: start + length overflows" -- simulate --no-validate --plan "$tmp/ovf.json"
  contains "overflow" "$tmp/stderr" "segment outside its sequence"
}

# One exit-code rule: a bad flag value is 2 wherever it is found.
case_exit_codes() {
  setup
  expect 2 "plan --workers 0" -- plan --lengths "$tmp/lengths.txt" --workers 0 --out "$tmp/x.json"
  expect 2 "compare --workers 0" -- compare --workers 0 --planners fcp
  expect 2 "--window 0" -- plan --lengths "$tmp/lengths.txt" --workers 2 --mask sliding_window --window 0 \
    --out "$tmp/x.json"
  expect 2 "--window -5" -- plan --lengths "$tmp/lengths.txt" --workers 2 --mask sliding_window --window -5 \
    --out "$tmp/x.json"
  expect 2 "simulate --reshuffle foo" -- simulate --plan "$tmp/plan.json" --reshuffle foo
  expect 2 "simulate --network-quantum 0" -- simulate --plan "$tmp/plan.json" --network quantized \
    --network-quantum 0
  contains "simulate --network-quantum 0 message" "$tmp/stderr" "network_quantum must be a positive number, got 0"
  expect 2 "compare --network-quantum -1" -- compare --workers 4 --planners fcp --network quantized \
    --network-quantum -1
  expect 2 "simulate --mask-like bad --transfers" -- simulate --plan "$tmp/plan.json" --transfers push
  expect 2 "compare --reshuffle foo" -- compare --workers 2 --planners fcp --reshuffle foo
  contains "compare --reshuffle foo message" "$tmp/stderr" "--reshuffle must be none, charged or both, got 'foo'"
  expect 2 "compare --reshuffle overlap (a mode, not a rule)" -- compare --workers 2 --planners fcp \
    --reshuffle overlap
  expect 2 "compare --reshuffle-charge none" -- compare --workers 2 --planners fcp --reshuffle-charge none
  expect 2 "compare --baseline-reshuffle (removed: one rule for all)" -- compare --workers 2 \
    --planners fcp --baseline-reshuffle none
  expect 2 "workload --min-len 0" -- workload --min-len 0
  expect 2 "plan --planner nope" -- plan --lengths "$tmp/lengths.txt" --workers 2 --planner nope --out "$tmp/x.json"
  expect 2 "simulate --per-worker without --json" -- simulate --plan "$tmp/plan.json" --per-worker
  if "$fcp" --help | grep -q make-inputs; then
    expect 2 "run --timeout-s -1" -- run --in-process --plan "$tmp/plan.json" --inputs "$tmp" --out "$tmp/o" \
      --timeout-s -1
    expect 2 "run --tolerance 0" -- run --in-process --plan "$tmp/plan.json" --inputs "$tmp" --out "$tmp/o" \
      --tolerance 0
  fi
  # Still 1: the command line is fine, the data is not.
  expect 1 "infeasible token cap is not a usage error" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --token-cap 10 --out "$tmp/x.json"
  no_file "exit codes" "$tmp/x.json"
}

# Careless paths and bytes: directories, a BOM, a NUL, unbounded streams.
case_careless_inputs() {
  setup
  expect 1 "--lengths DIR" -- plan --lengths "$tmp" --workers 2 --out "$tmp/x.json"
  contains "--lengths DIR" "$tmp/stderr" "is a directory"
  expect 1 "--profile DIR" -- simulate --plan "$tmp/plan.json" --profile "$tmp"
  contains "--profile DIR" "$tmp/stderr" "is a directory"
  expect 1 "--plan DIR" -- validate --plan "$tmp"
  contains "--plan DIR" "$tmp/stderr" "is a directory"
  printf '\xef\xbb\xbf100\n200\n' >"$tmp/bom.txt"
  expect 0 "a BOM before the lengths" -- plan --lengths "$tmp/bom.txt" --workers 2 --out "$tmp/bom.json"
  printf '100\n2\x0000\n' >"$tmp/nul.txt"
  expect 1 "a NUL byte in the lengths" -- plan --lengths "$tmp/nul.txt" --workers 2 --out "$tmp/x.json"
  contains "NUL" "$tmp/stderr" "NUL byte at offset 5"
  local start=$SECONDS
  expect 1 "validate --plan /dev/zero" -- validate --plan /dev/zero
  contains "/dev/zero" "$tmp/stderr" "NUL byte at offset 0"
  set +o pipefail
  yes 100 | timeout 60 "$fcp" plan --lengths - --workers 2 --out "$tmp/x.json" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  [[ $rc -eq 1 ]] || fail "yes | plan --lengths -: exit $rc, expected 1"
  contains "yes | plan" "$tmp/stderr" "larger than the limit of"
  [[ $((SECONDS - start)) -lt 30 ]] || fail "unbounded inputs took $((SECONDS - start)) s"
  expect 0 "--block-size above the cap is reported" -- plan --lengths "$tmp/lengths.txt" --workers 4 \
    --block-size 100000 --out "$tmp/capped.json"
  contains "block size note" "$tmp/stderr" "is above the token cap 1000"
  no_file "careless inputs" "$tmp/x.json"
}

# make-inputs validates the plan before sizing arrays from it.
case_make_inputs_validates() {
  "$fcp" --help | grep -q make-inputs || { echo "skipped: built without MPI"; exit 77; }
  setup
  sed 's/"sequences": \[/"sequences": [-5, /' "$tmp/plan.json" >"$tmp/negative.json"
  expect 1 "make-inputs: negative length" -- make-inputs --plan "$tmp/negative.json" --out "$tmp/in"
  no_file "negative length" "$tmp/in/q.npy"
  sed 's/"heads_kv": [0-9]*/"heads_kv": 0/' "$tmp/plan.json" >"$tmp/zero_heads.json"
  expect 1 "make-inputs: heads_kv 0" -- make-inputs --plan "$tmp/zero_heads.json" --out "$tmp/in"
  no_file "heads_kv 0" "$tmp/in/k.npy"
}

# scripts/stage_gap.py against the simulator's own numbers: pass times are
# the simulator's, the busiest worker's compute summed off the trace is the
# lower bound's max_compute_s, the per-stage sum is at least that, and the
# last compute's end plus the tail is the pass.
case_stage_gap() {
  "$fcp" workload --dist lognormal --workers 16 --seed 2 --out "$tmp/l16.txt" 2>/dev/null ||
    fail "stage_gap: workload"
  "$fcp" plan --lengths "$tmp/l16.txt" --workers 16 --out "$tmp/p16.json" 2>/dev/null ||
    fail "stage_gap: plan"
  expect 0 "simulate with a trace" -- simulate --plan "$tmp/p16.json" --profile gpu-x \
    --reshuffle none --json --trace "$tmp/t16.json"
  cp "$tmp/stdout" "$tmp/s16.json"
  python3 "$src/../scripts/stage_gap.py" "$tmp/p16.json" "$tmp/t16.json" "$tmp/s16.json" --json \
    >"$tmp/gap.json" || fail "stage_gap: the script failed"
  python3 - "$tmp/gap.json" "$tmp/s16.json" <<'PY' || fail "stage_gap: numbers disagree with the simulator"
import json, sys
gap, sim = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for p in ("forward", "backward"):
    g = gap[p]
    checks = {
        "time": abs(g["time_ms"] - sim[p + "_time_s"] * 1e3) < 1e-9,
        "compute": abs(g["compute_ms"] - sim[p + "_bounds"]["max_compute_s"] * 1e3) < 1e-3,
        "per-stage": g["per_stage_ms"] >= g["compute_ms"] - 1e-6,
        "waits": g["structure_wait_ms"] >= 0 and g["late_wait_ms"] >= 0,
        "tail": abs(g["last_compute_end_ms"] + g["tail_ms"] - g["time_ms"]) < 1e-3,
    }
    if p == "forward":  # the script's copy of the profile's NIC bandwidth
        checks["nic"] = abs(g["nic_receive_ms"] - sim["forward_bounds"]["nic_in_s"] * 1e3) < 1e-6
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        sys.exit("%s: %s wrong in %s" % (p, ", ".join(bad), g))
    print("ok: stage_gap %s" % p)
PY
}

# scripts/busy_gap.py reports the simulator's step and a busiest worker at
# or above the mean busy time.
case_busy_gap() {
  "$fcp" workload --dist uniform --min-len 64 --max-len 2048 --workers 16 --seed 0 \
    --out "$tmp/l.txt" 2>/dev/null || fail "busy_gap: workload"
  "$fcp" plan --lengths "$tmp/l.txt" --workers 16 --out "$tmp/p.json" 2>/dev/null ||
    fail "busy_gap: plan"
  expect 0 "simulate" -- simulate --plan "$tmp/p.json" --profile gpu-y --reshuffle none --json
  cp "$tmp/stdout" "$tmp/s.json"
  python3 "$src/../scripts/busy_gap.py" --fcp "$fcp" --profiles gpu-y "$tmp/p.json" \
    >"$tmp/gap.txt" || fail "busy_gap: the script failed"
  python3 - "$tmp/gap.txt" "$tmp/s.json" <<'PY' || fail "busy_gap: numbers disagree with the simulator"
import json, re, sys
line = open(sys.argv[1]).read()
sim = json.load(open(sys.argv[2]))
step = float(re.search(r"step ([0-9.]+) ms", line).group(1))
busy = float(re.search(r"busy ([-+][0-9.]+)%", line).group(1))
if abs(step - sim["total_time_s"] * 1e3) > 1e-3 or busy < 0:
    sys.exit("busy_gap: step %s / busy %s%% against the simulator's %s" % (step, busy, sim["total_time_s"]))
print("ok: busy_gap")
PY
}

# scripts/step_bench.py: held-out seeds name their rows, and a run compared
# with its own rows changes nothing; a --compare file without the row fails.
case_step_bench() {
  local bench="$src/../scripts/step_bench.py"
  python3 "$bench" --fcp "$fcp" --workers 8 --profiles gpu-x --baselines "" \
    --batches lognormal-0,lognormal-1 --seeds 5 --json "$tmp/rows.json" >"$tmp/out.md" 2>/dev/null ||
    fail "step_bench: the run failed"
  grep -q "^| lognormal@5 | 8 | gpu-x |" "$tmp/out.md" || fail "step_bench: no lognormal@5 row"
  [ "$(grep -c '^| lognormal' "$tmp/out.md")" = 1 ] || fail "step_bench: one distribution, one seed: one row"
  python3 "$bench" --fcp "$fcp" --workers 8 --profiles gpu-x --baselines "" --batches lognormal-0 \
    --seeds 5 --compare "$tmp/rows.json" >"$tmp/cmp.md" 2>/dev/null || fail "step_bench: --compare failed"
  grep -q "^| lognormal@5 | 8 | gpu-x | .* | +0.00% |" "$tmp/cmp.md" || fail "step_bench: a rerun changed"
  grep -q "^| 8 | 1 | +0.00% | .* | 0 |" "$tmp/cmp.md" || fail "step_bench: geometric mean line"
  if python3 "$bench" --fcp "$fcp" --workers 8 --profiles gpu-x --baselines "" --batches lognormal-0 \
    --compare "$tmp/rows.json" >/dev/null 2>"$tmp/err"; then
    fail "step_bench: --compare without the row succeeded"
  fi
  grep -q "has no row" "$tmp/err" || fail "step_bench: missing-row message"
  echo "ok: step_bench"
}

if ! declare -F "case_$case_name" >/dev/null; then
  echo "cli_test.sh: unknown case '$case_name'" >&2
  exit 2
fi
"case_$case_name"
if [[ $failures -ne 0 ]]; then
  echo "$failures CLI check(s) failed in case $case_name" >&2
  exit 1
fi
echo "case $case_name passed"
