"""Multi-rank cases of the fcp.torch tests, run under torch.multiprocessing.spawn
with gloo on CPU (this module is imported by the spawned ranks, so it holds
no tests itself). Every case runs on every rank; results are reduced across
ranks so rank 0 reports one number per case.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import traceback

import torch
import torch.distributed as dist


def reference_attention(lengths, q, k, v, mask, window, scale):
    """Dense float64 attention of each sequence on its own (GQA by repeating K/V heads)."""
    outs, off = [], 0
    group = q.shape[1] // k.shape[1]
    for n in lengths:
        qs, ks, vs = q[off:off + n], k[off:off + n], v[off:off + n]
        ks, vs = ks.repeat_interleave(group, dim=1), vs.repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        i = torch.arange(n).unsqueeze(1)
        j = torch.arange(n).unsqueeze(0)
        if mask == "full":
            allowed = torch.ones(n, n, dtype=torch.bool)
        elif mask == "causal":
            allowed = j <= i
        else:
            allowed = (j <= i) & (i - j < window)
        s = s.masked_fill(~allowed, -math.inf)
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), vs))
        off += n
    return torch.cat(outs)


def init(rank, world, port, backend="gloo"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if "nccl" in backend:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)


def global_rel_err(x, ref):
    """||x - ref|| / ||ref|| over all ranks' shards."""
    x, ref = x.double().cpu(), ref.double().cpu()
    acc = torch.tensor([((x - ref) ** 2).sum().item(), (ref ** 2).sum().item()], dtype=torch.float64)
    dist.all_reduce(acc)
    return math.sqrt(acc[0].item() / max(acc[1].item(), 1e-300))


ATTENTION_CASES = []
for planner in ("fcp", "ring"):
    for mask in ("causal", "full", "sliding_window"):
        for coalesce in (1, 16):
            ATTENTION_CASES.append((planner, mask, coalesce, "float32"))
# bfloat16 (read in place by the kernel, float32 accumulation): every mask, GQA, both planners and coalesces.
ATTENTION_CASES += [("fcp", "causal", 16, "bfloat16"), ("ring", "sliding_window", 1, "bfloat16"),
                    ("fcp", "full", 1, "bfloat16"), ("fcp", "sliding_window", 16, "bfloat16"),
                    ("ring", "causal", 1, "bfloat16")]
# An FCP plan with K/V and partials relayed through nodes of two ranks (docs/planner.md, step 11).
ATTENTION_CASES += [("fcp-relays", "causal", 1, "float32")]
# On CUDA: flash attention takes 16-bit inputs only (one rank: NCCL cannot pair ranks on one GPU).
CUDA_ATTENTION_CASES = [(planner, mask, coalesce, "bfloat16") for planner in ("fcp", "ring")
                        for mask in ("causal", "full", "sliding_window") for coalesce in (1, 16)]
LENGTHS = [1, 64, 200, 37, 128, 3, 400, 2]  # 835 tokens: 1, exact multiples of 64, one spanning all shards


