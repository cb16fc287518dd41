"""A fit to measurements: benchmark runs and/or /metrics windows, the stalls their tails show.

Assembles what ``engine.profile_fit``'s general fit matches from each source
(a run's replayed medians, ``engine.bench_result``; a window's means and
bucketed quantiles, ``engine.profile_fit_windows``), and where benchmark
runs report their tails, reads the server's stalls around the speed fit
(``engine.profile_fit_stalls``). Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from engine.bench_result import BenchMeasurement, bench_tag, bench_targets
from engine.metrics_windows import LoadWindow, PageValues
from engine.profile_fit import (
    BENCH_SOURCE,
    FACTOR_FIELD_NAMES,
    KEPT_FIELDS,
    METRICS_SOURCE,
    ProfileFit,
    TargetCheck,
    Targets,
    fit_profile,
    fit_warnings,
    profile_field,
)
from engine.profile_fit_stalls import (
    STALL_FIELDS,
    bench_residuals,
    fit_share,
    has_tails,
    refine,
    starting_stalls,
    tail_checks,
)
from engine.profile_fit_wake import WAKE_FIELDS, IdleRequest, WakeFit, fit_wake
from engine.profile_fit_windows import (
    MIN_ITL_COUNT,
    QuantileTarget,
    metrics_targets,
    quantile_bounds,
    window_groups,
)
from engine.profile_types import Profile


def fit_to_measurements(
    base: Profile,
    *,
    bench: BenchMeasurement | Sequence[BenchMeasurement] | None = None,
    windows: Sequence[LoadWindow] | None = None,
    last_page: PageValues | None = None,
    name: str | None = None,
    idle: Sequence[IdleRequest] | None = None,
    idle_source: str = "an idle-pause run",
) -> ProfileFit:
    """One fit to benchmark results, /metrics windows, or both together.

    Every matched figure weighs the same (log errors), whichever source it
    comes from; the KV capacity comes from the last page when it says.
    Several benchmark runs at different prompt lengths (or concurrencies)
    let the fit tell a request's fixed time outside the engine from its
    prefill, which one run cannot. ``idle`` (requests that found the server
    idle, ``engine.profile_fit_wake``, from ``idle_source``) gives the idle
    server's wake-up: every replay of the fit carries it, and it alone may be
    given. Its idle times are the model's (``IdleRequest.engine_idle_s``), so
    it is read with the base's time outside the scheduler, and again with the
    fitted one.
    """
    if idle is not None:
        provisional = fit_wake(idle, idle_source, base.request_overhead)
        woken = _with_wake(base, provisional, base)
        if not bench and windows is None:
            return _wake_account(_unfitted(woken, name), base, provisional, idle_source)
        fit = fit_to_measurements(
            woken, bench=bench, windows=windows, last_page=last_page, name=name
        )
        wake = fit_wake(idle, idle_source, fit.profile.request_overhead)
        fit = dataclasses.replace(fit, profile=_with_wake(fit.profile, wake, base))
        return _wake_account(fit, base, wake, idle_source)
    parts: list[Targets] = []
    sources: list[str] = []
    extra: dict[str, int] = {}
    notes_extra: list[str] = []
    quantiles: dict[str, QuantileTarget] = {}
    benches = [bench] if isinstance(bench, BenchMeasurement) else list(bench or ())
    for i, run in enumerate(benches):
        parts.append(bench_targets(run, bench_tag(run.load, i) if len(benches) > 1 else ""))
    if benches:
        sources.append(BENCH_SOURCE if len(benches) == 1 else f"{len(benches)} x {BENCH_SOURCE}")
    if windows is not None:
        groups = window_groups(windows)
        if not groups:
            raise ValueError(
                f"{METRICS_SOURCE}: no steady window with at least {MIN_ITL_COUNT} inter-token "
                "observations and known request lengths; scrape for longer or under more load"
            )
        parts.append(metrics_targets(groups))
        sources.append(METRICS_SOURCE)
        quantiles = quantile_bounds(groups)
        tails = [g for g in groups if g.itl_long_tail and not g.itl_median_matched()]
        if tails:
            g = tails[0]
            notes_extra.append(
                f"the inter-token latency has a long tail at {len(tails)} load shape(s) "
                f"(e.g. {g.load.max_concurrency} running: mean {g.itl_mean_s * 1e3:.1f} ms, "
                "above the bucket that holds the median): the fit matches means (vLLM's "
                "buckets are too coarse to read a median there), so the profile will "
                "predict median ITL high; a `vllm bench serve` result (its medians, and its "
                "mean and p99 ITL) lets the fit read the stalls behind such a tail"
            )
    notes: dict[str, str] = {}
    if last_page is not None and last_page.num_gpu_blocks is not None:
        extra["num_gpu_blocks"] = last_page.num_gpu_blocks
        if last_page.block_size is not None:
            extra["block_size"] = last_page.block_size
    else:
        notes["vllm.num_gpu_blocks"] = _kv_note(base, from_pages=windows is not None)
    if not parts:
        raise ValueError("nothing to fit: give a benchmark result and/or /metrics pages")

    def targets(profile: Profile) -> list[tuple[str, float, float]]:
        return [t for part in parts for t in part(profile)]

    def residuals(profile: Profile) -> list[float]:
        return [
            quantiles[n].residual(model) if n in quantiles else math.log(model / measured)
            for n, measured, model in targets(profile)
        ]

    source = " + ".join(sources)

    def fit_from(start: Profile) -> ProfileFit:
        return fit_profile(
            start,
            residuals,
            source,
            targets,
            name=name,
            extra_vllm=extra or None,
            kept_notes=notes,
            # a capacity nobody measured is worth a warning; one the base file states is not
            warn_kept=() if base.vllm.num_gpu_blocks is not None else tuple(notes),
            buckets={n: (t.lower_s, t.upper_s) for n, t in quantiles.items()},
            report_base=base,
        )

    if benches and has_tails(benches):
        # the speed from the medians with the stalls the tails suggest, the share
        # of time stalled from the mean gaps, every tail at once, then the speed
        # again with those stalls
        # (the stalls read here leave the base's wake-up as it is)
        starting = dataclasses.replace(
            starting_stalls(benches),
            wake_s=base.stalls.wake_s,
            wake_tau_s=base.stalls.wake_tau_s,
            wake_max_idle_s=base.stalls.wake_max_idle_s,
        )
        first = fit_from(dataclasses.replace(base, stalls=starting))
        shared = dataclasses.replace(first.profile, stalls=fit_share(first.profile, benches))
        fit = fit_from(dataclasses.replace(base, stalls=refine(shared, bench_residuals(benches))))
        fit = _with_stall_account(fit, base, benches, source)
    else:
        fit = fit_from(base)
        fit = dataclasses.replace(
            fit,
            kept_reasons={
                **fit.kept_reasons,
                **{f: _NO_TAILS for f in STALL_FIELDS if f in fit.kept},
            },
        )
    if notes_extra:
        fit = dataclasses.replace(fit, warnings=(*fit.warnings, *notes_extra))
    reasons = {f: _NO_WAKE for f in WAKE_FIELDS if f in fit.kept}
    return dataclasses.replace(fit, kept_reasons={**fit.kept_reasons, **reasons})


_NO_WAKE = (
    "no run sent requests after idle pauses (`prescaler engine load --idle-pauses`, "
    "given to `fit-profile --wake-result`): kept from the base"
)


def _with_wake(profile: Profile, wake: WakeFit, base: Profile) -> Profile:
    """``profile`` with the fitted wake-up, held at the longest idle time measured,
    where the data tell it from none; else the base's."""
    if wake.seen:
        stalls = dataclasses.replace(
            profile.stalls,
            wake_s=wake.wake_s,
            wake_tau_s=wake.wake_tau_s,
            wake_max_idle_s=wake.max_idle_s,
        )
    else:
        stalls = dataclasses.replace(
            profile.stalls,
            wake_s=base.stalls.wake_s,
            wake_tau_s=base.stalls.wake_tau_s,
            wake_max_idle_s=base.stalls.wake_max_idle_s,
        )
    return dataclasses.replace(profile, stalls=stalls)


