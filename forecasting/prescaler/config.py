"""prescaler's knobs: principled defaults, documented, never fitted per file.

What each default was compared with, and the backtest that chose it, is in
``docs/decisions/forecasting.md``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrescalerConfig:
    """Knobs of :class:`forecasting.prescaler.model.PrescalerForecaster`."""

    # ----------------------------------------------------------- the ridge
    offset_fractions: tuple[float, ...] = (0.25, 1.0, 16.0)
    """Candidates for ``c`` in ``log(y + c)`` as a fraction of the recent busy
    (non-zero) bins' mean:
    0.25 is nearly multiplicative, 16 nearly additive. fit() picks one on a
    time-ordered holdout."""
    default_offset_fraction: float = 1.0
    """Offset used when the history is too short to choose one (fewer than
    ``min_independent_errors`` holdout rows per eagerly fitted horizon)."""
    ridge: float = 1.0
    """Ridge penalty (in squared log units) pulling coefficients toward the
    prior "mean of the last 3 steps"; negligible with thousands of rows,
    decisive with ten."""
    prior_weight: float = 1.0
    """Weight of the 3-step mean in the ridge prior (1: "the recent mean")."""
    max_seasons: int = 4
    """Past seasons averaged into the seasonal profile."""
    max_train_days: float = 28.0
    """History used for regression rows (older demand is a different regime)."""
    min_rows: int = 8
    """Fewer regression rows than this and a horizon borrows a shorter one's model."""
    fit_horizon: int = 12
    """Horizons fitted eagerly; longer ones are fitted on first use."""

    # ------------------------------------------------------------ the band
    local_scale_rows: int = 1000
    """Normalise residuals by the local volatility (bands follow bursts) only
    with at least this many regression rows: with fewer, the ratio of two noisy
    scale estimates makes bands explode on on/off traffic."""
    min_empirical: int = 20
    """Fewer residuals than this and the Gaussian band stands in."""
    residual_rows: int = 2880
    """Most recent residuals kept per horizon for the quantiles."""
    law_grid_rows: int = 1000
    """A combined horizon's ridge residual law with more residuals than this
    is kept as its percent grid (101 values; the band reads it between grid
    points by linear interpolation): a fitted forecaster per ScaledObject
    held up to ``residual_rows`` per horizon, 1.2 MB at a 15-minute lead of
    15 s bins. Shorter laws are kept whole."""
    calibrate_rows: float = 200.0
    """If > 0, the ridge band's tail probabilities are scaled by its
    out-of-sample coverage on the holdout, trusted ``n / (n + this)``; 0
    disables it."""
    band_min_errors: float = 20.0
    """Independent holdout errors (about ``n / h`` of ``n`` holdout origins)
    from which a horizon's band is the split-conformal one: the quantiles of
    the combined point's own out-of-sample holdout errors, around that point.
    Fewer, and the ridge's calibrated in-sample band stands in. 0 disables."""
    band_half_life: float = 0.2
    """Half-life of the holdout band's error weights, as a fraction of the
    holdout's origins; 0 weighs every error alike."""

    # --------------------------------------------------------- the members
    min_holdout: int = 5
    """Fewer holdout origins than this and the ridge alone speaks."""
    min_independent_errors: float = 8.0
    """Fewer independent h-step holdout errors than this and the smoothers
    weigh equally (the ridge sits out); it also decides when the smoothers'
    parameters are chosen on one-step errors and whether the transform offset
    is chosen at all. 0 disables. 8: two per free weight of the five
    members' simplex."""
    combine_power: float = 2.0
    """Inverse weights proportional to holdout MAE to the minus this power."""
    shrink_rows: float = 200.0
    """Holdout rows at which the MAE-optimal weights get half the trust."""
    holdout_days: float = 1.0
    """If > 0, the holdout is at most this many recent days: one full daily
    cycle of the regime the next forecasts live in."""
    holdout_rows: int = 720
    """At most this many recent origins are held out for the weights (at 60 s
    bins a day, at 15 s six hours): the holdout's cost (every member's
    forecast, the simplex search) grows with its length, and neighbouring
    origins' errors overlap, so a longer one adds little evidence."""
    smoother_rows: int = 1440
    """The smoothers' filters and their parameter choice read at most this
    many recent rows (or twice the holdout, if more): they forget
    geometrically (a memory of at most ~100 steps), so older rows only cost
    time. The ridge trains on every row: its seasonal profile needs the days."""
    holdout_refits: int = 8
    """Blocks of the rolling-origin holdout (each refits the ridge and
    re-chooses the smoothers on the rows before it); 0: one split at the
    start of the last third."""
    guard: float = 2.0
    """Members beyond this many times the ridge's 0.1..0.9 residual band
    from its centre sit out a forecast; 0 disables it."""

    # ------------------------------------------------------- cold start
    cold_start_growth: float = 2.0
    """While the history holds fewer than ``band_min_errors`` independent
    errors at a horizon (about ``band_min_errors * h`` rows), no quantile at
    that horizon exceeds this multiple of the history's largest value. A band
    extrapolated from a few dozen rows (a fleet that has just woken up) says
    nothing about demand far beyond what was ever seen; the live queue signals
    catch a real surge. 0 disables it."""
    max_growth: float = 4.0
    """No quantile at any horizon exceeds this multiple of the fit history's
    largest value, however many errors the band was built from. The band is
    a residual law times the local scale of ``log(y + c)``; on sparse demand
    (idle, then a session) that scale is huge right after the jump from
    zero, and the band once reached 1e144 requests/s, which sized the fleet
    at its maximum. 0 disables it."""

    def __post_init__(self) -> None:
        if (
            self.shrink_rows < 0
            or self.min_holdout < 1
            or self.holdout_days < 0
            or self.holdout_rows < 1
            or self.smoother_rows < 1
            or self.law_grid_rows < 1
            or self.min_independent_errors < 0
            or self.band_min_errors < 0
            or not self.band_half_life >= 0
            or not self.cold_start_growth >= 0
            or not self.max_growth >= 0
        ):
            raise ValueError(
                "shrink_rows, holdout_days, min_independent_errors, band_min_errors, "
                "band_half_life, cold_start_growth and max_growth must be >= 0 and min_holdout, "
                "holdout_rows, smoother_rows and law_grid_rows >= 1, "
                f"got {self.shrink_rows}, {self.holdout_days}, {self.min_independent_errors}, "
                f"{self.band_min_errors}, {self.band_half_life}, {self.cold_start_growth}, "
                f"{self.max_growth}, "
                f"{self.min_holdout}, {self.holdout_rows}, {self.smoother_rows}, "
                f"{self.law_grid_rows}"
            )