def run_attention_case(case, rank, device="cpu"):
    import fcp.torch as ft
    planner, mask, coalesce, dtype_name = case
    dtype = getattr(torch, dtype_name)
    hq, hkv, d, window = 4, 2, 16, 50
    kw = dict(block_size=64, coalesce=coalesce, mask=mask, heads_q=hq, heads_kv=hkv, head_dim=d, planner=planner)
    if mask == "sliding_window":
        kw["window"] = window
    if planner == "fcp-relays":
        import fcp
        kw.update(planner="fcp", node_workers=2, node_relays=True)
        made = fcp.plan(LENGTHS, dist.get_world_size(), **kw)
        owner = made.block_owner
        kv = sum(int(s != owner[j]) for t in range(made.num_forward_stages) for j, s, _ in made.forward_send(t))
        dkv = sum(int(d != owner[j]) for t in range(made.num_backward_stages)
                  for j, _, d in made.backward_send_dkv(t))
        assert kv > 0 and dkv > 0, f"no relays in the plan (K/V {kv}, dK/dV {dkv})"
        plan = ft.plan(made)
    else:
        plan = ft.plan(LENGTHS, **kw)
    total = sum(LENGTHS)
    cases = ATTENTION_CASES + CUDA_ATTENTION_CASES
    g = torch.Generator().manual_seed(cases.index(case))  # same on every rank
    q = torch.randn(total, hq, d, generator=g).to(dtype)
    k = torch.randn(total, hkv, d, generator=g).to(dtype)
    v = torch.randn(total, hkv, d, generator=g).to(dtype)
    do = torch.randn(total, hq, d, generator=g).to(dtype)
    scale = 1 / math.sqrt(d)
    ref = [x.double().requires_grad_() for x in (q, k, v)]
    o_ref = reference_attention(LENGTHS, *ref, mask, window, scale)
    o_ref.backward(do.double())
    lo, hi = plan.local_range
    results = {}
    outputs = {}
    for layout in ("dataloader", "plan"):
        mine = [x[lo:hi].to(device).clone().requires_grad_() for x in (q, k, v)]
        if layout == "dataloader":
            o = ft.attention(*mine, plan)
        else:
            qp, kp, vp = (ft.dispatch(x, plan) for x in mine)
            o = ft.undispatch(ft.attention(qp, kp, vp, plan, layout="plan"), plan)
        o.backward(do[lo:hi].to(device))
        outputs[layout] = [o.detach()] + [x.grad for x in mine]
        results[layout] = {
            "o": global_rel_err(o.detach(), o_ref.detach()[lo:hi]),
            "dq": global_rel_err(mine[0].grad, ref[0].grad[lo:hi]),
            "dk": global_rel_err(mine[1].grad, ref[1].grad[lo:hi]),
            "dv": global_rel_err(mine[2].grad, ref[2].grad[lo:hi]),
        }
    # o, dq, dk, dv of the two layouts (a CPU tensor: the CUDA cases' group is cpu:gloo,cuda:nccl)
    diff = torch.tensor([max((a.float() - b.float()).abs().max().item()
                             for a, b in zip(outputs["dataloader"], outputs["plan"]))])
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    results["layouts_max_abs_diff"] = diff.item()
    return results


def bad_input_cases(rank):
    """Each case's error message on this rank (None: no error)."""
    import fcp.torch as ft
    out = {}
    kw = dict(block_size=64, coalesce=2, heads_q=4, heads_kv=2, head_dim=16)

    def attempt(name, fn):
        try:
            fn()
            out[name] = None
        except (ValueError, TypeError) as e:
            out[name] = f"{type(e).__name__}: {e}"

    plan = ft.plan(LENGTHS, **kw)
    lo, hi = plan.local_range
    n = hi - lo

    def tensors(dtype=torch.float32):
        return (torch.randn(n, 4, 16, dtype=dtype), torch.randn(n, 2, 16, dtype=dtype),
                torch.randn(n, 2, 16, dtype=dtype))

    def wrong_shape():
        q, k, v = tensors()
        if rank == 1:
            q = torch.randn(n + 1, 4, 16)
        ft.attention(q, k, v, plan)
    attempt("wrong_shape_on_rank_1", wrong_shape)

    def wrong_heads():
        q, k, v = tensors()
        ft.attention(torch.randn(n, 8, 16), k, v, plan)
    attempt("wrong_heads", wrong_heads)
    attempt("workers_not_world", lambda: ft.plan(LENGTHS, workers=3, **kw))
    attempt("lengths_disagree", lambda: ft.plan(LENGTHS if rank != 2 else LENGTHS[:-1] + [3], **kw))

    def non_contiguous():
        q, k, v = tensors()
        if rank == 3:
            k = torch.randn(2, n, 16).transpose(0, 1)
        ft.attention(q, k, v, plan)
    attempt("non_contiguous_on_rank_3", non_contiguous)

    def wrong_dtype():
        q, k, v = tensors(torch.float64)
        ft.attention(q, k, v, plan)
    attempt("wrong_dtype", wrong_dtype)

    def wrong_layout_rows():
        q, k, v = tensors()
        ft.attention(q, k, v, plan, layout="plan")
    # Collective on every rank: ranks whose shard happens to equal their plan rows
    # get the other ranks' error (this plan has ranks where they differ).
    attempt("dataloader_rows_in_plan_layout", wrong_layout_rows)
    attempt("dispatch_wrong_rows", lambda: ft.dispatch(torch.randn(n + 2, 3), plan))

    def different_plan():
        # Not through fcp.torch.plan (which compares the batch): rank 2 plans another coalesce.
        import fcp
        other = ft.Plan(fcp.plan(LENGTHS, workers=4, **dict(kw, coalesce=1 if rank == 2 else 2)))
        ft.attention(*tensors(), other)
    attempt("different_plan_on_rank_2", different_plan)
    # After every failure above, the group still works: one good call.
    q, k, v = tensors()
    o = ft.attention(q, k, v, plan)
    out["good_call_after_errors"] = None if o.shape == q.shape else "bad shape"
    return out


