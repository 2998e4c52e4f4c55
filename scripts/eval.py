#!/usr/bin/python3
"""Regenerates docs/evaluation.md and docs/figures/*.png: the paper's evaluation
(Figures 2, 9-14 and Table 2) reproduced on the fcp simulator.

Usage:  scripts/eval.py [--fcp build/fcp] [--quick]
Needs the built `fcp` binary and Debian's python3-matplotlib / python3-numpy.
Every number comes from `fcp compare --csv` / `fcp workload` runs whose exact
commands are written next to each figure. --quick uses N <= 64 (for a smoke run).
"""
import argparse
import csv
import io
import json
import math
import os
import shlex
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
FIGS = os.path.join(DOCS, "figures")
PLANNERS = ["fcp", "ring", "bytescale", "wlb", "magi"]
COLORS = {"fcp": "tab:red", "ring": "tab:blue", "bytescale": "tab:green", "wlb": "tab:purple",
          "magi": "tab:orange", "fcp (reshuffle overlap)": "darkred"}


class Runner:
    def __init__(self, fcp):
        self.fcp = fcp
        self.commands = []

    def run(self, args):
        cmd = [self.fcp] + args
        shown = "fcp " + " ".join(shlex.quote(a) for a in args)
        start = time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        print(f"  {time.time() - start:6.1f} s  {shown}", file=sys.stderr)
        return shown, out

    def compare(self, args):
        path = os.path.join(FIGS, ".compare.csv")
        shown, _ = self.run(["compare"] + args + ["--csv", path])
        shown = shown.replace(" --csv " + path, " --csv out.csv")
        with open(path) as f:
            rows = list(csv.DictReader(f))
        os.remove(path)
        for r in rows:
            for k, v in r.items():
                try:
                    r[k] = float(v) if any(c in v for c in ".e") else int(v)
                except ValueError:
                    pass
        return shown, rows


def pct(x):
    return f"{100 * x:.1f}%"


def table(header, rows):
    out = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    for r in rows:
        out += "| " + " | ".join(str(c) for c in r) + " |\n"
    return out


def by(rows, **keys):
    return [r for r in rows if all(r[k] == v for k, v in keys.items())]


def one(rows, **keys):
    found = by(rows, **keys)
    assert len(found) == 1, (keys, len(found))
    return found[0]


def line_plot(path, xs, series, xlabel, ylabel, title, logx=True, percent=True):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name, color=COLORS.get(name))
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure2(runner, md, n):
    shown, text = runner.run(["workload", "--dist", "lognormal", "--workers", str(n), "--seed", "0"])
    lengths = np.array([int(x) for x in text.split()])
    order = np.sort(lengths)
    flops = order.astype(float) ** 2
    cum_tokens = np.cumsum(order) / order.sum()  # naive (ring) CP traffic is proportional to length
    cum_flops = np.cumsum(flops) / flops.sum()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.hist(lengths, bins=np.logspace(0, math.log10(lengths.max() + 1), 40), color="gray")
    a.set_xscale("log")
    a.set_xlabel("sequence length (tokens)")
    a.set_ylabel("sequences")
    a.set_title(f"lengths ({len(lengths)} sequences)")
    b.plot(order, cum_flops, label="attention FLOPs")
    b.plot(order, cum_tokens, label="naive-CP traffic (= tokens)")
    b.set_xscale("log")
    b.set_xlabel("sequence length (tokens)")
    b.set_ylabel("cumulative share")
    b.legend(fontsize=8)
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(FIGS, "fig2_lengths.png"), dpi=110)
    plt.close(fig)
    short_traffic = order[order < 4096].sum() / order.sum()
    short_flops = flops[order < 4096].sum() / flops.sum()
    long_flops = flops[order >= 65536].sum() / flops.sum()
    md.append(f"""## Figure 2: length distribution, FLOP and traffic shares

`{shown}`

![Figure 2](figures/fig2_lengths.png)

{len(lengths)} sequences, {lengths.sum()} tokens, mean {lengths.mean():.0f}, longest {lengths.max()}.
Sequences shorter than 4K carry {pct(short_traffic)} of naive-CP traffic but {pct(short_flops)}
of the FLOPs; sequences of 64K and more carry {pct(long_flops)} of the FLOPs. The paper (section 2):
"both short and long sequences take the same magnitude of computation while short ones dominate
communication"; sequences under 4K are "about 50% of the total communication volume". Our synthetic
batch (the workload generator's lognormal, docs/workloads.md) matches the traffic share; its FLOPs
are more concentrated in long sequences than the paper's description suggests.
""")
    return lengths.mean()


