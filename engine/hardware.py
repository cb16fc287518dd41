"""Accelerators and the EC2 instance types that carry them.

Spec figures are docs/facts.md section 2; the efficiency factors (``eta_*``,
``step_overhead_s``) are this project's calibration, fitted so that
``tests/engine/test_calibration_bench.py`` reproduces the measured points of
docs/facts.md sections 3-4 within 15 % (its held-out error says how well the
fit carries to a source it did not see). Prices are section 7 (us-east-1 on-demand from the
Karpenter price table, spot = on-demand x (1 - Spot Advisor savings)).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator device (a GPU, or one Inferentia2 chip).

    ``memory_gib`` is the capacity the framework sees (``torch.cuda``'s
    total_memory), smaller than the marketing figure. ``bandwidth_gbps`` is
    GB/s (1e9 bytes), ``*_tflops`` dense tensor throughput.
    ``eta_mem`` / ``eta_compute`` are the fractions of peak bandwidth and FLOP/s
    a serving engine achieves; ``step_overhead_s`` is the fixed CPU/launch cost
    of one scheduler iteration; ``knee`` is the exponent of the soft maximum
    that joins the memory- and compute-bound regimes (see steptime.py).
    ``interconnect_gbps`` / ``allreduce_latency_s`` price tensor parallelism.
    """

    name: str
    memory_gib: float
    bandwidth_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    eta_mem: float
    eta_compute: float
    step_overhead_s: float
    knee: float = 2.0
    interconnect_gbps: float = 0.0
    allreduce_latency_s: float = 0.0
    static_kv: bool = False

    def __post_init__(self) -> None:
        if self.memory_gib <= 0 or self.bandwidth_gbps <= 0 or self.bf16_tflops <= 0:
            raise ValueError(
                f"HardwareSpec {self.name!r}: memory, bandwidth and TFLOP/s must be > 0"
            )
        if self.fp8_tflops is not None and self.fp8_tflops <= 0:
            raise ValueError(f"HardwareSpec {self.name!r}: fp8_tflops must be > 0 or None")
        for field_name in ("eta_mem", "eta_compute"):
            value = getattr(self, field_name)
            if not 0 < value <= 1:
                raise ValueError(f"HardwareSpec {self.name!r}: {field_name} must be in (0, 1]")
        if self.step_overhead_s < 0:
            raise ValueError(f"HardwareSpec {self.name!r}: step_overhead_s must be >= 0")
        if self.knee < 1:
            raise ValueError(f"HardwareSpec {self.name!r}: knee must be >= 1")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB


A10G = HardwareSpec(
    name="a10g",
    memory_gib=22.0,  # "22.02 GiB total capacity" in CUDA OOM messages on g5
    bandwidth_gbps=600.0,
    bf16_tflops=70.0,  # the usually quoted figure (docs/facts.md: unverified)
    fp8_tflops=None,
    # Fitted jointly to the TGI Llama-2-7B rows at TP 1 and TP 4 and the vLLM
    # TP 2 ShareGPT run (calibration bench): 0.6 x 70 TF is the prefill estimate.
    eta_mem=0.80,
    eta_compute=0.60,
    step_overhead_s=0.0015,
    # g5.12xlarge / g5.48xlarge: PCIe only, no NVLink and no P2P, so NCCL goes
    # through host memory: slow and high-latency all-reduces (TP 8 is slower
    # than TP 4 in the TGI tests).
    interconnect_gbps=4.0,
    allreduce_latency_s=80e-6,
)

L4 = HardwareSpec(
    name="l4",
    memory_gib=22.2,
    bandwidth_gbps=300.0,
    bf16_tflops=121.0,
    fp8_tflops=242.0,
    eta_mem=0.85,
    eta_compute=0.55,
    step_overhead_s=0.0015,
    interconnect_gbps=4.0,  # PCIe only, as on g5 (no L4 TP profile is calibrated)
    allreduce_latency_s=80e-6,
)