def _unfitted(profile: Profile, name: str | None) -> ProfileFit:
    """``profile`` as a fit that matched nothing: every field kept but the wake-up."""
    named = dataclasses.replace(profile, name=name) if name else profile
    kept = tuple(f for f in (*FACTOR_FIELD_NAMES, *KEPT_FIELDS) if f not in WAKE_FIELDS)
    why = "only an idle-pause run was given: kept from the base"
    return ProfileFit(
        profile=named,
        determined=(),
        kept=kept,
        targets=(),
        factors={},
        kept_reasons={f: why for f in kept},
    )


def _wake_account(fit: ProfileFit, base: Profile, wake: WakeFit, source: str) -> ProfileFit:
    """``fit`` with the wake-up listed as determined (from ``source``), with its
    uncertainty, and a warning where the data cannot tell it from none."""
    told = (
        f"{source}: {wake.requests} requests sent to an idle server "
        f"({wake.idle_range_s[0] * 1e3:.0f} ms to {wake.idle_range_s[1]:.2f} s idle)"
    )
    moved = [f for f in WAKE_FIELDS if profile_field(fit.profile, f) != profile_field(base, f)]
    uncertainty = {
        "stalls.wake_s": wake.wake_sd_s / wake.wake_s if wake.wake_s > 0 else math.inf,
        "stalls.wake_tau_s": math.expm1(min(wake.tau_log_sd, MAX_REPORTED_LOG_SD)),
    }
    warnings = list(fit.warnings)
    if wake.seen:
        same = f"{told}: the same as the base's"
        if wake.still_rising:
            warnings.append(
                f"{source}: the first token still comes later the longer the pause at the "
                f"longest one measured ({wake.max_idle_s:.3g} s; time constant "
                f"{wake.wake_tau_s:.3g} s): the profile holds the wake-up there "
                f"({wake.at_max_idle_s * 1e3:.3g} ms) for any longer idle time; pause longer "
                "to see where it stops"
            )
    else:
        same = f"{told}: {wake.unidentified_reason}; kept from the base"
        warnings.append(f"{source}: {wake.unidentified_reason}; the base's wake-up is kept")
    return dataclasses.replace(
        fit,
        determined=(*fit.determined, *((f, told) for f in moved)),
        kept=tuple(
            sorted(
                {
                    *(f for f in fit.kept if f not in moved),
                    *(f for f in WAKE_FIELDS if f not in moved),
                }
            )
        ),
        kept_reasons={
            **{f: r for f, r in fit.kept_reasons.items() if f not in moved},
            **{f: same for f in WAKE_FIELDS if f not in moved},
        },
        field_uncertainty={
            **fit.field_uncertainty,
            **{f: u for f, u in uncertainty.items() if f in moved and math.isfinite(u)},
        },
        warnings=tuple(warnings),
    )


