"""Random valid plans, made in Python independently of any planner.

Each sequence is cut into random pieces, the pieces are shuffled into blocks
of 1-3 segments and the blocks are given to random workers. Stages are the
simplest valid schedule: forward stage 0 sends every remote K/V block its
users need and computes the local pairs, stage 1 the remote ones; backward
the same, then stage 2 returns each partial dK/dV to its owner. Required
pairs come from the mask's definition on token ranges.
"""
import json

import numpy as np


def _attends(mask, window, q, k):
    """Some token of segment q attends some token of segment k (same sequence)."""
    (qs, ql), (ks, kl) = q, k
    qe, ke = qs + ql, ks + kl
    if mask == "full":
        return True
    if mask == "causal":
        return ks <= qe - 1
    return ks <= qe - 1 and ke - 1 > qs - window  # keys in (q - W, q] for some q


def random_plan(rng, mask="causal", window=3):
    workers = int(rng.integers(1, 6))
    sequences = [int(x) for x in rng.integers(1, 31, size=int(rng.integers(1, 7)))]
    pieces = []
    for s, length in enumerate(sequences):
        start = 0
        while start < length:
            n = min(length - start, int(rng.integers(1, 8)))
            pieces.append([s, start, n])
            start += n
    rng.shuffle(pieces)
    blocks = []
    i = 0
    while i < len(pieces):
        take = int(rng.integers(1, 4))
        blocks.append({"worker": int(rng.integers(0, workers)), "segments": pieces[i:i + take]})
        i += take
    owner = [b["worker"] for b in blocks]
    tokens = np.zeros(workers, dtype=np.int64)
    for b in blocks:
        tokens[b["worker"]] += sum(seg[2] for seg in b["segments"])

    required = []
    for qi, qb in enumerate(blocks):
        for ki, kb in enumerate(blocks):
            if any(q[0] == k[0] and _attends(mask, window, q[1:], k[1:])
                   for q in qb["segments"] for k in kb["segments"]):
                required.append([qi, ki])
    local = [p for p in required if owner[p[0]] == owner[p[1]]]
    remote = [p for p in required if owner[p[0]] != owner[p[1]]]
    needed = sorted({(k, owner[q]) for q, k in remote})  # (kv block, user)
    sends = [[k, owner[k], w] for k, w in needed]
    returns = [[k, w, owner[k]] for k, w in needed]
    degree = np.zeros((2, workers), dtype=np.int64)
    for _, src, dst in sends:
        degree[0, src] += 1
        degree[1, dst] += 1
    plan = {
        "format": "fcp-plan", "version": 1, "planner": "random", "workers": workers,
        "mask": {"kind": mask, **({"window": window} if mask == "sliding_window" else {})},
        "attention": {"heads_q": 4, "heads_kv": 2, "head_dim": 8, "dtype_bytes": 2},
        "block_size": 7, "coalesce": max(1, int(degree.max())), "token_cap": int(tokens.max()),
        "sequences": sequences, "blocks": blocks,
        "forward": [{"send": sends, "compute": local}, {"send": [], "compute": remote}],
        "backward": [{"send_kv": sends, "send_dkv": [], "compute": local},
                     {"send_kv": [], "send_dkv": [], "compute": remote},
                     {"send_kv": [], "send_dkv": returns, "compute": []}],
    }
    return json.dumps(plan), plan


def reference_permutation(plan, worker):
    """Global token ids of `worker` in plan order, by direct enumeration."""
    offsets = np.concatenate([[0], np.cumsum(plan["sequences"])])
    out = []
    for b in plan["blocks"]:
        if b["worker"] == worker:
            for seq, start, length in b["segments"]:
                out.extend(range(offsets[seq] + start, offsets[seq] + start + length))
    return np.array(out, dtype=np.int64)