A100_80G = HardwareSpec(
    name="a100-80g",
    memory_gib=79.15,  # log in https://github.com/vllm-project/vllm/pull/10909
    bandwidth_gbps=2039.0,
    bf16_tflops=312.0,
    fp8_tflops=None,
    eta_mem=0.71,  # Vidur: 9.7 ms for 13.96 GB of linear weights at 1 token
    eta_compute=0.67,  # Vidur: 15k tok/s prefill ceiling = 0.67 MFU
    step_overhead_s=0.0008,
    interconnect_gbps=240.0,  # NVLink3 600 GB/s bidirectional; ring all-reduce busbw
    allreduce_latency_s=10e-6,
)

H100 = HardwareSpec(
    name="h100",
    memory_gib=79.19,
    bandwidth_gbps=3350.0,
    bf16_tflops=989.0,
    fp8_tflops=1979.0,
    eta_mem=0.82,
    eta_compute=0.60,
    step_overhead_s=0.0006,
    interconnect_gbps=360.0,  # NVLink4 900 GB/s bidirectional
    allreduce_latency_s=8e-6,
)

INFERENTIA2 = HardwareSpec(
    name="inferentia2",
    memory_gib=32.0,
    bandwidth_gbps=820.0 * GIB / 1e9,  # 820 GiB/s
    bf16_tflops=190.0,
    fp8_tflops=None,
    eta_mem=0.60,  # no published per-chip curve: a cautious guess (floor 18-20 ms)
    eta_compute=0.50,  # docs/facts.md prefill: "about 0.5 x 190 TF"
    step_overhead_s=0.002,
    interconnect_gbps=100.0,
    allreduce_latency_s=20e-6,
    static_kv=True,
)

HARDWARE: dict[str, HardwareSpec] = {h.name: h for h in (A10G, L4, A100_80G, H100, INFERENTIA2)}


@dataclass(frozen=True)
class InstanceType:
    """An EC2 instance: which devices it carries and what it costs.

    ``spot_savings`` is the Spot Advisor fraction; ``spot_note`` says where it
    came from (and whether it was inferred).
    """

    name: str
    hardware: HardwareSpec
    devices: int
    price_on_demand_per_hour: float
    spot_savings: float
    spot_note: str

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"InstanceType {self.name!r}: devices must be >= 1")
        if self.price_on_demand_per_hour <= 0:
            raise ValueError(f"InstanceType {self.name!r}: price must be > 0")
        if not 0 <= self.spot_savings < 1:
            raise ValueError(f"InstanceType {self.name!r}: spot_savings must be in [0, 1)")

    @property
    def price_spot_per_hour(self) -> float:
        return self.price_on_demand_per_hour * (1.0 - self.spot_savings)

    def share(self, devices: int) -> float:
        """The fraction of this instance a replica using ``devices`` devices pays for."""
        return devices / self.devices


INSTANCES: dict[str, InstanceType] = {
    i.name: i
    for i in (
        InstanceType("g5.xlarge", A10G, 1, 1.006, 0.47, "Spot Advisor 2024-02: 47 %"),
        InstanceType("g5.2xlarge", A10G, 1, 1.212, 0.48, "Spot Advisor 2024-02: 48 %"),
        InstanceType("g5.12xlarge", A10G, 4, 5.672, 0.62, "Spot Advisor 2024-02: 62 %"),
        InstanceType(
            "g6.xlarge",
            L4,
            1,
            0.8048,
            0.46,
            "inferred: g6.2xlarge's 46 % (Spot Advisor 2026-09); g6 is absent in 2024",
        ),
        InstanceType(
            "p4de.24xlarge",
            A100_80G,
            8,
            27.44705,
            0.54,
            "inferred: p4d's 2024 spot price (32.77 x 0.31 = 10.16) against p4d's "
            "2026 on-demand 21.96 gives 54 %; p4de is absent from the feed",
        ),
        InstanceType(
            "p5.48xlarge",
            H100,
            8,
            55.04,
            0.57,
            "Spot Advisor 2026-09: 57 % (the 2024 26 % predates the June 2025 price cut)",
        ),
        InstanceType("inf2.xlarge", INFERENTIA2, 1, 0.7582, 0.60, "Spot Advisor 2024-02: 60 %"),
        InstanceType("inf2.8xlarge", INFERENTIA2, 1, 1.96786, 0.61, "Spot Advisor 2024-02: 61 %"),
    )
}