def main_sweep(runner, md, workers, profile, planners, tag):
    base = ["--dist", "lognormal", "--workers", ",".join(map(str, workers)), "--profile", profile,
            "--reshuffle", "none", "--baseline-reshuffle", "none"]
    shown, rows = runner.compare(base + ["--planners", ",".join(planners)])
    shown_t, transparent = runner.compare(base[:-4] + ["--reshuffle", "overlap", "--planners", "fcp"])
    return shown, rows, shown_t, transparent


def figure11(md, workers, shown, rows, shown_t, transparent, profile, fig_name, title, paper):
    series = {p: [one(rows, workers=n, planner=p)["mfu"] for n in workers]
              for p in sorted({r["planner"] for r in rows}, key=PLANNERS.index)}
    series["fcp (reshuffle overlap)"] = [one(transparent, workers=n)["mfu"] for n in workers]
    line_plot(os.path.join(FIGS, fig_name), workers, series, "workers N", "attention-module MFU",
              title)
    header = ["N"] + list(series) + ["FCP / best baseline"]
    body = []
    ratios = {}
    for i, n in enumerate(workers):
        base = {p: series[p][i] for p in series if p not in ("fcp", "fcp (reshuffle overlap)")}
        best = max(base.values())
        for p, v in base.items():
            ratios.setdefault(p, []).append(series["fcp"][i] / v)
        body.append([n] + [pct(series[p][i]) for p in series] + [f"{series['fcp'][i] / best:.2f}x"])
    norm = {n: one(rows, workers=n, planner="fcp") for n in workers}
    ratio_text = ", ".join(f"{p} {min(v):.2f}x-{max(v):.2f}x" for p, v in ratios.items())
    above = all(series["fcp"][i] > max(series[p][i] for p in ratios) for i in range(len(workers)))
    md.append(f"""`{shown}`

`{shown_t}` (the FCP line with its transparent reshuffle)

![{title}](figures/{fig_name})

{table(header, body)}
FCP over each baseline (MFU ratio, same batch): {ratio_text}. FCP is above every baseline at every N:
**{"yes" if above else "no"}**. {paper}

FCP's normalised MFU (by the saturated single-GPU efficiency / by this batch's own single-GPU
efficiency): {", ".join(f"N={n}: {pct(norm[n]['normalized_mfu'])} / {pct(norm[n]['batch_normalized_mfu'])}" for n in workers)}.
""")
    return series, ratios


