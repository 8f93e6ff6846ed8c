"""Ranks of several pipeline stages (vLLM's CPU build cannot run pipeline parallelism, so this
runs the comparison itself over a real gloo group, one process per rank): ranks of one stage
must plan alike, each stage plans its own layers, and every rank gets the whole model's
fingerprint, the one mixboard's registry gives the whole model planned at once."""

import multiprocessing as mp
import socket


SPEC = dict(num_heads=4, num_kv_heads=2, head_size=32, dtype="float32")
LAYERS = [f"model.layers.{i}.self_attn.attn" for i in range(4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, stages, layers, rules, out):
    import torch.distributed as dist

    from mixboard import AttentionSpec, get_registry
    from mixboard.environment import for_device
    from mixboard_vllm import compat, ranks
    from mixboard_vllm.errors import StartupError

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    # vLLM's parallel state is not initialised here: its stage and group come from the test
    compat.pipeline_stage = lambda: stages[rank]
    compat.world_cpu_group = lambda: dist.group.WORLD
    spec = AttentionSpec(**SPEC)
    plan = get_registry().plan([(n, "attention", spec) for n in layers[rank]], for_device("cpu"), rules[rank])
    try:
        out.put((rank, "ok", ranks.check_same_plan(rank, world, plan), plan.fingerprint))
    except StartupError as exc:
        out.put((rank, "error", str(exc), plan.fingerprint))
    dist.destroy_process_group()


def run_ranks(stages, layers, rules):
    ctx = mp.get_context("spawn")
    out, port, world = ctx.Queue(), _free_port(), len(stages)
    procs = [ctx.Process(target=_rank, args=(r, world, port, stages, layers, rules, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, status, value, fp = out.get(timeout=120)
        results[rank] = (status, value, fp)
    for p in procs:
        p.join(timeout=60)
    return results


def whole_model_fingerprint() -> str:
    from mixboard import AttentionSpec, get_registry
    from mixboard.environment import for_device

    spec = AttentionSpec(**SPEC)
    return get_registry().plan([(n, "attention", spec) for n in LAYERS], for_device("cpu")).fingerprint


def test_two_stages_agree_on_the_whole_models_fingerprint():
    res = run_ranks([0, 1], [LAYERS[:2], LAYERS[2:]], [None, None])
    assert [s for s, _, _ in res.values()] == ["ok", "ok"], res
    whole = whole_model_fingerprint()
    assert res[0][1] == res[1][1] == whole
    assert res[0][2] != res[1][2] != whole  # each stage's own part differs from the whole


def test_ranks_of_one_stage_that_plan_differently_stop_start_up():
    stages, layers = [0, 1, 1], [LAYERS[:2], LAYERS[2:], LAYERS[2:]]
    res = run_ranks(stages, layers, [None, None, "attention=sdpa"])
    assert all(s == "error" for s, _, _ in res.values()), res
    fp1, fp2 = res[1][2], res[2][2]
    for _, msg, _ in res.values():
        assert msg.startswith(f"mixboard-vllm: ranks planned the model differently: rank 1 fingerprint {fp1}, "
                              f"rank 2 fingerprint {fp2} (model.layers.2.self_attn.attn: sdpa_cpu vs sdpa"), msg