def float32_on_cuda_error():
    """The error of float32 CUDA tensors (flash attention takes 16-bit inputs)."""
    import fcp.torch as ft
    plan = ft.plan(LENGTHS, block_size=64, heads_q=4, heads_kv=2, head_dim=16)
    n = plan.rows("dataloader")
    try:
        ft.attention(*(torch.randn(n, h, 16, device="cuda") for h in (4, 2, 2)), plan)
    except ValueError as e:
        return str(e)
    return None


def trace_case(rank, path):
    """One forward + backward under fcp.torch.trace (rank 0 writes `path`)."""
    import fcp.torch as ft
    lengths = [2000, 300, 1, 700, 64, 1031]  # 4096 tokens; the 2000-token sequence spans two shards
    plan = ft.plan(lengths, block_size=128, coalesce=2, heads_q=8, heads_kv=2, head_dim=64)
    lo, hi = plan.local_range
    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(hi - lo, h, 64, generator=g).requires_grad_() for h in (8, 2, 2))
    with ft.trace(path):
        ft.attention(q, k, v, plan).backward(torch.randn(hi - lo, 8, 64, generator=g))
    return {"path": path, "forward_stages": plan.num_forward_stages}


def rules_case(rank, path):
    """The backward twice on one FCP plan (the second under fcp.torch.trace): whether
    the gradients are bitwise identical on this rank (partials summed in posting order)."""
    import fcp.torch as ft
    lengths = [2000, 300, 1, 700, 64, 1031]
    plan = ft.plan(lengths, block_size=128, coalesce=2, heads_q=8, heads_kv=2, head_dim=64)
    lo, hi = plan.local_range
    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(hi - lo, h, 64, generator=g) for h in (8, 2, 2))
    do = torch.randn(hi - lo, 8, 64, generator=g)
    grads = []
    for run in range(2):
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        with ft.trace(path) if run == 1 else contextlib.nullcontext():
            ft.attention(*x, plan).backward(do)
        grads.append([t.grad for t in x])
    same = all(torch.equal(a, b) for a, b in zip(*grads))
    return {"path": path, "identical": same}


def reshuffle_rule_case(rank, path):
    """The input reshuffle's rule (docs/runtime.md, step 1) on 4 gloo ranks: rank 0
    holds back its last Q|K|V reshuffle message (block B for rank D) for 1 s.
    Returns, per plan: whether this rank's o, dq, dk, dv are bitwise those of the
    same run without the delay and, on D, the stage-0 calls that read neither B
    nor only D's own rows (the trace's "fwd s0 qX kvY" names) and, from the
    delayed run's trace (written to path + plan name), B and D."""
    import time
    import fcp.torch as ft
    out = {}
    lengths = [2000, 300, 1, 700, 64, 1031]  # 4096 tokens; the 2000-token sequence spans two shards
    for name, kw in (("fcp", dict(coalesce=2)), ("magi", dict(planner="magi", mask="full", coalesce=2))):
        plan = ft.plan(lengths, block_size=128, heads_q=8, heads_kv=2, head_dim=64, **kw)
        late = plan._pieces["reshuffle_in", "send"][-1] if rank == 0 else None
        box = [late[0], late[2]] if late is not None else [0, 0]
        late_t = torch.tensor(box, dtype=torch.int64)
        dist.broadcast(late_t, 0)
        block, dst = late_t.tolist()
        lo, hi = plan.local_range
        g = torch.Generator().manual_seed(rank)
        q, k, v = (torch.randn(hi - lo, h, 64, generator=g) for h in (8, 2, 2))
        do = torch.randn(hi - lo, 8, 64, generator=g)
        runs = []
        for delayed in (False, True):
            x = [t.clone().requires_grad_() for t in (q, k, v)]
            if delayed and rank == 0:
                ft._before_reshuffle_send = lambda b, d: time.sleep(1.0) if (b, d) == (block, dst) else None
            try:
                with ft.trace(f"{path}.{name}") if delayed else contextlib.nullcontext():
                    o = ft.attention(*x, plan)
                    o.backward(do)
            finally:
                ft._before_reshuffle_send = None
            runs.append([o.detach()] + [t.grad for t in x])
        result = {"identical": all(torch.equal(a, b) for a, b in zip(*runs)), "block": block, "dst": dst,
                  "path": f"{path}.{name}"}
        # The counters (docs/torch.md): the dataloader layout's reshuffle, of it the blocked part; none in
        # the plan layout (dispatch is the caller's, not attention's).
        ft.reset_stats()
        ft.attention(*(t.clone().requires_grad_() for t in (q, k, v)), plan).backward(do)
        dl = ft.stats()
        ft.reset_stats()
        xp = [ft.dispatch(t.clone(), plan).requires_grad_() for t in (q, k, v)]
        ft.attention(*xp, plan, layout="plan").backward(ft.dispatch(do, plan))
        pl = ft.stats()
        result["stats"] = {"dataloader": dl, "plan": pl}
        if rank == dst:
            remote = {p[0] for p in plan._pieces["reshuffle_in", "recv"]}
            calls = []
            for c in plan._calls["forward"][0]:
                needs = {c[1]} if c[5] else {c[1], c[2]}
                if block not in needs and needs & remote:
                    calls.append(f"fwd s0 q{c[1]} kv{c[2]}")
            result["calls"] = calls
        out[name] = result
    return out