def figure9(md, workers, rows, shown, modes):
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    planners = sorted({r["planner"] for r in rows}, key=PLANNERS.index)
    body = []
    for p in planners:
        comp = [one(rows, workers=n, planner=p)["compute_imbalance"] for n in workers]
        traf = [one(rows, workers=n, planner=p)["traffic_imbalance"] for n in workers]
        a.plot(workers, comp, marker="o", label=p, color=COLORS.get(p))
        b.plot(workers, traf, marker="o", label=p, color=COLORS.get(p))
        body.append([p] + [f"{pct(c)} / {pct(t)}" for c, t in zip(comp, traf)])
    for label, (_, mode_rows) in modes.items():
        body.append([label] + [f"{pct(one(mode_rows, workers=n)['compute_imbalance'])} / "
                               f"{pct(one(mode_rows, workers=n)['traffic_imbalance'])}" for n in workers])
    for ax, t in ((a, "compute imbalance"), (b, "traffic imbalance")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers)
        ax.set_xticklabels(map(str, workers))
        ax.set_xlabel("workers N")
        ax.set_title(t)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(FIGS, "fig9_imbalance.png"), dpi=110)
    plt.close(fig)
    fcp_max = max(max(one(rows, workers=n, planner="fcp")[k] for k in ("compute_imbalance", "traffic_imbalance"))
                  for n in workers)
    magi_traffic = max(one(rows, workers=n, planner="magi")["traffic_imbalance"] for n in workers)
    bs_compute = max(one(rows, workers=n, planner="bytescale")["compute_imbalance"] for n in workers)
    mode_lines = "\n".join(
        f"* {label} (`{shown_m}`): module MFU "
        + ", ".join(f"N={n}: {pct(one(mode_rows, workers=n)['mfu'])}" for n in workers)
        for label, (shown_m, mode_rows) in modes.items())
    md.append(f"""## Figure 9: compute and traffic imbalance

Imbalance = (max - mean) / max over workers of forward attention FLOPs and of forward K/V bytes sent +
received (the simulator's own count; it agrees with `fcp inspect`'s ComputePlanMetrics to 1e-6, see
tests/simulator_test.cpp). From the Figure 11 run: `{shown}`

![Figure 9](figures/fig9_imbalance.png)

{table(["planner"] + [f"N={n} compute / traffic" for n in workers], body)}
Worst over N: FCP {pct(fcp_max)} (paper: under 5%), MagiAttention-like traffic {pct(magi_traffic)}
(paper: up to 17%), ByteScale-like compute {pct(bs_compute)} (paper: up to 70%).

The FCP row is the default planner: of its candidate plans (heavy blocks cut in at most four or two
pieces, three greedy starts, two local-search policies) it keeps the one with the lowest compute +
traffic cost, with the network ratio taken from the profile, among those whose compute and traffic
imbalance are both within 5% (`--max-imbalance`; a traffic excess under one block counts as
balanced; docs/planner.md). The extra rows are the same planner in its other modes:
{mode_lines}

Balance mode judges plans by imbalance alone; time mode by cost alone, whatever the imbalance.
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fcp", default=os.path.join(ROOT, "build", "fcp"))
    ap.add_argument("--quick", action="store_true", help="N <= 64 only")
    args = ap.parse_args()
    if not os.access(args.fcp, os.X_OK):
        sys.exit(f"eval.py: no fcp binary at {args.fcp} (build first: cmake --build build --target fcp_cli)")
    os.makedirs(FIGS, exist_ok=True)
    r = Runner(args.fcp)
    workers = [16, 32, 64] if args.quick else [16, 32, 64, 128, 256]
    mid = 64 if args.quick else 128
    started = time.time()
    md = []

    mean_len = figure2(r, md, workers[-1])

    # Figure 11 (and 9) on gpu-x.
    shown, rows, shown_t, transparent = main_sweep(r, md, workers, "gpu-x", PLANNERS, "x")
    base_fcp = ["--dist", "lognormal", "--workers", ",".join(map(str, workers)), "--profile", "gpu-x",
                "--reshuffle", "none", "--planners", "fcp"]
    modes = {"fcp (balance mode)": r.compare(base_fcp + ["--network-flops-per-byte", "0"]),
             "fcp (time mode)": r.compare(base_fcp + ["--max-imbalance", "1"])}
    figure9(md, workers, rows, shown, modes)
    md.append("## Figure 11: attention-module MFU versus N (gpu-x)\n")
    facts = {"rows": rows, "workers": workers}
    series, ratios = figure11(
        md, workers, shown, rows, shown_t, transparent, "gpu-x", "fig11_mfu.png",
        "module MFU, lognormal, gpu-x",
        "Paper: FCP 1.13x-2.21x over the baselines, all similar at 16 GPUs.")

    # Figure 10: every length equal to the mean.
    fixed = int(round(mean_len))
    shown10, rows10 = r.compare(["--dist", "fixed", "--max-len", str(fixed), "--workers",
                                 ",".join(map(str, workers[:-1] if not args.quick else workers)),
                                 "--planners", ",".join(PLANNERS), "--reshuffle", "none"])
    shown10_top, rows10_top = r.compare(["--dist", "fixed", "--max-len", str(fixed), "--workers",
                                         str(workers[-1]), "--planners", "fcp", "--reshuffle", "none"])
    fcp10_top = one(rows10_top, workers=workers[-1])
    w10 = sorted({x["workers"] for x in rows10})
    s10 = {p: [one(rows10, workers=n, planner=p)["batch_normalized_mfu"] for n in w10] for p in PLANNERS}
    facts["fig10"] = {p: v[-1] for p, v in s10.items()}
    line_plot(os.path.join(FIGS, "fig10_fixed.png"), w10, s10, "workers N",
              "MFU / single-GPU FA MFU on the same sequences", f"all lengths = {fixed}")
    md.append(f"""## Figure 10: compute efficiency with every length equal to the mean ({fixed} tokens)

`{shown10}`

![Figure 10](figures/fig10_fixed.png)

{table(["N"] + PLANNERS, [[n] + [pct(s10[p][i]) for p in PLANNERS] for i, n in enumerate(w10)])}
MFU normalised by what one GPU reaches on the same sequences unsharded (the paper's definition for
this figure). Paper: FCP above 90%, ring far lower from over-sharding. Mean exposed communication
per worker (ms) at the largest N: {", ".join(f"{p} {one(rows10, workers=w10[-1], planner=p)['mean_exposed_comm_s'] * 1e3:.2f}" for p in PLANNERS)}.
FCP at N = {workers[-1]} (`{shown10_top}`): {pct(fcp10_top['batch_normalized_mfu'])}, exposed
communication {fcp10_top['mean_exposed_comm_s'] * 1e3:.2f} ms per worker. The other planners are not
run at N = {workers[-1]} here: ring's 2N chunks per sequence make that simulation slow.

A planner that keeps every {fixed}-token sequence whole on one worker moves no K/V at all and is
limited only by the SMs reserved for communication and the kernel launch. With an exact token cap
(T = N x cap) some sequences must be split between workers; FCP makes each split piece a block of its
own, so only that piece's K/V moves, and the pieces are computed in the next stage at the
efficiency of their short length. MagiAttention cuts the token stream every ceil(T/8N) tokens and
moves whole chunks. Ring cuts every sequence into 2N chunks of a few tokens and sends all of every
worker's K/V N-1 times.
""")

    # Table 2: ablations at N = mid.
    abl = [
        ("no pipelining, no colouring, c=1, blocking reshuffle", "fcp-nopipe", 1, "blocking"),
        ("+ block pipelining (random order), c=1", "fcp-random-order", 1, "blocking"),
        ("+ congestion-free colouring, c=1", "fcp", 1, "blocking"),
        ("+ coalescing, c=16", "fcp", 16, "blocking"),
        ("+ reshuffle overlap (full FCP)", "fcp", 16, "overlap"),
    ]
    loo = [
        ("full FCP, reshuffle not charged", "fcp", 16, "none"),
        ("without pipelining", "fcp-nopipe", 16, "none"),
        ("without colouring (random order)", "fcp-random-order", 16, "none"),
        ("without coalescing (c=1)", "fcp", 1, "none"),
        ("grouped transfers (one send/receive call per stage)", "fcp", 16, "none", "--transfers", "grouped"),
    ]
    results = []
    for rows_def in (abl, loo):
        out = []
        for label, planner, c, mode, *extra in rows_def:
            shown_a, ra = r.compare(["--dist", "lognormal", "--workers", str(mid), "--planners", planner,
                                     "--coalesce", str(c), "--reshuffle", mode] + extra)
            out.append((label, shown_a, ra[0]))
        results.append(out)
    facts["ablation"] = results
    facts["stages"] = stage_facts(r, mid)
    body = [[label, pct(x["mfu"]), f"{x['total_time_s'] * 1e3:.2f} ms", f"`{cmd}`"]
            for label, cmd, x in results[0]]
    body2 = [[label, pct(x["mfu"]), f"{x['total_time_s'] * 1e3:.2f} ms", f"`{cmd}`"]
             for label, cmd, x in results[1]]
    md.append(f"""## Table 2: ablation (N = {mid}, gpu-x)

Components added one by one, as in the paper:

{table(["configuration", "module MFU", "time", "command"], body)}
Each component taken away from full FCP (reshuffle not charged, to isolate the scheduling):

{table(["configuration", "module MFU", "time", "command"], body2)}
The paper's Table 2 values are not in the text we have (only that each component adds "considerable"
utilisation). See the discussion below for what each row measures here.
""")

    # Figure 12: block size.
    blocks = [1024, 2048, 4096, 8192, 16384]
    shown12 = []
    s12 = []
    for b in blocks:
        cmd, rb = r.compare(["--dist", "lognormal", "--workers", str(mid), "--planners", "fcp",
                             "--block-size", str(b), "--reshuffle", "none"])
        shown12.append(cmd)
        s12.append(rb[0])
    facts["fig12"] = (best_block := blocks[int(np.argmax([x["mfu"] for x in s12]))])
    line_plot(os.path.join(FIGS, "fig12_block.png"), blocks, {"fcp": [x["mfu"] for x in s12]},
              "block size (tokens)", "module MFU", f"FCP, N={mid}, gpu-x")
    best = blocks[int(np.argmax([x["mfu"] for x in s12]))]
    md.append(f"""## Figure 12: block size (N = {mid}, gpu-x)

