"""What a simulation run reports: the ``simulate --json`` summary, a table, plots.

The summary follows the published contract exactly (``{"trace", "requests",
"duration_s", "wall_s", "policies": {NAME: {...}}}``) and adds a few keys
per policy (cost ratio to the oracle and to the hindsight schedule, cost per
month, scale-up reaction, retries, rejection reasons) and, when the
``hindsight`` policy ran, the bound and where the gap goes
(:mod:`simulations.bound_report`). It is strict JSON: a value that does not exist
(a percentile of no requests) is ``null``, never NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simulations.bound_report import NOT_CAUSAL, bound_terms, waterfall_lines
from simulations.runner import Outcome, attainment
from simulations.simulation import COMPLETED, REJECTED, TIMED_OUT, SimResult

__all__ = [
    "CEILING_LABEL",
    "CONTRACT_KEYS",
    "HOURS_PER_MONTH",
    "panel_title",
    "plot",
    "plot_title",
    "policy_summary",
    "scale_up_reaction_s",
    "summary",
    "table",
    "timeline_figure",
]

CONTRACT_KEYS: tuple[str, ...] = (
    "requests_total",
    "completed",
    "timed_out",
    "rejected",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "slo_ttft_s",
    "slo_attainment",
    "gpu_hours",
    "cost_usd",
    "mean_replicas",
    "max_replicas",
    "gpu_utilization",
    "scale_ups",
    "spot_interruptions",
)
"""Per-policy keys every ``simulate --json`` consumer may rely on."""

HOURS_PER_MONTH = 730.0
"""365 x 24 / 12: the month cloud bills use."""

OVERLOAD_WAITING_PER_REPLICA = 3.0
"""A backlog of more than this per Ready replica (vLLM waiting + gateway) is an
overload episode; 3 is the public KEDA + vLLM recipes' ``num_requests_waiting`` threshold."""


def _num(x: float | None, digits: int = 6) -> float | None:
    if x is None:
        return None
    x = float(x)
    return round(x, digits) if math.isfinite(x) else None


def _pct(values: np.ndarray, q: float) -> float | None:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if v.size else None


def _reason_kinds(reasons: Mapping[str, int]) -> dict[str, int]:
    """Rejections counted per kind: vLLM's messages embed token counts, so
    numbers are replaced by N (one key per kind, not one per request)."""
    kinds: dict[str, int] = {}
    for reason, count in reasons.items():
        key = re.sub(r"\d+", "N", reason)
        kinds[key] = kinds.get(key, 0) + count
    return dict(sorted(kinds.items()))


def scale_up_reaction_s(timeline: Mapping[str, np.ndarray]) -> float | None:
    """Mean time from the start of an overload episode to the next rise in
    Ready replicas (or to the episode's end when none came), over episodes;
    None when the run never overloaded. Sampled at the scrape interval."""
    t = timeline.get("t")
    if t is None or t.size < 2:
        return None
    ready = timeline["ready"]
    backlog = timeline["waiting"] + timeline["gateway"]
    over = backlog > OVERLOAD_WAITING_PER_REPLICA * np.maximum(ready, 1.0)
    reactions: list[float] = []
    k = 0
    n = t.size
    while k < n:
        if not over[k]:
            k += 1
            continue
        start = k
        while k < n and over[k]:
            k += 1
        end = min(k, n - 1)
        rise = next((j for j in range(start + 1, end + 1) if ready[j] > ready[j - 1]), end)
        reactions.append(float(t[rise] - t[start]))
    return float(np.mean(reactions)) if reactions else None