def worker(rank, world, port, what, result_path):
    init(rank, world, port, "cpu:gloo,cuda:nccl" if what.endswith("_cuda") else "gloo")
    try:
        if what == "attention":
            result = {case: run_attention_case(case, rank) for case in ATTENTION_CASES}
        elif what == "attention_cuda":
            result = {case: run_attention_case(case, rank, "cuda") for case in CUDA_ATTENTION_CASES}
        elif what == "float32_cuda":
            result = float32_on_cuda_error()
        elif what == "bad_input":
            result = bad_input_cases(rank)
        elif what == "trace":
            result = trace_case(rank, f"{result_path}.trace.json")
        elif what == "rules":
            result = rules_case(rank, f"{result_path}.trace.json")
        elif what == "reshuffle_rule":
            result = reshuffle_rule_case(rank, f"{result_path}.trace.json")
        elif what in ("training", "single_rank_stack", "single_rank_stack_cuda"):
            import torch_training_cases
            result = torch_training_cases.run(what, rank)
        else:
            import torch_hf_cases
            result = torch_hf_cases.run(what, rank)
        payload = {"ok": result}
    except Exception:  # reported to the test, which fails with it
        payload = {"error": traceback.format_exc()}
    torch.save(payload, f"{result_path}.{rank}")
    dist.destroy_process_group()
    # The rank's result is saved and its group gone: leave without interpreter
    # finalization, where gloo's worker threads can still hold tensors and abort
    # the process ("terminate called without an active exception", SIGABRT; seen
    # once in CI on the Hugging Face cases; pytorch/pytorch#190489, #179291), which
    # spawn() would report as a failed rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(what, world=4, timeout_s=300):
    """Runs `what` on `world` ranks; returns each rank's payload. Fails on a hang."""
    import socket
    import tempfile
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="fcp-torch-")
    path = os.path.join(tmp, "result")
    ctx = mp.start_processes(worker, args=(world, port, what, path), nprocs=world, join=False, start_method="spawn")
    import time
    deadline = time.time() + timeout_s
    while not ctx.join(timeout=1):
        if time.time() > deadline:
            for p in ctx.processes:
                p.kill()
            raise TimeoutError(f"{what}: ranks still running after {timeout_s} s (a hang)")
    return [torch.load(f"{path}.{r}") for r in range(world)]


def spawn_ok(what, world=4, timeout_s=300):
    """spawn(), then fails naming the first rank that raised; returns each rank's result."""
    payloads = spawn(what, world=world, timeout_s=timeout_s)
    for r, p in enumerate(payloads):
        assert "ok" in p, f"rank {r} failed:\n{p.get('error')}"
    return [p["ok"] for p in payloads]
