#!/usr/bin/env python3
"""Where a simulated pass's time goes beyond its compute bound, stage by stage.

Reads a plan, the Chrome trace and the --json output of `fcp simulate` on it
(`--reshuffle none`, pulled transfers: the rules of docs/simulator.md,
"Execution model"; with a reshuffle charged, a stage's pairs waiting inside
it for reshuffled inputs are neither compute nor the waits counted below)
and prints, per pass:

  time        the pass's simulated time;
  compute     the busiest worker's compute (the compute bound when it binds);
  per-stage   the largest over workers of sum over stages t of
              max(C_t, R_t): C_t the worker's compute in stage t (from the
              trace), R_t its K/V receive group t at the port rates (NIC
              across nodes, NVLink inside one; the last compute stage has no
              receive): what the stage structure forces, a worker computing
              stage t while group t arrives, with no congestion;
  the worker whose compute ends last: its compute, and its waits between
              stages split into the part its receive groups' port time
              explains (stage structure) and the rest (the group arrived
              later than its port time after the stage before ended:
              congestion at senders or receiver, or senders late);
  tail        time after the last compute ends (backward: the dK/dV partials'
              return; with the reshuffle, outputs going home).

Usage (docs/planner-quality.md, "Where the gap to the bound goes"):
  fcp simulate --plan P --profile gpu-x --reshuffle none --json --trace T > S
  python3 scripts/stage_gap.py P T S [--profile gpu-x|gpu-y]
Needs only Debian's python3.
"""

import argparse
import collections
import json

# Per-GPU, per-direction NIC and NVLink bandwidths and GPUs per node of the
# built-in profiles, as src/model/cost_model.cpp sets them (so this script
# needs no build; tests/cli_test.sh's stage_gap case fails if they drift:
# the busiest NIC receive summed here must be the simulator's nic_in_s).
PROFILES = {"gpu-x": (50e9, 450e9, 8), "gpu-y": (100e9, 900e9, 8)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan")
    ap.add_argument("trace")
    ap.add_argument("sim_json")
    ap.add_argument("--profile", default="gpu-x", choices=sorted(PROFILES))
    ap.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = ap.parse_args()
    result = {}
    nic, nvlink, per_node = PROFILES[args.profile]
    plan = json.load(open(args.plan))
    events = json.load(open(args.trace))["traceEvents"]
    sim = json.load(open(args.sim_json))
    a = plan["attention"]
    kv_bytes_per_token = 2 * a["heads_kv"] * a["head_dim"] * a["dtype_bytes"]
    tokens = [sum(s[2] for s in b["segments"]) for b in plan["blocks"]]
    n = plan["workers"]
    forward_ms = sim["forward_time_s"] * 1e3
    passes = [("forward", "send", 0.0, forward_ms),
              ("backward", "send_kv", forward_ms, sim["backward_time_s"] * 1e3)]
    for name, key, offset, length in passes:
        stages = plan[name]
        group_of = {}
        port_ms = collections.defaultdict(lambda: [0.0, 0.0])  # (w, t) -> [NIC, NVLink] ms
        for t, stage in enumerate(stages):
            for block, src, dst in stage.get(key, []):
                group_of[(block, src, dst)] = t
                same_node = src // per_node == dst // per_node
                port_ms[(dst, t)][same_node] += tokens[block] * kv_bytes_per_token / (
                    nvlink if same_node else nic) * 1e3
        compute = collections.defaultdict(float)
        start, end = {}, {}
        arrival = collections.defaultdict(float)  # (w, t): last K/V of group t in
        for e in events:
            if e.get("ph") != "X":
                continue
            ts = e["ts"] / 1e3 - offset
            te = ts + e["dur"] / 1e3
            w, label = e["pid"], e["name"]
            if e["tid"] == 0 and label.startswith(name + " stage "):
                t = int(label.split()[-1])
                compute[(w, t)] += e["dur"] / 1e3
                start[(w, t)] = min(start.get((w, t), ts), ts)
                end[(w, t)] = max(end.get((w, t), te), te)
            elif e["tid"] == 2 and label.startswith("kv ") and 0 <= ts <= length:
                block, src = int(label.split()[1]), int(label.split()[-1])
                t = group_of.get((block, src, w))
                if t is not None:
                    arrival[(w, t)] = max(arrival[(w, t)], te)

        def receive(w, t):
            return max(port_ms[(w, t)]) if t < len(stages) - 1 else 0.0

        busy = [sum(compute[(w, t)] for t in range(len(stages))) for w in range(n)]
        per_stage = [sum(max(compute[(w, t)], receive(w, t)) for t in range(len(stages)))
                     for w in range(n)]
        last_end = {w: max((end[(w, t)] for t in range(len(stages)) if (w, t) in end), default=0.0)
                    for w in range(n)}
        late = max(range(n), key=lambda w: last_end[w])
        structure = congestion = 0.0
        previous_end = 0.0
        for t in range(len(stages)):
            if (late, t) not in start:
                continue
            wait = start[(late, t)] - previous_end
            if wait > 1e-9 and t >= 1:
                # Group g = t-1 opens at 0 (g = 0), once group 0 is in (g = 1), or
                # once group g-1 is in and compute g-1 has ended: its port time
                # past that is structure, the rest late arrival.
                g = t - 1
                opened = 0.0 if g == 0 else arrival[(late, g - 1)]
                if g >= 2:
                    opened = max(opened, end.get((late, g - 1), 0.0))
                explained = max(0.0, opened + receive(late, t - 1) - previous_end)
                structure += min(wait, explained)
                congestion += wait - min(wait, explained)
            previous_end = end[(late, t)]
        nic_receive = max(sum(port_ms[(w, t)][0] for t in range(len(stages))) for w in range(n))
        worst = max(range(n), key=lambda w: per_stage[w])
        busiest = max(range(n), key=lambda w: busy[w])
        r = result[name] = {
            "time_ms": length, "compute_ms": busy[busiest], "compute_worker": busiest,
            "per_stage_ms": per_stage[worst], "per_stage_worker": worst,
            "last_worker": late, "last_compute_end_ms": last_end[late],
            "last_worker_compute_ms": busy[late], "structure_wait_ms": structure,
            "late_wait_ms": congestion, "tail_ms": max(0.0, length - last_end[late]),
            "nic_receive_ms": nic_receive}
        if not args.json:
            print(f"{name}: time {length:.2f} ms, compute {r['compute_ms']:.2f} (worker {busiest}), "
                  f"per-stage {r['per_stage_ms']:.2f} (worker {worst}); compute ends last on worker "
                  f"{late} at {last_end[late]:.2f}: compute {busy[late]:.2f}, waits "
                  f"{structure + congestion:.2f} = structure {structure:.2f} + late arrivals "
                  f"{congestion:.2f}; tail {r['tail_ms']:.2f}")
    if args.json:
        print(json.dumps(result, sort_keys=True))

if __name__ == "__main__":
    main()