{chr(10).join(f"`{c}`  " for c in shown12)}

![Figure 12](figures/fig12_block.png)

{table(["block", "MFU", "compute imb.", "traffic imb.", "forward stages"], [[b, pct(x["mfu"]), pct(x["compute_imbalance"]), pct(x["traffic_imbalance"]), x["forward_stages"]] for b, x in zip(blocks, s12)])}
Best block size here: {best}. Paper: 4K is the sweet spot between balance (small blocks) and kernel
efficiency / traffic (large blocks).
""")

    # Figure 13: tokens per GPU.
    tpg = [8192, 16384, 32768, 65536]
    n13 = 64
    s13 = {p: [] for p in PLANNERS}
    shown13 = []
    for t in tpg:
        cmd, rt = r.compare(["--dist", "lognormal", "--workers", str(n13), "--planners", ",".join(PLANNERS),
                             "--tokens-per-worker", str(t), "--reshuffle", "none"])
        shown13.append(cmd)
        for p in PLANNERS:
            s13[p].append(one(rt, planner=p)["mfu"])
    line_plot(os.path.join(FIGS, "fig13_tokens.png"), tpg, s13, "tokens per GPU", "module MFU",
              f"N={n13}, gpu-x")
    md.append(f"""## Figure 13: tokens per GPU (N = {n13}, gpu-x)