def policy_summary(
    outcome: Outcome,
    oracle_cost: float | None = None,
    tp: int = 1,
    hindsight_cost: float | None = None,
) -> dict[str, Any]:
    """The contract's per-policy object plus this simulator's additions."""
    r: SimResult = outcome.result
    status = r.status
    completed = status == COMPLETED
    ttft = np.where(completed, r.ttft_s, np.nan)
    tpot = np.where(completed, r.tpot_s, np.nan)
    e2e = np.where(completed, r.e2e_s, np.nan)
    gpu_s = r.gpu_hours * 3600.0
    replica_s = gpu_s / max(1, tp)
    # served load over what the billed replicas could sustain (decision.capacity)
    util = (
        r.served_tokens / (r.capacity_tokens_per_s * replica_s)
        if replica_s > 0 and r.capacity_tokens_per_s > 0
        else None
    )
    busy = min(1.0, r.busy_replica_s / replica_s) if replica_s > 0 else None
    months = r.duration_s / 3600.0 / HOURS_PER_MONTH
    out: dict[str, Any] = {
        "requests_total": int(status.size),
        "completed": int(np.count_nonzero(completed)),
        "timed_out": int(np.count_nonzero(status == TIMED_OUT)),
        "rejected": int(np.count_nonzero(status == REJECTED)),
        "ttft_p50_s": _num(_pct(ttft, 50)),
        "ttft_p99_s": _num(_pct(ttft, 99)),
        "tpot_p50_s": _num(_pct(tpot, 50)),
        "tpot_p99_s": _num(_pct(tpot, 99)),
        "e2e_p99_s": _num(_pct(e2e, 99)),
        "slo_ttft_s": _num(r.slo_ttft_s),
        "slo_attainment": _num(attainment(r)),
        "gpu_hours": _num(r.gpu_hours),
        "cost_usd": _num(r.cost_usd, 4),
        "mean_replicas": _num(r.mean_replicas, 4),
        "max_replicas": int(r.max_replicas),
        "gpu_utilization": _num(util, 4),
        "scale_ups": int(r.scale_ups),
        "spot_interruptions": int(r.spot_interruptions),
        # additions
        "cost_ratio_to_oracle": _num(r.cost_usd / oracle_cost, 4)
        if oracle_cost is not None and oracle_cost > 0
        else None,
        "cost_ratio_to_hindsight": _num(r.cost_usd / hindsight_cost, 4)
        if hindsight_cost is not None and hindsight_cost > 0
        else None,
        "cost_per_month_usd": _num(r.cost_usd / months, 2) if months > 0 else None,
        "scale_up_reaction_s": _num(scale_up_reaction_s(r.timeline), 1),
        "retried": int(r.retried),
        "busy_fraction": _num(busy, 4),
        "rejected_reasons": _reason_kinds(r.rejected_reasons),
        "wall_s": _num(r.wall_s, 3),
        "simulated_requests_per_wall_s": _num(status.size / r.wall_s, 1) if r.wall_s > 0 else None,
    }
    bound = r.extra.get("hindsight")
    if bound is not None:
        out["hindsight"] = bound
    if outcome.replicas is not None:
        out["static_replicas"] = int(outcome.replicas)
    if outcome.target is not None and bound is None:
        out["static_slo_target"] = _num(outcome.target, 4)
    if outcome.tried:
        out["static_search"] = [
            {"replicas": k, "slo_attainment": _num(a)} for k, a in outcome.tried
        ]
    return out