#: A log uncertainty past this is reported as this (e^7: a factor of about 1,100).
MAX_REPORTED_LOG_SD = 7.0


_NO_TAILS = (
    "the input reports no tails (a benchmark run's mean ITL, p99 ITL, p90 and p99 TTFT): "
    "kept from the base"
)


def _with_stall_account(
    fit: ProfileFit, base: Profile, benches: Sequence[BenchMeasurement], source: str
) -> ProfileFit:
    """``fit`` with the stall fields it read listed as determined (and where from),
    the tail figures added to its checks, and its warnings said again."""
    told = [
        name
        for name, given in (
            ("mean ITL", any(b.mean_itl_s is not None for b in benches)),
            ("p99 ITL", any(b.p99_itl_s is not None for b in benches)),
            ("p90 TTFT", any(b.p90_ttft_s is not None for b in benches)),
            ("p99 TTFT", any(b.p99_ttft_s is not None for b in benches)),
        )
        if given
    ]
    tails = f"the runs' {', '.join(told)}"
    moved = [f for f in STALL_FIELDS if profile_field(fit.profile, f) != profile_field(base, f)]
    determined = (*fit.determined, *((f, f"{source}: {tails}") for f in moved))
    kept = tuple(f for f in fit.kept if f not in moved)
    reasons = {f: r for f, r in fit.kept_reasons.items() if f not in moved}
    for f in STALL_FIELDS:
        if f in kept:
            reasons[f] = f"the runs show none ({tails}): kept from the base"
    tags = [bench_tag(b.load, i) if len(benches) > 1 else "" for i, b in enumerate(benches)]
    base_tails = tail_checks(base, benches, tags)
    fitted_tails = tail_checks(fit.profile, benches, tags)
    checks = (
        *fit.targets,
        *(
            TargetCheck(n, measured, model, fitted)
            for (n, measured, model), (_, _, fitted) in zip(base_tails, fitted_tails, strict=True)
        ),
    )
    amended = dataclasses.replace(
        fit, determined=determined, kept=kept, kept_reasons=reasons, targets=checks
    )
    others = tuple(w for w in fit.warnings if not w.startswith("poor fit:"))
    return dataclasses.replace(amended, warnings=(*fit_warnings(amended, {}), *others))


def _kv_note(base: Profile, *, from_pages: bool) -> str:
    """Why the KV capacity was kept, and what it is."""
    capacity = f"{base.kv_blocks} blocks of {base.vllm.block_size} tokens"
    if base.vllm.num_gpu_blocks is None:
        capacity += ", derived from the device memory"
    why = (
        "the /metrics pages have no vllm:cache_config_info with num_gpu_blocks (vLLM 0.32 "
        "exports it; older servers, `prescaler emulate` without --metrics-version v0.32 and "
        "filtered scrapes do not)"
        if from_pages
        else "a `vllm bench serve` result does not report it"
    )
    return (
        f"{why}; the KV capacity stays the base's ({capacity}). Set vllm.num_gpu_blocks "
        "to the 'GPU KV cache size' vLLM logs at start (tokens / block_size) if it differs"
    )
