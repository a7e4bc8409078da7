"""Chapter 10: multi-GPU what-if: tensor parallelism, SIMULATED with the roofline cost model.

Nothing here runs on several GPUs. The numbers come from inferlab.sim (gpus, costmodel): datasheet
bandwidths and FLOP/s, the model's published shape, Megatron-style tensor parallelism (each
layer's weights and KV heads split over ``tp`` GPUs, two all-reduces of the activations per
layer). What it shows is arithmetic, not measurement: splitting a model frees memory on each GPU
for KV cache and divides the per-step reads, but adds communication on every layer, so decode
does not get ``tp`` times faster.
"""
from __future__ import annotations

from inferlab.core.shapes import model_shape
from inferlab.sim.costmodel import allreduce_time, step_time, tensor_parallel
from inferlab.sim.gpus import GB
from inferlab.sim.profiles import get_gpu

from .. import measure_cache, palette
from ..verdicts import (FAILS, HOLDS, LABS_OWN, MEGATRON, PROJECTION, UNMEASURABLE, Claim,
                        Verdict, x)

TITLE = "Multi-GPU what-if: tensor parallelism (simulated)"
CLAIM = ("Tensor parallelism splits weights and KV cache across GPUs, so a model too big for one "
         "GPU fits and each GPU holds more KV; but every layer adds all-reduce traffic, so "
         "per-token latency improves less than the number of GPUs.")

SIMULATED = "simulated (roofline cost model, not measured)"


def plan(gpu_name: str, model: str, tps=(1, 2, 4, 8), batch: int = 32, context: int = 2048,
         dtype_bytes: int = 2) -> list[dict]:
    """Per tp: memory per GPU, KV capacity, and one decode step's time split into parts."""
    gpu, shape = get_gpu(gpu_name), model_shape(model)
    chunks = [(1, context)] * batch                       # one decode step of the batch
    rows = []
    for tp in tps:
        p = tensor_parallel(gpu, shape, tp, dtype_bytes)
        total = step_time(gpu, shape, chunks, dtype_bytes, tp)
        comm = 2 * shape.num_layers * allreduce_time(gpu, batch * shape.hidden_size * dtype_bytes,
                                                     tp)
        rows.append({"tp": tp, "weights_gb": p.weight_bytes_per_gpu / GB,
                     "kv_gb": p.kv_bytes_per_token_per_gpu * batch * context / GB,
                     "gpu_gb": gpu.memory_bytes / GB, "fits": p.kv_tokens_capacity > 0,
                     "kv_tokens_capacity": p.kv_tokens_capacity,
                     "step_ms": total * 1e3, "comm_ms": comm * 1e3,
                     "rest_ms": (total - comm) * 1e3})
    return rows


@measure_cache.shared
def measure(smoke: bool = False, gpu: str = "H100", models=("llama-3-8b", "llama-3-70b"),
            batch: int = 32, context: int = 2048) -> dict:
    # The cost model is cheap, so smoke and full are the same computation.
    return {"gpu": gpu, "batch": batch, "context": context, "clock": f"{gpu} {SIMULATED}",
            "models": {m: plan(gpu, m, batch=batch, context=context) for m in models}}


