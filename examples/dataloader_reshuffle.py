#!/usr/bin/env python3
"""How a training loop uses an fcp plan to place tokens (plain numpy).

A context-parallel group of N workers trains on packed batches. The
dataloader hands worker r a contiguous slice of the batch's tokens (the
"dataloader layout"); FCP's plan puts every token on some worker in blocks
(the "plan layout"). Each step:

  1. the dataloader samples a batch and calls fcp.plan() on its lengths;
  2. reshuffle in: one all-to-all moves each token from its dataloader
     worker to the worker the plan gives it, in the plan's order;
  3. the model runs on the plan layout (attention follows the plan's stages;
     here a stand-in elementwise "model");
  4. reshuffle out: one all-to-all moves the outputs back, so the loss and
     everything else in the training framework sees the dataloader layout.

The N workers are simulated in one process, and `all_to_all` stands in for
torch.distributed.all_to_all_single (same split-size convention), so the
code is what each rank would run. Each rank needs only its own
plan.token_permutation(rank) and plan.token_placement(rank).

Run: python examples/dataloader_reshuffle.py [--workers 8] [--steps 3]
"""
import argparse
import time

import numpy as np

import fcp


def all_to_all(send, send_counts):
    """send[r]: rank r's buffer ordered by destination; send_counts[r][d]: how
    many go to d. Returns recv[d]: the chunks from ranks 0..N-1, concatenated."""
    n = len(send)
    chunks = [np.split(send[r], np.cumsum(send_counts[r])[:-1]) for r in range(n)]
    return [np.concatenate([chunks[r][d] for r in range(n)]) for d in range(n)]


class Reshuffle:
    """The index arithmetic one rank needs for both all-to-alls of a step,
    computed once per plan (it is the same for Q, K, V, O and their gradients)."""

    def __init__(self, plan, rank):
        n = plan.workers
        # Sending (dataloader -> plan): my dataloader tokens, grouped by the
        # worker that owns them under the plan; within a group in global order.
        owner, _ = plan.token_placement(rank)
        self.send_order = np.argsort(owner, kind="stable")
        self.send_counts = np.bincount(owner, minlength=n)
        # Receiving: chunks arrive by source rank, each in global order; the
        # dataloader layout is contiguous, so the buffer is in global order.
        # Put it into plan order: element i of the plan order is the
        # rank(perm[i])-th smallest of my tokens.
        perm = plan.token_permutation(rank)
        self.from_received = np.argsort(np.argsort(perm, kind="stable"), kind="stable")
        # Outputs go back the same way reversed.
        self.back_order = np.argsort(perm, kind="stable")
        loader = plan.dataloader_offsets
        home = np.searchsorted(loader, perm[self.back_order], side="right") - 1
        self.back_counts = np.bincount(home, minlength=n)
        # Sequence id and position of each planned token: what RoPE and the
        # varlen attention kernel need on the plan layout.
        seq_start = np.concatenate([[0], np.cumsum(plan.sequences)])
        self.seq = np.searchsorted(seq_start, perm, side="right") - 1
        self.position = perm - seq_start[self.seq]


def reshuffle_in(ranks, local):
    """local[r]: rank r's dataloader tokens -> each rank's tokens in plan order."""
    received = all_to_all([x[s.send_order] for s, x in zip(ranks, local)],
                          [s.send_counts for s in ranks])
    return [buf[s.from_received] for s, buf in zip(ranks, received)]


def reshuffle_out(ranks, planned):
    """planned[w]: rank w's outputs in plan order -> each rank's dataloader layout."""
    received = all_to_all([y[s.back_order] for s, y in zip(ranks, planned)],
                          [s.back_counts for s in ranks])
    out = []
    for s, buf in zip(ranks, received):
        local = np.empty_like(buf)
        local[s.send_order] = buf  # arrives grouped by plan owner, as it was sent
        out.append(local)
    return out


def model(tokens, positions):
    """Stand-in for the transformer layers: any per-token function will do."""
    return tokens * 1000 + positions


def train_step(step, workers, vocab=32000):
    rng = np.random.default_rng(step)
    lengths = fcp.workload("lognormal", workers=workers, tokens_per_worker=32768,
                           max_len=131072, seed=step)
    start = time.perf_counter()
    plan = fcp.plan(lengths, workers=workers)  # once per batch, in the dataloader
    plan_ms = (time.perf_counter() - start) * 1e3

    batch = rng.integers(0, vocab, size=plan.total_tokens)  # packed token ids
    loader = plan.dataloader_offsets
    local = [batch[loader[r]:loader[r + 1]] for r in range(workers)]

    ranks = [Reshuffle(plan, r) for r in range(workers)]
    planned = reshuffle_in(ranks, local)
    for r in range(workers):  # each rank holds exactly its blocks' tokens
        assert np.array_equal(planned[r], batch[plan.token_permutation(r)])
    outputs = [model(x, s.position) for s, x in zip(ranks, planned)]
    back = reshuffle_out(ranks, outputs)

    # The framework sees the outputs in its own layout, as if no CP happened.
    seq_start = np.concatenate([[0], np.cumsum(lengths)])
    global_position = np.arange(plan.total_tokens) - np.repeat(seq_start[:-1], lengths)
    expected = model(batch, global_position)
    for r in range(workers):
        assert np.array_equal(back[r], expected[loader[r]:loader[r + 1]])
    m = plan.metrics()
    print(f"step {step}: {len(lengths)} sequences, {plan.total_tokens} tokens, {plan.num_blocks} "
          f"blocks, planned in {plan_ms:.1f} ms; {m['reshuffle_tokens']} tokens "
          f"({100 * m['reshuffle_tokens'] / plan.total_tokens:.1f}%) change worker; "
          f"compute imbalance {100 * m['compute_imbalance']:.2f}%, "
          f"{m['forward_stages']} forward stages: outputs back in place")
    return plan


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    for step in range(args.steps):
        plan = train_step(step, args.workers)
    print()
    print(plan.summary())


if __name__ == "__main__":
    main()
