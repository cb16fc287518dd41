"""Backtest plot: actual demand vs each method's forecast, prescaler's band."""

from __future__ import annotations

from pathlib import Path

from forecasting.backtest import BacktestResult


def plot_backtest(result: BacktestResult, horizon: int, path: str | Path) -> None:
    """Write a PNG (or any matplotlib format, by suffix) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trajs = result.trajectories[horizon]
    fig, ax = plt.subplots(figsize=(12, 5))
    any_traj = next(iter(trajs.values()))
    hours = any_traj.target_index * result.step_s / 3600.0
    ax.plot(hours, any_traj.actual, color="black", lw=1.2, label="actual")
    for name, tr in trajs.items():
        if name == "prescaler":
            continue
        ax.plot(hours, tr.median, lw=0.7, alpha=0.6, label=name)
    if "prescaler" in trajs:
        tr = trajs["prescaler"]
        ax.fill_between(
            hours, tr.q10, tr.q90, color="tab:red", alpha=0.2, label="prescaler p10-p90"
        )
        ax.plot(hours, tr.median, color="tab:red", lw=1.2, label="prescaler median")
    ax.set_xlabel("hours since series start")
    ax.set_ylabel("demand (per second)")
    ax.set_title(f"{Path(result.source).name}: forecast {horizon * result.step_s:g} s ahead")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