def figure(data: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import _kit
    models = list(data["models"])
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.1, subplot_titles=(
        "memory per GPU", "one decode step", "KV tokens that fit"))
    for i, m in enumerate(models):
        rows = data["models"][m]
        # two-level axis: model, then tp; a configuration whose weights + this batch's KV
        # exceed the GPU cannot serve it, marked with a cross
        short = m.replace("llama-3-", "").upper()
        x = [[short] * len(rows), [f"tp{r['tp']}" for r in rows]]
        too_big = ["✗" if r["weights_gb"] + r["kv_gb"] > r["gpu_gb"] else "" for r in rows]
        fig.add_trace(go.Bar(x=x, y=[r["kv_gb"] for r in rows], name="KV cache",
                             marker_color=palette.CACHE["used"], showlegend=i == 0,
                             legendgroup="kv"),
                      row=1, col=1)
        # the cross on top of the stack (weights are drawn over the KV cache)
        fig.add_trace(go.Bar(x=x, y=[r["weights_gb"] for r in rows], name="weights",
                             marker_color=palette.PART["weights"], showlegend=i == 0,
                             text=too_big, textposition="outside", cliponaxis=False,
                             textfont=dict(size=14), legendgroup="w"),
                      row=1, col=1)
        # not the weights' grey: the light band, edged, so the legend keys differ
        fig.add_trace(go.Bar(x=x, y=[r["rest_ms"] for r in rows], name="compute / HBM reads",
                             marker=dict(color=palette.SERIES["band"],
                                         line=dict(color=palette.MUTED, width=1)),
                             showlegend=i == 0, legendgroup="r"),
                      row=1, col=2)
        fig.add_trace(go.Bar(x=x, y=[r["comm_ms"] for r in rows], name="all-reduce",
                             marker_color=palette.SERIES["main"], showlegend=i == 0,
                             legendgroup="c"),
                      row=1, col=2)
        fig.add_trace(go.Bar(x=x, y=[r["kv_tokens_capacity"] / 1e6 for r in rows],
                             showlegend=False, marker_color=palette.CACHE["used"]), row=1, col=3)
    gpu_gb = data["models"][models[0]][0]["gpu_gb"]
    fig.add_hline(y=gpu_gb, line=dict(dash="dot", color=palette.MUTED), row=1, col=1,
                  annotation_text=f"{data['gpu']}: {gpu_gb:.0f} GB<br>✗ does not fit",
                  annotation_position="top left", annotation_align="left")
    fig.update_layout(barmode="stack", height=480)
    fig.update_xaxes(tickangle=0)
    fig.update_yaxes(title_text=f"GB (batch {data['batch']} × {data['context']:,} tokens)",
                     row=1, col=1)
    fig.update_yaxes(title_text="ms per step", row=1, col=2)
    fig.update_yaxes(title_text="million tokens per GPU", row=1, col=3)
    return _kit.style(fig, heading(data), f"{data['clock']} · models: Llama-3 8B and 70B "
                      "shapes, bf16")


def heading(data: dict) -> str:
    """The figure's point in its words: how much faster the most GPUs make a decode step of
    the first model that fits on one GPU, against the number of GPUs."""
    m = next((m for m, rows in data["models"].items() if rows[0]["fits"]),
             list(data["models"])[0])
    one, many = data["models"][m][0], data["models"][m][-1]
    short = m.replace("llama-3-", "").upper()
    return (f"Tensor parallelism: {many['tp']} {data['gpu']}s make a Llama-3 {short} decode "
            f"step {one['step_ms'] / many['step_ms']:.1f}x faster, not {many['tp']}x")


def summary(data: dict) -> str:
    parts = []
    for m, rows in data["models"].items():
        r1, r8 = rows[0], rows[-1]
        parts.append(f"{m}: weights/GPU {r1['weights_gb']:.0f} GB at tp=1 -> "
                     f"{r8['weights_gb']:.0f} GB at tp={r8['tp']}; decode step "
                     f"{r1['step_ms']:.1f} -> {r8['step_ms']:.1f} ms "
                     f"({r1['step_ms'] / r8['step_ms']:.1f}x faster on {r8['tp']} GPUs, "
                     f"all-reduce {r8['comm_ms']:.1f} ms)")
    return "; ".join(parts) + f" [{data['clock']}]"


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke)        # cost model only


def judge_tensor_parallel(d: dict) -> Verdict:
    m = list(d["models"])[-1]
    one, many = d["models"][m][0], d["models"][m][-1]
    gain = one["step_ms"] / many["step_ms"]
    text = (f"on {d['gpu']}: {m} decode step {one['step_ms']:.1f} -> {many['step_ms']:.1f} ms "
            f"on tp={many['tp']} ({x(gain)} faster, not {many['tp']}x; all-reduce "
            f"{many['comm_ms']:.1f} ms per step), weights per GPU {one['weights_gb']:.0f} -> "
            f"{many['weights_gb']:.0f} GB")
    if "simulated" in d["clock"]:
        v = UNMEASURABLE
        reason = (f"this lab runs on one device (0 multi-GPU runs measured); the roofline cost "
                  f"model, a simulation and not a measurement, predicts {text}")
    else:                                   # a measured multi-GPU run, if one is ever added
        v = HOLDS if 1 < gain < many["tp"] else FAILS
        reason = f"measured {text}"
    return Verdict(v, reason, measured=f"{x(gain)} on {many['tp']} GPUs (simulated)",
                   points=(("decode, simulated", gain),
                           (f"linear, {many['tp']} GPUs", many["tp"], "reference")),
                   unit=f"decode speedup, {m}, tp={many['tp']} vs tp=1 (x)", clock=d["clock"])


CLAIMS = (
    Claim("10-tensor-parallel", "Tensor parallelism splits weights and KV over GPUs, but "
          "all-reduce traffic keeps the per-token speedup below the number of GPUs.",
          f"{MEGATRON}; the speedup bound: {LABS_OWN} projection",
          "ch10_multi_gpu", measure_for_claims, judge_tensor_parallel, kind=PROJECTION),
)