def summary(
    trace: str,
    requests: int,
    duration_s: float,
    wall_s: float,
    outcomes: Mapping[str, Outcome],
    *,
    tp: int = 1,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole ``simulate --json`` document."""
    oracle = outcomes.get("oracle")
    oracle_cost = oracle.result.cost_usd if oracle is not None else None
    bound_name = next((n for n, o in outcomes.items() if "hindsight" in o.result.extra), None)
    bound_cost = None if bound_name is None else outcomes[bound_name].result.cost_usd
    policies = {
        name: policy_summary(o, oracle_cost, tp, bound_cost) for name, o in outcomes.items()
    }
    doc: dict[str, Any] = {
        "trace": trace,
        "requests": int(requests),
        "duration_s": _num(duration_s, 3),
        "wall_s": _num(wall_s, 3),
        "policies": policies,
    }
    if bound_name is not None:
        # a static fleet searched over the window is sized in hindsight too
        searched = {n for n, o in outcomes.items() if o.tried}
        bound = outcomes[bound_name].result.extra["hindsight"]
        months = duration_s / 3600.0 / HOURS_PER_MONTH
        doc["hindsight"] = {
            **bound,
            "policy": bound_name,
            "terms": bound_terms(
                policies, bound, months, not_causal=NOT_CAUSAL | {bound_name} | searched
            ),
        }
    if extra:
        doc.update(extra)
    return doc


def _fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


CEILING_LABEL = "  best possible (a fleet that never queues)"
"""The row under SLO attainment that :func:`table` adds when given the ceiling."""


def table(doc: Mapping[str, Any], *, ceiling: float | None = None) -> str:
    """A side-by-side comparison of the policies, one column each.

    ``ceiling``: the idle-fleet attainment (:func:`simulations.runner.idle_attainment`),
    shown under each policy's attainment so a reader sees how far each is from the
    best any fleet could do on this trace."""
    policies: Mapping[str, Mapping[str, Any]] = doc["policies"]
    names = list(policies)
    slo = next(iter(policies.values()))["slo_ttft_s"] if policies else None

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f} %"

    def usd(v: float | None) -> str:
        return "-" if v is None else f"${v:,.0f}"

    rows: list[tuple[str, list[str]]] = [
        ("P99 TTFT", [_fmt(p["ttft_p99_s"], " s") for p in policies.values()]),
        ("P50 TTFT", [_fmt(p["ttft_p50_s"], " s") for p in policies.values()]),
        (
            f"SLO attainment (TTFT <= {_fmt(slo, ' s', 1)})",
            [pct(p["slo_attainment"]) for p in policies.values()],
        ),
        *([(CEILING_LABEL, [pct(ceiling)] * len(names))] if ceiling is not None else []),
        ("GPU utilization", [pct(p["gpu_utilization"]) for p in policies.values()]),
        ("scale-up reaction", [_fmt(p["scale_up_reaction_s"], " s", 0) for p in policies.values()]),
        ("cost per month at this rate", [usd(p["cost_per_month_usd"]) for p in policies.values()]),
        ("cost ratio to oracle", [_fmt(p["cost_ratio_to_oracle"], "x") for p in policies.values()]),
        *(
            [
                (
                    "cost ratio to hindsight",
                    [_fmt(p.get("cost_ratio_to_hindsight"), "x") for p in policies.values()],
                )
            ]
            if "hindsight" in doc
            else []
        ),
        (
            "replicas mean / max",
            [f"{p['mean_replicas']:.1f} / {p['max_replicas']}" for p in policies.values()],
        ),
        ("scale-ups", [str(p["scale_ups"]) for p in policies.values()]),
        ("timed out", [str(p["timed_out"]) for p in policies.values()]),
        ("rejected", [str(p["rejected"]) for p in policies.values()]),
        ("retried (pod lost)", [str(p["retried"]) for p in policies.values()]),
        ("spot interruptions", [str(p["spot_interruptions"]) for p in policies.values()]),
    ]
    if any("stopped" in p for p in policies.values()):  # a stack run: in flight at its stop
        rows.append(("stopped in flight", [str(p.get("stopped", "-")) for p in policies.values()]))
    width = max(len(r[0]) for r in rows)
    cols = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    head = f"{'':<{width}}  " + "  ".join(f"{n:>{c}}" for n, c in zip(names, cols, strict=True))
    lines = [
        f"{doc['trace']}: {doc['requests']} requests over {doc['duration_s'] / 3600:.2f} h",
        head,
        "-" * len(head),
    ]
    for label, vals in rows:
        lines.append(
            f"{label:<{width}}  " + "  ".join(f"{v:>{c}}" for v, c in zip(vals, cols, strict=True))
        )
    bound = doc.get("hindsight")
    if bound is not None:
        months = float(doc["duration_s"]) / 3600.0 / HOURS_PER_MONTH
        lines += ["", *waterfall_lines(bound["terms"], months, bound["stated_lead"]["lead_s"])]
    return "\n".join(lines)


def ttft_plot_path(path: str | Path) -> Path:
    """Where the TTFT CDF goes next to ``path``: ``NAME-ttft.png``."""
    p = Path(path)
    return p.with_name(f"{p.stem}-ttft{p.suffix or '.png'}")


def _demand(tl: Mapping[str, np.ndarray]) -> np.ndarray:
    """Arrivals per second between timeline samples."""
    dt = np.diff(tl["t"], prepend=tl["t"][0] - (tl["t"][1] - tl["t"][0]))
    return np.asarray(np.diff(tl["arrived"], prepend=0.0) / np.maximum(dt, 1e-9))


def _plot_scales(outcomes: Mapping[str, Outcome]) -> tuple[float, float]:
    """The replicas and req/s axis tops shared by every panel, so the same demand
    and the same fleet look the same in each."""
    replicas, rps = 1.0, 1e-9
    for o in outcomes.values():
        tl = o.result.timeline
        if "t" not in tl or tl["t"].size < 2:
            continue
        nodes = tl["nodes_on_demand"] + tl["nodes_spot"]
        for series in (nodes, tl["spec"], tl["ready"], tl.get("desired", nodes)):
            replicas = max(replicas, float(np.nanmax(series)))
        rps = max(rps, float(np.nanmax(_demand(tl))))
        upper = tl.get("forecast_upper_rps")
        if upper is not None and np.isfinite(upper).any():  # all NaN with forecast off
            rps = max(rps, float(np.nanmax(upper)))
    return replicas * 1.12, rps * 1.12


def plot_title(outcomes: Mapping[str, Outcome], rate_scale: float | None = None) -> str:
    """The timeline's title: the trace, its length, the profile and the rate scale."""
    r = next(iter(outcomes.values())).result
    scale = f", arrival rate x{rate_scale:g}" if rate_scale is not None else ""
    return (
        f"{r.trace}{scale}: {r.duration_s / 3600:.2f} h on {r.profile}, "
        f"SLO TTFT <= {r.slo_ttft_s:g} s"
    )


def panel_title(name: str, policy: Mapping[str, Any]) -> str:
    """A panel's heading: the policy, its SLO attainment and its cost."""
    attain = policy["slo_attainment"]
    slo = "-" if attain is None else f"{100 * attain:.1f} %"
    return (
        f"{name}:  SLO attainment {slo},  cost ${policy['cost_usd']:,.2f} "
        f"(${policy['cost_per_month_usd'] or 0:,.0f} a month at this rate)"
    )


def timeline_figure(outcomes: Mapping[str, Outcome], *, rate_scale: float | None = None) -> Any:
    """Replicas, nodes and demand over time per policy, with the forecast band where
    there is one: a matplotlib Figure (the caller saves and closes it).

    One panel per policy, every panel on the same replicas and req/s scales, each
    headed by its SLO attainment and cost; the legend sits below the panels, off
    the data. ``rate_scale``: the arrival-rate multiplier, named in the title."""
    import matplotlib  # heavy: only a run that draws a plot loads it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(outcomes)
    top_replicas, top_rps = _plot_scales(outcomes)
    policies = {name: policy_summary(o) for name, o in outcomes.items()}
    fig, axes = plt.subplots(
        len(names),
        1,
        figsize=(11, 2.5 * len(names) + 1.2),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    fig.suptitle(plot_title(outcomes, rate_scale), fontsize=11)
    legend: dict[str, Any] = {}
    for ax, name in zip(axes[:, 0], names, strict=True):
        tl = outcomes[name].result.timeline
        heading = panel_title(name, policies[name]).replace("$", r"\$")  # not mathtext
        ax.set_title(heading, loc="left", fontsize=9)
        if "t" not in tl or tl["t"].size < 2:
            ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center")
            continue
        t = tl["t"] / 3600.0
        ax2 = ax.twinx()
        ax2.plot(t, _demand(tl), color="0.75", lw=0.8, label="demand (req/s, right axis)")
        if "forecast_upper_rps" in tl:
            ax2.fill_between(
                t,
                tl["forecast_median_rps"],
                tl["forecast_upper_rps"],
                color="tab:orange",
                alpha=0.25,
                step="post",
                label="forecast median..upper (req/s)",
            )
        if "desired" in tl:
            ax.step(t, tl["desired"], where="post", color="tab:purple", lw=1.0, label="desired")
        ax.step(t, tl["spec"], where="post", color="tab:blue", lw=1.0, ls="--", label="spec")
        ax.step(t, tl["ready"], where="post", color="tab:green", lw=1.6, label="ready")
        nodes = tl["nodes_on_demand"] + tl["nodes_spot"]
        ax.step(t, nodes, where="post", color="tab:brown", lw=0.8, ls=":", label="nodes")
        ax.set_ylabel("replicas")
        ax.set_ylim(0.0, top_replicas)
        ax2.set_ylim(0.0, top_rps)
        ax2.set_ylabel("req/s")
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
        for a in (ax, ax2):
            for handle, label in zip(*a.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
    axes[-1, 0].set_xlabel("hours")
    if legend:
        fig.legend(
            list(legend.values()),
            list(legend),
            loc="outside lower center",
            ncol=min(6, len(legend)),
            fontsize=8,
            frameon=False,
        )
    return fig


def plot(
    outcomes: Mapping[str, Outcome], path: str | Path, *, rate_scale: float | None = None
) -> tuple[Path, Path]:
    """The timeline (:func:`timeline_figure`) in ``path``; the TTFT CDF per policy
    beside it (:func:`ttft_plot_path`)."""
    import matplotlib.pyplot as plt  # heavy: only a run that draws a plot loads it

    path = Path(path)
    names = list(outcomes)
    fig = timeline_figure(outcomes, rate_scale=rate_scale)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

    cdf_path = ttft_plot_path(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        r = outcomes[name].result
        v = np.sort(r.ttft_s[(r.status == COMPLETED) & np.isfinite(r.ttft_s)])
        if v.size == 0:
            continue
        # misses (timed out, rejected) sit above the curve: y reaches completed / total
        y = np.arange(1, v.size + 1) / max(1, r.status.size)
        ax.step(
            np.maximum(v, 1e-3), y, where="post", label=f"{name} (p99 {np.percentile(v, 99):.2f} s)"
        )
    slo = next(iter(outcomes.values())).result.slo_ttft_s if outcomes else None
    if slo is not None:
        ax.axvline(slo, color="k", ls=":", lw=0.8, label=f"SLO {slo:g} s")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of all requests")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(cdf_path, dpi=110)
    plt.close(fig)
    return path, cdf_path
