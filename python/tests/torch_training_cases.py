"""Training-stack cases of the fcp.torch tests (imported by the spawned ranks of
torch_cases.spawn): 4 gloo ranks as 2 data-parallel replicas x 2 context-parallel
ranks (init_device_mesh), each replica with its own packed batch, a stock
transformers Llama (and a Mistral-style sliding-window model) with
attn_implementation="fcp", wrapped as users wrap it (FSDP2 over the flattened
dp x cp mesh, FSDP2 over dp, DDP over the world), with activation checkpointing
(transformers' and checkpoint_wrapper) and decoder layers compiled with
fullgraph=True; against one process running each sequence with eager attention.
Also the wirings that used to give wrong gradients without a word, and the
inputs that do not fit the plan.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torch_hf_cases

# Each replica's own packed batch: 1, exact multiples of the block size (64), sequences spanning shards.
REPLICA_LENGTHS = ([1, 64, 128, 300, 37, 3, 64], [200, 5, 90, 250, 33])
SECOND_LENGTHS = ([120, 7, 310, 64], [400, 17, 60])  # a second step: other lengths, no recompile
PLAN_KW = dict(block_size=64, coalesce=2)
WRAPPERS = ("fsdp_flat", "fsdp_dp", "ddp")
CHECKPOINTS = ("none", "hf", "wrapper")


def batch(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, torch_hf_cases.VOCAB, (sum(lengths),), generator=g)


def reference(kind, step_lengths=REPLICA_LENGTHS, device="cpu", dtype=torch.float32):
    """One process, eager attention, each sequence alone: the mean over replicas of
    (sum of the replica's next-token losses / its count), and its gradients."""
    model = torch_hf_cases.make_model(kind, "eager").to(device, dtype)
    total = 0.0
    for replica, lengths in enumerate(step_lengths):
        ids = batch(lengths, replica).to(device)
        loss, off = 0.0, 0
        for n in lengths:
            if n > 1:
                logits = model(input_ids=ids[None, off:off + n],
                               position_ids=torch.arange(n, device=device)[None]).logits[0]
                loss = loss + F.cross_entropy(logits[:-1].float(), ids[off + 1:off + n], reduction="sum")
            off += n
        total = total + loss / (sum(lengths) - len(lengths))
    total = total / len(step_lengths)
    total.backward()
    return total.item(), {name: p.grad.clone() for name, p in model.named_parameters()}


def mesh_2x2():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp"))


def decoder_layers(model):
    return model.model.layers


def build(kind, wrapper, checkpoint, compiled, mesh):
    """The model as a user wires it: compiled decoder layers, checkpointing around them, then the wrapper."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel
    model = torch_hf_cases.make_model(kind, "fcp")
    model.config.use_cache = False
    if checkpoint == "hf":  # transformers 5.25: torch.utils.checkpoint, non-reentrant by default
        model.gradient_checkpointing_enable()
    elif checkpoint == "hf_reentrant":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        if compiled:  # the layer itself; checkpointing (eager) around it recomputes the compiled layer
            layer.compile(fullgraph=True, dynamic=True, backend="aot_eager")
        if checkpoint == "wrapper":
            layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    if wrapper == "ddp":
        return DistributedDataParallel(model)
    shard_mesh = mesh["dp", "cp"]._flatten("dp_cp") if wrapper == "fsdp_flat" else mesh["dp"]
    for layer in layers:
        fully_shard(layer, mesh=shard_mesh)
    return fully_shard(model, mesh=shard_mesh)


def step(model, mesh, kind, layout, step_lengths=REPLICA_LENGTHS):
    """One training step's loss and backward, as docs/torch.md shows it; returns the
    replica-mean loss (reduced over the mesh) and this rank's plan."""
    import fcp.torch as ft
    replica = mesh.get_local_rank("dp")
    lengths = step_lengths[replica]
    inner = model.module if hasattr(model, "module") else model
    plan = ft.plan(lengths, mesh=mesh, cp_dim="cp", config=inner.config, **PLAN_KW)
    ids = batch(lengths, replica)
    out = model(**ft.shard(plan, input_ids=ids, labels=ids, layout=layout))
    ft.scale_loss(out.loss, plan, model).backward()
    loss = out.loss.detach().clone()
    dist.all_reduce(loss)  # sum over cp of each rank's part, mean over dp below
    return loss.item() / mesh.size(0), plan


def gradients(model):
    grads = {}
    inner = model.module if hasattr(model, "module") else model
    for name, p in inner.named_parameters():
        g = p.grad
        if type(g).__name__ == "DTensor":
            g = g.full_tensor()
        grads[name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")] = g.detach().clone()
    return grads


def compare(ref, loss, grads):
    ref_loss, ref_grads = ref
    assert set(grads) == set(ref_grads), sorted(set(grads) ^ set(ref_grads))
    worst = max(((grads[n] - ref_grads[n]).norm() / ref_grads[n].norm().clamp_min(1e-30)).item() for n in ref_grads)
    return {"loss_rel_err": abs(loss - ref_loss) / abs(ref_loss), "worst_grad_rel_err": worst}


def train_case(kind, wrapper, checkpoint, compiled, layout, mesh, ref):
    import fcp.torch as ft
    model = build(kind, wrapper, checkpoint, compiled, mesh)
    loss, plan = step(model, mesh, kind, layout)
    if wrapper == "fsdp_dp":
        ft.reduce_gradients(model, plan)  # FSDP2 over dp leaves the sum over cp to fcp
    ft.check_gradients(model, plan)
    return compare(ref, loss, gradients(model))


# The covering set: every wrapper with every checkpointing, both layouts, compiled
# decoder layers in every wrapper; the sliding-window model under one wiring.
TRAIN_CASES = ([("llama", w, c, False, lay) for w in WRAPPERS for c in CHECKPOINTS for lay in ("plan", "dataloader")]
               + [("llama", w, c, True, lay) for w, c, lay in (("fsdp_flat", "wrapper", "plan"),
                                                             ("fsdp_dp", "hf", "dataloader"),
                                                             ("ddp", "none", "plan"),
                                                             ("ddp", "wrapper", "dataloader"))]
               + [("mistral", "fsdp_flat", "wrapper", True, "plan"), ("mistral", "ddp", "hf", False, "dataloader")]
               # torch.utils.checkpoint's reentrant form (an autograd Function re-running the layer).
               + [("llama", "fsdp_flat", "hf_reentrant", False, "plan"),
                  ("llama", "ddp", "hf_reentrant", False, "dataloader")])


def error_of(fn):
    try:
        fn()
        return None
    except (ValueError, TypeError, RuntimeError) as e:
        return str(e)


def wrong_wirings(mesh):
    """What users do wrong, each ending in one error on every rank by the end of the first step."""
    import fcp.torch as ft
    from torch.nn.parallel import DistributedDataParallel
    out = {}

    def ddp_on_dp():  # the obvious wiring: DDP over the dp group only, then an optimizer step
        model = DistributedDataParallel(torch_hf_cases.make_model("llama", "fcp"), process_group=mesh.get_group("dp"))
        model.module.config.use_cache = False
        step(model, mesh, "llama", "plan")
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    out["ddp_on_dp"] = error_of(ddp_on_dp)

    def hand_loop_without_reduce():  # no wrapper and no reduce_gradients
        model = torch_hf_cases.make_model("llama", "fcp")
        model.config.use_cache = False
        step(model, mesh, "llama", "dataloader")
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    out["hand_loop_without_reduce"] = error_of(hand_loop_without_reduce)

    def different_weights():  # cp ranks initialised with different seeds, reduced by hand
        model = torch_hf_cases.make_model("llama", "fcp")
        model.config.use_cache = False
        with torch.no_grad():
            next(model.parameters()).add_(0.01 * dist.get_rank())
        _, plan = step(model, mesh, "llama", "plan")
        ft.reduce_gradients(model, plan)
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    out["different_weights"] = error_of(different_weights)

    def raw_ddp_on_dp():  # no scale_loss at all: fcp.torch.plan's own first-step check
        ft.training._unchecked = None  # as in a fresh process (the cases above used it up)
        model = DistributedDataParallel(torch_hf_cases.make_model("llama", "fcp"), process_group=mesh.get_group("dp"))
        model.module.config.use_cache = False
        replica = mesh.get_local_rank("dp")
        plan = ft.plan(REPLICA_LENGTHS[replica], mesh=mesh, cp_dim="cp", config=model.module.config, **PLAN_KW)
        ids = batch(REPLICA_LENGTHS[replica], replica)
        model(**ft.shard(plan, input_ids=ids, labels=ids)).loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    out["raw_ddp_on_dp"] = error_of(raw_ddp_on_dp)

    def reduce_after_ddp_over_world():  # DDP already covers cp: summing again would double
        model = DistributedDataParallel(torch_hf_cases.make_model("llama", "fcp"))
        model.module.config.use_cache = False
        _, plan = step(model, mesh, "llama", "plan")
        ft.reduce_gradients(model, plan)
    out["reduce_after_ddp_over_world"] = error_of(reduce_after_ddp_over_world)

    def partial_group():  # DDP over a group holding one of two cp peers of some ranks
        g = dist.new_group([0, 1, 2])
        if dist.get_rank() == 3:
            g = dist.new_group([3])
        else:
            dist.new_group([3])
        model = DistributedDataParallel(torch_hf_cases.make_model("llama", "fcp"), process_group=g)
        step(model, mesh, "llama", "plan")
    out["partial_group"] = error_of(partial_group)
    return out


def bad_inputs(mesh):
    import fcp.torch as ft
    out = {}
    replica = mesh.get_local_rank("dp")
    lengths = REPLICA_LENGTHS[replica]
    model = torch_hf_cases.make_model("llama", "fcp")
    plan = ft.plan(lengths, mesh=mesh, cp_dim="cp", config=model.config, **PLAN_KW)
    ids = batch(lengths, replica)
    # Tokens that do not add up to the lengths (50 extra tokens never seen: a silently wrong loss before).
    out["tokens_not_lengths"] = error_of(lambda: ft.shard(plan, input_ids=torch.cat([ids, ids[:50]]), labels=ids))
    # The plan made without the shape, and one made for other heads.
    out["no_shape"] = error_of(lambda: ft.plan(lengths, mesh=mesh, cp_dim="cp", **PLAN_KW))
    other = ft.plan(lengths, mesh=mesh, cp_dim="cp", heads_q=8, heads_kv=2, head_dim=16, **PLAN_KW)
    out["wrong_heads"] = error_of(lambda: model(**ft.shard(other, input_ids=ids)))
    # An fcp.Plan for 4 workers on a cp dimension of 2.
    import fcp
    out["mesh_cp_size"] = error_of(lambda: ft.plan(fcp.plan(lengths, workers=4, heads_q=4, heads_kv=2,
                                                            head_dim=16, **PLAN_KW), mesh=mesh, cp_dim="cp"))
    out["cp_dim_name"] = error_of(lambda: ft.plan(lengths, mesh=mesh, cp_dim="context", config=model.config))
    # checkpoint_wrapper with transformers' default use_cache=True: the recompute appends to the cache again.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    cached = torch_hf_cases.make_model("llama", "fcp")
    layers = decoder_layers(cached)
    for i in range(len(layers)):
        layers[i] = checkpoint_wrapper(layers[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)

    def with_cache():
        cached(**ft.shard(plan, input_ids=ids, labels=ids)).loss.backward()
    out["checkpoint_with_cache"] = error_of(with_cache)
    out["good_after_errors"] = error_of(lambda: model(**ft.shard(plan, input_ids=ids, labels=ids)).loss.backward())
    return out


def heads_under_tp():
    """attention_shape's head arithmetic under tensor parallelism (no collectives)."""
    import fcp.torch as ft
    from transformers import LlamaConfig, MistralConfig
    c = LlamaConfig(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8)
    out = {tp: ft.attention_shape(c, tp=tp) for tp in (1, 2, 8, 16)}
    out["mistral"] = ft.attention_shape(MistralConfig(sliding_window=4096))
    out["tp3"] = error_of(lambda: ft.attention_shape(c, tp=3))
    out["tp128"] = error_of(lambda: ft.attention_shape(c, tp=128))
    return out


def recompiles(mesh):
    """A whole model compiled (fullgraph) in the plan layout: graph breaks and recompiles
    over two steps with different lengths, counted by Dynamo."""
    import fcp.torch as ft
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = torch_hf_cases.make_model("llama", "fcp")
    model.config.use_cache = False
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    frames = []
    for lengths in (REPLICA_LENGTHS, SECOND_LENGTHS):
        replica = mesh.get_local_rank("dp")
        plan = ft.plan(lengths[replica], mesh=mesh, cp_dim="cp", config=model.config, **PLAN_KW)
        ids = batch(lengths[replica], replica)
        compiled(**ft.shard(plan, input_ids=ids, labels=ids)).loss.backward()
        frames.append(counters["stats"]["unique_graphs"])
    return {"unique_graphs_after_each_step": frames, "graph_breaks": sum(counters["graph_break"].values())}


def single_rank_stack(device):
    """One rank, as scripts/torch_gpu_check.sh runs it on a GPU (float32 on CPU, bfloat16 on
    CUDA): transformers' checkpointing with the plan given (a) as fcp_plan= and (b) by the
    older `with ft.hf.batch(plan)` block, backward after the block (on CUDA, autograd runs
    the recompute on its device thread); and decoder layers compiled with fullgraph=True.
    Relative errors against eager attention per sequence on the same device."""
    import fcp.torch as ft
    from torch.distributed.device_mesh import init_device_mesh
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    mesh = init_device_mesh(device, (1, 1), mesh_dim_names=("dp", "cp"))
    lengths = REPLICA_LENGTHS[0]
    ref_loss, ref_grads = reference("llama", (lengths,), device, dtype)
    ids = batch(lengths, 0).to(device)
    out = {}
    for form in ("keyword", "with_block", "compiled"):
        model = torch_hf_cases.make_model("llama", "fcp").to(device, dtype)
        model.config.use_cache = False
        model.gradient_checkpointing_enable()
        if form == "compiled":
            for layer in decoder_layers(model):
                # Inductor on CUDA (Triton); on CPU aot_eager, which traces the same graph without
                # compiling C++ (the CPU test's time).
                layer.compile(fullgraph=True, dynamic=True, backend="inductor" if device == "cuda" else "aot_eager")
        plan = ft.plan(lengths, mesh=mesh, cp_dim="cp", config=model.config, **PLAN_KW)
        inputs = ft.shard(plan, input_ids=ids, labels=ids)
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        if form == "with_block":
            inputs.pop("fcp_plan"), inputs.pop("fcp_layout")
            with ft.hf.batch(plan, layout="plan"):
                loss = model(**inputs).loss
        else:
            loss = model(**inputs).loss
        ft.scale_loss(loss, plan, model).backward()  # outside any block: the recompute finds the plan
        grads = {n: p.grad.float() for n, p in model.named_parameters()}
        out[form] = compare((ref_loss, {n: g.float() for n, g in ref_grads.items()}), loss.item(), grads)
    return out


def run(what, rank):
    if what.startswith("single_rank_stack"):
        import fcp.torch as ft
        ft.hf.register()
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
        return single_rank_stack("cuda" if what.endswith("_cuda") else "cpu")

    import fcp.torch as ft
    ft.hf.register()
    # transformers' hub-kernel wrapper sets a context variable in every attention forward, which
    # Dynamo refuses inside a checkpointed layer unless told not to replay it in backward
    # (docs/torch.md, "torch.compile"); nothing of fcp's.
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    mesh = mesh_2x2()
    out = {"heads_under_tp": heads_under_tp()}
    refs = {kind: reference(kind) for kind in ("llama", "mistral")}
    for case in TRAIN_CASES:
        out[case] = train_case(*case, mesh, refs[case[0]])
    out["wrong_wirings"] = wrong_wirings(mesh)
    out["bad_inputs"] = bad_inputs(mesh)
    out["recompiles"] = recompiles(mesh)
    return out

