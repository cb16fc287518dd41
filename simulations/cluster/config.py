"""Configuration of the cluster model: NodePools, prices, start-up times, spot rates.

Kept apart from :mod:`simulations.cluster.pods` so the event-driven model stays
readable; :mod:`simulations.cluster.pods` re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from engine.hardware import INSTANCES
from engine.profiles import Profile
from engine.validate import int_at_least

__all__ = [
    "DEFAULT_SPOT_BAND",
    "HOURS_PER_MONTH",
    "SPOT_INTERRUPTION_BANDS",
    "CapacityType",
    "ClusterConfig",
    "NodePoolSpec",
    "interruptions_per_hour",
]

CapacityType = Literal["on-demand", "spot"]

HOURS_PER_MONTH = 730.0
"""8760 h / 12: the Spot Advisor bands are fractions of instances reclaimed per month."""

SPOT_INTERRUPTION_BANDS: dict[str, tuple[float, float]] = {
    # AWS Spot Instance Advisor "frequency of interruption" bands (fraction of
    # instances reclaimed over the trailing month), us-east-1, Linux. The
    # snapshot matches the savings used in engine.hardware.
    "g5.xlarge": (0.05, 0.10),
    "g5.2xlarge": (0.10, 0.15),
    "g5.12xlarge": (0.05, 0.10),
    "g6.xlarge": (0.10, 0.15),  # inferred from g6.2xlarge (no g6.xlarge entry)
    "p4de.24xlarge": (0.20, 0.30),  # inferred from p4d: ">20 %"
    "p5.48xlarge": (0.0, 0.05),  # "<5 %"
    "inf2.xlarge": (0.20, 0.30),  # ">20 %"
    "inf2.8xlarge": (0.0, 0.05),  # "<5 %"
}
"""Per instance type: the advisor band as (low, high). The open band ">20 %" is
read as 20-30 % (one band width above its floor), "<5 %" as 0-5 %."""

DEFAULT_SPOT_BAND: tuple[float, float] = (0.05, 0.15)
"""Instance types the table lacks: the two middle bands, 5-15 % (midpoint 10 %)."""

# What manifests/karpenter ships, per accelerator family.
_GPU_SPOT_LIMIT_DEVICES = 32  # gpu-spot: limits nvidia.com/gpu "32"
_GPU_ON_DEMAND_LIMIT_DEVICES = 4  # gpu-on-demand: limits nvidia.com/gpu "4"
_INF2_LIMIT_DEVICES = 8  # inf2: limits aws.amazon.com/neuron "8"


def interruptions_per_hour(band: tuple[float, float]) -> float:
    """Hazard rate per node-hour whose one-month survival matches the band midpoint.

    A fraction ``p`` reclaimed per month means P(survive 730 h) = 1 - p, so an
    exponential clock has rate ``-ln(1 - p) / 730`` per hour (about p / 730).
    """
    low, high = band
    if not 0.0 <= low <= high < 1.0:
        raise ValueError(f"spot band must satisfy 0 <= low <= high < 1, got {band}")
    p = (low + high) / 2.0
    return -math.log1p(-p) / HOURS_PER_MONTH


def _parse_budget(budget: str) -> tuple[bool, float]:
    """``"10%"`` -> (True, 0.10); ``"1"`` -> (False, 1); anything else is a ValueError."""
    text = budget.strip()
    try:
        if text.endswith("%"):
            value = float(text[:-1])
            if not 0.0 <= value <= 100.0 or text[:-1].strip() != text[:-1]:
                raise ValueError
            return True, value / 100.0
        count = int(text)
        if count < 0:
            raise ValueError
        return False, float(count)
    except ValueError:
        raise ValueError(
            f'budget must be a node count ("1") or a percentage ("10%"), got {budget!r}'
        ) from None


@dataclass(frozen=True)
class NodePoolSpec:
    """The parts of a Karpenter v1 NodePool the model uses.

    ``limit_nodes`` is ``spec.limits`` expressed in nodes (None: unlimited);
    ``consolidate_after_s`` is ``disruption.consolidateAfter`` (``math.inf``
    = ``Never``); ``budget`` is the one ``disruption.budgets[].nodes`` entry
    (Karpenter's default is ``"10%"``). Only ``WhenEmpty`` consolidation is
    modelled, which is what the shipped NodePools set.
    """

    name: str
    capacity_type: CapacityType
    weight: int = 0
    limit_nodes: int | None = None
    consolidate_after_s: float = 30.0
    budget: str = "10%"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("NodePoolSpec: name must be non-empty")
        if self.capacity_type not in ("on-demand", "spot"):
            raise ValueError(
                f"NodePoolSpec {self.name!r}: capacity_type must be 'on-demand' or 'spot', "
                f"got {self.capacity_type!r}"
            )
        if isinstance(self.weight, bool) or not isinstance(self.weight, int):
            raise ValueError(f"NodePoolSpec {self.name!r}: weight must be an int")
        if not 0 <= self.weight <= 100:
            raise ValueError(f"NodePoolSpec {self.name!r}: weight must be in [0, 100]")
        if self.limit_nodes is not None and not int_at_least(self.limit_nodes, 0):
            raise ValueError(
                f"NodePoolSpec {self.name!r}: limit_nodes must be None or an int >= 0, "
                f"got {self.limit_nodes!r}"
            )
        if math.isnan(self.consolidate_after_s) or self.consolidate_after_s < 0:
            raise ValueError(
                f"NodePoolSpec {self.name!r}: consolidate_after_s must be >= 0 (inf = Never), "
                f"got {self.consolidate_after_s}"
            )
        _parse_budget(self.budget)

    def allowed_disruptions(self, initialized_nodes: int) -> int:
        """Budget before subtracting nodes already being deleted.

        A percentage is of the pool's Initialized nodes, rounded up
        (kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go GetAllowedDisruptionsByReason).
        """
        percent, value = _parse_budget(self.budget)
        if percent:
            return math.ceil(value * initialized_nodes - 1e-9)
        return int(value)


@dataclass(frozen=True)
class ClusterConfig:
    """Everything the cluster model needs; prices are per node-hour.

    ``node_ready_s`` is (min, mode, max) of a triangular draw of launch ->
    Initialized (GPU allocatable); ``image_pull_s + model_load_s`` is a pod
    bound -> Ready. A node of ``instance_type`` holds ``pods_per_node``
    vLLM replicas and carries ``gpus_per_node`` accelerators.
    """

    instance_type: str
    on_demand_usd_per_h: float
    spot_usd_per_h: float
    pools: tuple[NodePoolSpec, ...]
    node_ready_s: tuple[float, float, float]
    image_pull_s: float
    model_load_s: float
    spot_interruptions_per_hour: float = 0.0
    spot_notice_s: float = 120.0
    termination_grace_s: float = 120.0  # terminationGracePeriodSeconds of manifests/vllm
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    pods_per_node: int = 1
    gpus_per_node: int = 1
    disruption_poll_s: float = 10.0
    consolidation_validation_s: float = 15.0
    provisioning_retry_s: float = 10.0
    balloon_pulls_image: bool = True

    def __post_init__(self) -> None:
        if not self.instance_type:
            raise ValueError("ClusterConfig: instance_type must be non-empty")
        if not self.pools:
            raise ValueError("ClusterConfig: at least one NodePool is needed")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"ClusterConfig: duplicate NodePool names in {names}")
        for name in ("on_demand_usd_per_h", "spot_usd_per_h"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ClusterConfig: {name} must be finite and >= 0, got {value}")
        if len(self.node_ready_s) != 3:
            raise ValueError(
                f"ClusterConfig: node_ready_s must be (min, mode, max), got {self.node_ready_s}"
            )
        lo, mode, hi = self.node_ready_s
        if not (0.0 <= lo <= mode <= hi and math.isfinite(hi)):
            raise ValueError(
                "ClusterConfig: node_ready_s needs 0 <= min <= mode <= max < inf, "
                f"got {self.node_ready_s}"
            )
        for name in (
            "image_pull_s",
            "model_load_s",
            "spot_interruptions_per_hour",
            "spot_notice_s",
            "termination_grace_s",
            "batch_idle_s",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ClusterConfig: {name} must be finite and >= 0, got {value}")
        for name in ("batch_max_s", "disruption_poll_s", "provisioning_retry_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"ClusterConfig: {name} must be finite and > 0, got {value}")
        validation = self.consolidation_validation_s
        if not math.isfinite(validation) or validation < 0:
            raise ValueError(
                "ClusterConfig: consolidation_validation_s must be finite and >= 0, "
                f"got {self.consolidation_validation_s}"
            )
        for name in ("pods_per_node", "gpus_per_node"):
            value = getattr(self, name)
            if not int_at_least(value, 1):
                raise ValueError(f"ClusterConfig: {name} must be an int >= 1, got {value!r}")

    def price_per_s(self, capacity_type: CapacityType) -> float:
        """USD per node-second for ``capacity_type``."""
        per_h = self.spot_usd_per_h if capacity_type == "spot" else self.on_demand_usd_per_h
        return per_h / 3600.0

    @classmethod
    def for_profile(
        cls, profile: Profile, *, spot: bool = False, spot_first: bool = True, **overrides: Any
    ) -> ClusterConfig:
        """A cluster for ``profile``, with NodePools shaped like manifests/karpenter.

        Prices are the whole instance's (:mod:`engine.hardware`); ``node_ready_s``
        is a symmetric triangle around the profile's value, so its mean is that
        value. ``spot=False`` is one on-demand pool; ``spot=True`` puts a spot pool
        first with on-demand fallback, or with ``spot_first=False`` is the shipped
        GPU layout (on-demand baseline, spot burst). ``overrides`` replace any field
        afterwards and are validated."""
        inst = INSTANCES.get(profile.instance_type)
        if inst is not None:
            devices = inst.devices
            on_demand = inst.price_on_demand_per_hour
            spot_price = inst.price_spot_per_hour
        else:  # pragma: no cover - profiles only exist for known instance types
            devices = profile.tp
            on_demand = profile.price_on_demand_per_hour
            spot_price = profile.price_spot_per_hour
        pods_per_node = max(1, devices // profile.tp)
        v = profile.startup.node_ready_s
        band = SPOT_INTERRUPTION_BANDS.get(profile.instance_type, DEFAULT_SPOT_BAND)
        pools = _default_pools(
            profile.instance_type.startswith("inf2"), devices, spot=spot, spot_first=spot_first
        )
        config = cls(
            instance_type=profile.instance_type,
            on_demand_usd_per_h=on_demand,
            spot_usd_per_h=spot_price,
            pools=pools,
            node_ready_s=(0.5 * v, v, 1.5 * v),
            image_pull_s=profile.startup.image_pull_s,
            model_load_s=profile.startup.model_load_s,
            spot_interruptions_per_hour=interruptions_per_hour(band),
            pods_per_node=pods_per_node,
            gpus_per_node=devices,
        )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"unknown ClusterConfig field(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(sorted(known))}"
            )
        return dataclasses.replace(config, **overrides) if overrides else config


def _default_pools(
    inf2: bool, devices: int, *, spot: bool, spot_first: bool
) -> tuple[NodePoolSpec, ...]:
    """NodePools mirroring manifests/karpenter for one accelerator family."""
    if inf2:
        limit = max(1, _INF2_LIMIT_DEVICES // devices)
        if not spot:
            return (NodePoolSpec("inf2", "on-demand", 20, None, 300.0, "10%"),)
        return (
            NodePoolSpec("inf2", "spot", 20, limit, 300.0, "10%"),
            NodePoolSpec("inf2-on-demand", "on-demand", 0, None, 300.0, "10%"),
        )
    spot_limit = max(1, _GPU_SPOT_LIMIT_DEVICES // devices)
    if not spot:
        return (NodePoolSpec("gpu-on-demand", "on-demand", 50, None, 600.0, "1"),)
    if spot_first:
        return (
            NodePoolSpec("gpu-spot", "spot", 50, spot_limit, 120.0, "20%"),
            NodePoolSpec("gpu-on-demand", "on-demand", 10, None, 600.0, "1"),
        )
    base_limit = max(1, _GPU_ON_DEMAND_LIMIT_DEVICES // devices)
    return (
        NodePoolSpec("gpu-on-demand", "on-demand", 50, base_limit, 600.0, "1"),
        NodePoolSpec("gpu-spot", "spot", 10, spot_limit, 120.0, "20%"),
    )