{chr(10).join(f"`{c}`  " for c in shown13)}

![Figure 13](figures/fig13_tokens.png)

{table(["tokens/GPU"] + PLANNERS, [[t] + [pct(s13[p][i]) for p in PLANNERS] for i, t in enumerate(tpg)])}
Paper: FCP above every baseline at every size. N = {n13} (not the paper's unstated N) keeps the
script's run time down.
""")

    # Figure 14: gpu-y, MagiAttention excluded as in the paper.
    y_planners = ["fcp", "ring", "bytescale", "wlb"]
    shown_y, rows_y, shown_yt, trans_y = main_sweep(r, md, workers, "gpu-y", y_planners, "y")
    md.append("## Figure 14: gpu-y (B200-like)\n")
    figure11(md, workers, shown_y, rows_y, shown_yt, trans_y, "gpu-y", "fig14_gpuy.png",
             "module MFU, lognormal, gpu-y",
             "Paper: FCP consistently ahead, above 70% of single-GPU FA4 MFU.")

    elapsed = time.time() - started
    header = f"""# Evaluation: the paper's figures on the fcp simulator

Regenerate with `scripts/eval.py` (or `make eval` if the top-level Makefile provides it); it calls
the built `build/fcp` and took {elapsed:.0f} s for this run. Each figure lists its exact command.
Setup as in the paper (section 6.1): Llama-3-70B attention (64 query heads, 8 K/V heads, head dim
128, bf16), causal mask, lognormal lengths up to 512K (seed 0), 32K tokens per GPU, block 4K,
coalesce 16, built-in profiles `gpu-x` (H100-like) and `gpu-y` (B200-like); see docs/simulator.md
for the model. MFU = useful forward + backward FLOPs / (N x peak x simulated time).

Reshuffle: the baselines are charged none (they change the dataloader, as the paper's baselines
do), and the main FCP line is shown the same way so that the comparison isolates scheduling; the
extra line "fcp (reshuffle overlap)" is FCP with its transparent all-to-all in and out, overlapped
with local work.

"""
    with open(os.path.join(DOCS, "evaluation.md"), "w") as f:
        f.write(header + "\n".join(md) + "\n" + discussion(facts, mid))
    print(f"eval.py: wrote docs/evaluation.md and docs/figures/ in {elapsed:.0f} s", file=sys.stderr)


def stage_facts(runner, n):
    """Delta, transfer stages and the busiest sender of one stage, for the FCP
    plan and the random-order ablation of the lognormal batch at N = n."""
    lengths = os.path.join(FIGS, ".lengths.txt")
    plan_path = os.path.join(FIGS, ".plan.json")
    runner.run(["workload", "--dist", "lognormal", "--workers", str(n), "--out", lengths])
    out = {}
    for planner in ("fcp", "fcp-random-order"):
        runner.run(["plan", "--lengths", lengths, "--workers", str(n), "--planner", planner,
                    "--out", plan_path])
        with open(plan_path) as f:
            plan = json.load(f)
        received = [0] * n
        busiest_sender = 0
        for stage in plan["forward"]:
            sends = [0] * n
            for _, src, dst in stage["send"]:
                received[dst] += 1
                sends[src] += 1
            busiest_sender = max(busiest_sender, max(sends))
        out[planner] = {"delta": max(received), "stages": sum(1 for st in plan["forward"] if st["send"]),
                        "busiest_sender": busiest_sender}
    os.remove(lengths)
    os.remove(plan_path)
    return out


def discussion(facts, mid):
    rows, workers = facts["rows"], facts["workers"]
    n_max = workers[-1]
    f = {p: one(rows, workers=n_max, planner=p) for p in PLANNERS}
    f16 = {p: one(rows, workers=workers[0], planner=p) for p in PLANNERS}
    ladder, loo = facts["ablation"]
    st = facts["stages"]
    full = loo[0][2]["mfu"]
    loo_text = "; ".join(f"{label}: {pct(x['mfu'])} ({x['mfu'] / full:.2f}x of full)" for label, _, x in loo[1:])
    ladder_text = " -> ".join(pct(x["mfu"]) for _, _, x in ladder)
    behind = [n for n in workers if one(rows, workers=n, planner="fcp")["mfu"] <=
              max(one(rows, workers=n, planner=p)["mfu"] for p in PLANNERS if p != "fcp")]
    lead_text = ("FCP's MFU is above every baseline at every N" if not behind else
                 "FCP's MFU is above every baseline except at " + ", ".join(
                     f"N = {n} ({max((p for p in PLANNERS if p != 'fcp'), key=lambda p: one(rows, workers=n, planner=p)['mfu'])} ahead)"
                     for n in behind))
    wlb_pick = sum(1 for n in workers
                   if abs(one(rows, workers=n, planner="wlb")["mfu"] - one(rows, workers=n, planner="ring")["mfu"]) < 1e-12)
    return f"""## How these numbers differ from the paper's, and why

* **FCP against the baselines**: {lead_text}. **Absolute module MFU on the lognormal batch is low**
  for every planner: at N = {n_max} FCP reaches {pct(f['fcp']['mfu'])} MFU
  ({pct(f['fcp']['normalized_mfu'])} of the saturated single-GPU efficiency). No plan can reach
  90% by that measure on this batch: one GPU running each sequence unsharded, with no communication
  at all, reaches only {pct(f['fcp']['normalized_mfu'] / f['fcp']['batch_normalized_mfu'])} of the
  saturated efficiency, because most sequences are short and their kernels never saturate; FCP
  reaches {pct(f['fcp']['batch_normalized_mfu'])} of that ceiling. The paper's "above
  90%" is Figure 10's measure (equal lengths, normalised by one GPU on the same sequences), which
  FCP reproduces here ({pct(facts['fig10']['fcp'])} at N = {workers[-2]}; N = {workers[-1]} is in the
  Figure 10 section). On the long-tailed batch the simulator charges what each plan implies on the
  model cluster: kernels on the f(len) curve, 6 SMs reserved for communication, a launch per stage, and every transfer through one
  50 GB/s NIC per GPU with max-min sharing. This synthetic lognormal batch has a mean length of about
  1K tokens, so 32K tokens per GPU carry only ~15 ms of forward attention per GPU. Meanwhile a
  worker holding late pieces of the long sequences must pull all the K/V before them, which takes
  about as long. Communication, not compute, bounds every planner at large N: in FCP's plans the
  busiest receiver's in-port, since balancing sent + received bytes (the paper's traffic measure)
  leaves receives uneven (`fcp inspect` shows both). The paper's traces evidently carry more
  attention work per moved block.
* **Balance against time.** Cutting a heavy query block into pieces balances compute, but each
  piece pulls the K/V of its whole sequence, so on this network the simulated time is often lower
  with fewer pieces. The default FCP plan is the cheapest by a compute + traffic cost (the profile's
  network ratio) among the candidates within 5% imbalance (compute
  {pct(f['fcp']['compute_imbalance'])}, traffic {pct(f['fcp']['traffic_imbalance'])} at N = {n_max};
  paper: under 5%). Time mode (Figure 9's extra rows) drops the bound: it is faster at most N, by up
  to a few points, at a much higher imbalance; balance mode ignores the cost and loses MFU.
* **The runtime model and the ablation.** The simulator runs the paper's pull runtime: a receiver
  pulls K/V as soon as its stage buffer is free, and dK/dV partials go back on a stream of their
  own. The ablation at N = {mid}: components added one by one {ladder_text}; components removed
  from FCP: {loo_text}. Coalescing and pipelining matter most (fewer, longer stages and kernels).
  One batched send/receive call per stage (the grouped row, as with NCCL groups) makes a late
  receiver hold up its senders' next stage, and the delay spreads worker to worker. The
  congestion-free colouring adds little on this batch, and the plans show why. Delta is set by the
  busiest receiver: at N = {mid} one worker receives {st['fcp']['delta']} K/V blocks per pass, so
  both plans have about ceil(Delta/16) transfer stages ({st['fcp']['stages']} coloured,
  {st['fcp-random-order']['stages']} random). Random pull order also gives every receiver at most c
  blocks per stage. What it gives up is the sender bound: up to {st['fcp-random-order']['busiest_sender']}
  sends from one worker in a stage, against {st['fcp']['busiest_sender']} coloured. Those senders
  are rarely the bottleneck, because each of their receivers' in-ports is already shared by c
  incoming flows. Colouring pays off where senders are the hot spots (few owners of K/V needed by
  many); these plans avoid that by balancing traffic. The paper reports each component adding
  "considerable" utilisation; its Table 2 values are not in the text we have.
* **Ring is much worse than in the paper** (FCP/ring {f['fcp']['mfu'] / f['ring']['mfu']:.1f}x at
  N = {n_max}, {f16['fcp']['mfu'] / f16['ring']['mfu']:.1f}x at N = {workers[0]}; paper: at most
  2.21x over any baseline, all similar at 16 GPUs). Each ring step moves a worker's whole 32K-token
  K/V (128 MiB) for 1/N of its compute, so ring is communication-bound from N = 16 in this model,
  and short sequences become chunks of a few tokens.
* **WLB-like equals ByteScale-like** here: the cost model picked ring at {wlb_pick} of
  {len(workers)} sizes, since ring is the slower of the two throughout.
* **ByteScale-like** shows the compute imbalance the paper describes (up to 70% there,
  {pct(max(one(rows, workers=n, planner='bytescale')['compute_imbalance'] for n in workers))} here):
  the rings of the longest sequences carry O(L^2) work on O(L) workers. Its traffic imbalance is high
  too, since only those groups communicate.
* **MagiAttention-like is the strongest baseline** (FCP leads by
  {min(one(rows, workers=n, planner='fcp')['mfu'] / one(rows, workers=n, planner='magi')['mfu'] for n in workers):.2f}x-{max(one(rows, workers=n, planner='fcp')['mfu'] / one(rows, workers=n, planner='magi')['mfu'] for n in workers):.2f}x):
  one uncontrolled fetch stage overlapping all local work keeps the NICs busy. Its traffic
  imbalance grows with N (paper: up to 17%; here up to
  {pct(max(one(rows, workers=n, planner='magi')['traffic_imbalance'] for n in workers))}), and at
  large N its compute balance breaks too: ceil(T/8N)-token chunks of a 512K sequence are few and
  heavy, and the equal-count cap forbids evening them out.
* **The transparent reshuffle is expensive here** ("fcp (reshuffle overlap)" lines): the FCP planner
  moves most tokens away from their dataloader worker, and Q/K/V in plus O out (and dO in, dQ/dK/dV
  out) is ~72 KB per moved token, more than this batch's attention work per token can hide. A
  dataloader-affinity term in the assignment would cut it.
* **Figure 10** (every length equal to the mean, ~1K; largest N shown): FCP
  {pct(facts['fig10']['fcp'])}, ByteScale-like {pct(facts['fig10']['bytescale'])},
  MagiAttention-like {pct(facts['fig10']['magi'])}, ring {pct(facts['fig10']['ring'])} of the
  single-GPU efficiency on the same sequences (paper: FCP above 90%). A placement that keeps every
  sequence whole moves nothing and loses only the reserved SMs and launches (ByteScale-like does,
  by raising the token cap above ceil(T/N)); FCP keeps the exact cap, so it splits the sequences the
  cap forces it to split, moves only those pieces and computes each piece in one pass with its
  remote keys, which costs it about two points.
* **Figure 12**: the best block size on this batch is {facts['fig12']} tokens (the paper: 4K);
  larger blocks mean fewer stages and fewer transfers per unit of work, smaller ones better balance.
"""


if __name__ == "__main__":
    main()
