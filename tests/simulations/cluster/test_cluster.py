"""The cluster model: Karpenter batching, NodeClaims, preemption, consolidation, spot, cost.

Scenarios use fixed start-up times (a degenerate triangle) so every instant
can be computed by hand: node Ready = launch + 60 s, pod Ready = bind + 30 s
pull + 60 s load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.profiles import get_profile
from simulations.cluster.pods import (
    Cluster,
    ClusterConfig,
    NodePoolSpec,
    interruptions_per_hour,
)
from simulations.events import EventQueue

OD_PRICE = 3.6  # USD per node-hour: 0.001 per second keeps costs easy to check
SPOT_PRICE = 1.8


@dataclass
class Recorder:
    """A ClusterListener that keeps every callback in order."""

    events: list[tuple[str, float, int, float | None, str | None]] = field(default_factory=list)

    def pod_ready(self, now: float, pod_id: int) -> None:
        self.events.append(("ready", now, pod_id, None, None))

    def pod_stopping(self, now: float, pod_id: int, deadline_s: float, reason: str) -> None:
        self.events.append(("stopping", now, pod_id, deadline_s, reason))

    def pod_gone(self, now: float, pod_id: int) -> None:
        self.events.append(("gone", now, pod_id, None, None))

    def of(self, kind: str) -> list[tuple[float, int]]:
        return [(t, pid) for k, t, pid, _, _ in self.events if k == kind]


def make_config(*pools: NodePoolSpec, **overrides: object) -> ClusterConfig:
    base = ClusterConfig(
        instance_type="g5.xlarge",
        on_demand_usd_per_h=OD_PRICE,
        spot_usd_per_h=SPOT_PRICE,
        pools=pools or (NodePoolSpec("od", "on-demand", consolidate_after_s=600.0),),
        node_ready_s=(60.0, 60.0, 60.0),
        image_pull_s=30.0,
        model_load_s=60.0,
        termination_grace_s=30.0,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def make_cluster(config: ClusterConfig, seed: int = 0) -> tuple[Cluster, EventQueue, Recorder]:
    queue = EventQueue()
    recorder = Recorder()
    return Cluster(config, queue, np.random.default_rng(seed), recorder), queue, recorder


def at(queue: EventQueue, t: float) -> float:
    queue.run_until(t)
    return t


# -- provisioning ------------------------------------------------------------------


def test_batch_window_closes_one_idle_period_after_the_last_pod() -> None:
    """Each new pod resets the 1 s idle timer: decision = last pod + 1 s when under 10 s.

    kubernetes-sigs/karpenter pkg/controllers/provisioning/batcher.go (Wait) with
    BATCH_IDLE_DURATION = 1 s, BATCH_MAX_DURATION = 10 s (pkg/operator/options).
    """
    cluster, queue, _ = make_cluster(make_config())
    cluster.scale_deployment(at(queue, 0.0), 1)
    cluster.scale_deployment(at(queue, 0.5), 2)
    queue.run_until(1.4)
    assert cluster.node_views() == ()
    queue.run_until(1.5)
    assert [n.launch_s for n in cluster.node_views()] == [1.5, 1.5]


def test_batch_window_never_exceeds_ten_seconds() -> None:
    """A steady trickle of pods is cut at first + 10 s (batcher.go: max duration)."""
    cluster, queue, _ = make_cluster(make_config())
    for i in range(12):  # a pod every 0.9 s from 0 to 9.9 s
        cluster.scale_deployment(at(queue, 0.9 * i), i + 1)
    queue.run_until(10.0)
    views = cluster.node_views()
    assert len(views) == 12
    assert {n.launch_s for n in views} == {10.0}


def test_pod_ready_after_batch_node_pull_and_load() -> None:
    """Pod Ready = batch close + node Initialized (GPU allocatable) + image pull + model load.

    Karpenter counts a GPU node Initialized once nvidia.com/gpu is advertised
    (kubernetes-sigs/karpenter pkg/controllers/nodeclaim/lifecycle/initialization.go);
    only then can kube-scheduler bind the pod.
    """
    cluster, queue, rec = make_cluster(make_config())
    cluster.scale_deployment(at(queue, 0.0), 1)
    assert cluster.status_replicas == 1 and cluster.ready_replicas == 0
    queue.run_until(150.9)
    assert rec.of("ready") == []
    queue.run_until(151.0)
    assert rec.of("ready") == [(151.0, 0)]
    assert cluster.pod_start_samples_s == [151.0]
    assert cluster.ready_replicas == 1


def test_nodepools_by_weight_and_limits() -> None:
    """Highest weight first; a pool at its limit is skipped; pods beyond every limit stay Pending.

    kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/scheduler.go
    (NodePools ordered by weight, remaining limits).
    """
    config = make_config(
        NodePoolSpec("od", "on-demand", weight=10, limit_nodes=1),
        NodePoolSpec("spot", "spot", weight=50, limit_nodes=2),
    )
    cluster, queue, rec = make_cluster(config)
    cluster.scale_deployment(at(queue, 0.0), 5)
    queue.run_until(500.0)
    counts = cluster.nodes
    assert (counts.spot, counts.on_demand) == (2, 1)
    assert [n.pool for n in cluster.node_views()] == ["spot", "spot", "od"]
    assert cluster.status_replicas == 5 and cluster.ready_replicas == 3
    assert len(rec.of("ready")) == 3


# -- scale-in ---------------------------------------------------------------------


def test_scale_in_deletes_unassigned_then_not_ready_then_newest_ready() -> None:
    """ReplicaSet scale-in order: unassigned < not Ready < Ready for the shortest time.

    kubernetes/kubernetes pkg/controller/controller_utils.go (ActivePodsWithRanks);
    a deleted Ready pod gets terminationGracePeriodSeconds (30 s) before it is gone.
    A free node that already pulled the image is preferred (kube-scheduler ImageLocality).
    """
    cluster, queue, rec = make_cluster(make_config())
    cluster.scale_deployment(at(queue, 0.0), 1)  # pod 0: Ready at 151
    cluster.scale_deployment(at(queue, 200.0), 2)  # pod 1: node at 201, Ready at 351
    cluster.scale_deployment(at(queue, 400.0), 3)  # pod 2: nominated to a node launched at 401
    cluster.scale_deployment(at(queue, 402.0), 2)  # deletes pod 2 (unassigned), no callback
    assert rec.of("stopping") == []
    cluster.scale_deployment(at(queue, 403.0), 1)  # deletes pod 1: Ready more recently than pod 0
    assert rec.events[-1] == ("stopping", 403.0, 1, 433.0, "scale_in")
    assert cluster.status_replicas == 1 and cluster.ready_replicas == 1
    queue.run_until(433.0)
    assert rec.events[-1] == ("gone", 433.0, 1, None, None)
    # pod 3 binds at once to pod 1's old node (image cached): Ready at 500 + 60 s load
    cluster.scale_deployment(at(queue, 500.0), 2)
    cluster.scale_deployment(at(queue, 510.0), 1)  # deletes pod 3 (bound, not Ready)
    assert cluster.status_replicas == 1 and cluster.ready_replicas == 1
    queue.run_until(600.0)
    assert [pid for _, pid in rec.of("ready")] == [0, 1]
    assert [pid for _, pid in rec.of("gone")] == [1]
    cluster.scale_deployment(at(queue, 700.0), 2)  # again on the cached node
    queue.run_until(760.0)
    assert rec.of("ready")[-1] == (760.0, 4)


# -- balloons ---------------------------------------------------------------------


@pytest.mark.parametrize(("pulls", "ready_at"), [(True, 360.0), (False, 390.0)])
def test_balloon_preemption_gives_fast_start_and_a_replacement_node(
    pulls: bool, ready_at: float
) -> None:
    """A vLLM pod preempts a balloon (grace 0) on a Ready node and binds there at once.

    kubernetes.io pod-priority-preemption doc; the balloon's ReplicaSet
    recreates it Pending and Karpenter provisions a node for it after the batch
    window. A balloon running the serving image leaves it pulled on the node.
    """
    cluster, queue, rec = make_cluster(make_config(balloon_pulls_image=pulls))
    cluster.scale_balloons(at(queue, 0.0), 1)  # balloon node launched at 1, Ready at 61
    queue.run_until(299.0)
    assert cluster.nodes.balloons == 1 and len(cluster.node_views()) == 1
    cluster.scale_deployment(at(queue, 300.0), 1)
    views = cluster.node_views()
    assert views[0].pods == (1,) and views[0].balloons == ()  # balloon was pod 0
    queue.run_until(301.0)
    views = cluster.node_views()
    assert len(views) == 2 and views[1].launch_s == 301.0 and views[1].balloons != ()
    queue.run_until(ready_at)
    assert rec.of("ready") == [(ready_at, 1)]
    assert cluster.pod_start_samples_s == [ready_at - 300.0]


def test_vllm_pod_takes_an_in_flight_slot_nominated_to_a_balloon() -> None:
    """When a node turns Ready kube-scheduler binds the higher-priority pod first.

    kubernetes.io pod-priority-preemption doc (the scheduling queue is ordered by
    priority); the displaced balloon is Pending again and triggers a new batch.
    """
    cluster, queue, rec = make_cluster(make_config())
    cluster.scale_balloons(at(queue, 0.0), 1)  # node 0 launched at 1, Ready at 61
    cluster.scale_deployment(at(queue, 30.0), 1)  # takes node 0's slot
    queue.run_until(31.0)
    views = cluster.node_views()
    assert views[0].pods == (1,) and len(views) == 2 and views[1].launch_s == 31.0
    queue.run_until(151.0)
    assert rec.of("ready") == [(151.0, 1)]


# -- consolidation ----------------------------------------------------------------


def _empty_node_at_230() -> tuple[Cluster, EventQueue, Recorder]:
    config = make_config(NodePoolSpec("od", "on-demand", consolidate_after_s=30.0))
    cluster, queue, rec = make_cluster(config)
    cluster.scale_deployment(at(queue, 0.0), 1)  # node launched at 1
    cluster.scale_deployment(at(queue, 200.0), 0)  # pod gone at 230: last pod event
    return cluster, queue, rec


def test_empty_node_consolidated_after_consolidate_after_and_not_before() -> None:
    """Consolidatable once now - lastPodEventTime >= consolidateAfter; the 10 s loop then
    waits 15 s (consolidationTTL) and validates before deleting.

    kubernetes-sigs/karpenter pkg/controllers/disruption/emptiness.go, controller.go
    (pollingPeriod 10 s); pkg/controllers/nodeclaim/disruption/consolidation.go.
    """
    cluster, queue, rec = _empty_node_at_230()
    queue.run_until(274.9)  # Consolidatable at 260 (a loop tick), deleted at 275
    assert len(cluster.node_views()) == 1
    queue.run_until(275.0)
    assert cluster.node_views() == ()
    assert rec.of("gone") == [(230.0, 0)]
    assert cluster.cost_usd(1000.0) == pytest.approx((275.0 - 1.0) * OD_PRICE / 3600)
    assert cluster.gpu_hours(1000.0) == pytest.approx((275.0 - 1.0) / 3600)


def test_pod_during_validation_keeps_the_node() -> None:
    """A pod bound during the 15 s validation invalidates the empty-node command (emptiness.go)."""
    cluster, queue, rec = _empty_node_at_230()
    cluster.scale_deployment(at(queue, 265.0), 1)  # binds to the empty node, image cached
    queue.run_until(400.0)
    assert len(cluster.node_views()) == 1
    assert rec.of("ready")[-1] == (325.0, 1)


def test_balloon_keeps_its_node_from_emptiness() -> None:
    """A node that holds only balloons is not empty (Candidate has reschedulable pods)."""
    config = make_config(NodePoolSpec("od", "on-demand", consolidate_after_s=30.0))
    cluster, queue, _ = make_cluster(config)
    cluster.scale_balloons(at(queue, 0.0), 1)
    queue.run_until(1000.0)
    assert len(cluster.node_views()) == 1
    cluster.scale_balloons(at(queue, 1000.0), 0)
    queue.run_until(1060.0)  # empty from 1000, Consolidatable at 1030, deleted at 1045
    assert cluster.node_views() == ()


def test_consolidation_budget_ten_percent_rounded_up() -> None:
    """Budget nodes: "10%" of Initialized nodes rounded up: one node per command here.

    kubernetes-sigs/karpenter pkg/controllers/disruption/helpers.go
    (BuildDisruptionBudgetMapping); a successful command requeues the loop at once.
    """
    config = make_config(NodePoolSpec("od", "on-demand", consolidate_after_s=0.0, budget="10%"))
    cluster, queue, _ = make_cluster(config)
    cluster.scale_balloons(at(queue, 0.0), 10)  # ten nodes, Ready at 61
    cluster.scale_balloons(at(queue, 100.0), 0)  # all empty at 100
    gone: list[float] = []
    alive = 10
    while queue.peek_time() is not None and alive > 0:
        queue.step()
        now_alive = len(cluster.node_views())
        gone += [queue.now] * (alive - now_alive)
        alive = now_alive
    # the tick at 100 ran before the scale-in; pass at 110 -> deleted at 125, a pass
    # at once -> 140, ...
    assert gone == [125.0 + 15.0 * i for i in range(10)]


# -- spot -------------------------------------------------------------------------


def test_spot_notice_replaces_pods_at_once_and_node_goes_at_two_minutes() -> None:
    """Spot notice: NodeClaim deleted at once, pods evicted, ReplicaSet replaces them,
    instance reclaimed 2 min after the notice.

    aws/karpenter-provider-aws pkg/controllers/interruption/controller.go (no budget,
    no pre-spin); AWS EC2 docs (two-minute Spot interruption notice).
    """
    config = make_config(NodePoolSpec("spot", "spot", consolidate_after_s=600.0))
    cluster, queue, rec = make_cluster(config)
    cluster.scale_deployment(at(queue, 0.0), 1)
    queue.run_until(151.0)
    cluster.interrupt_node_at(200.0, 0)
    queue.run_until(200.0)
    assert rec.events[-1] == ("stopping", 200.0, 0, 230.0, "spot_interruption")
    assert cluster.interruptions == 1
    assert cluster.status_replicas == 1 and cluster.ready_replicas == 0
    queue.run_until(201.0)
    views = cluster.node_views()
    assert [(v.state, v.launch_s) for v in views] == [("deleting", 1.0), ("launching", 201.0)]
    assert views[1].pods == (1,)
    queue.run_until(319.9)
    assert rec.of("gone") == [(230.0, 0)]
    assert len(cluster.node_views()) == 2
    queue.run_until(320.0)
    assert [v.node_id for v in cluster.node_views()] == [1]
    queue.run_until(351.0)
    assert rec.of("ready") == [(151.0, 0), (351.0, 1)]
    assert cluster.cost_usd(400.0) == pytest.approx(
        ((320.0 - 1.0) + (400.0 - 201.0)) * SPOT_PRICE / 3600
    )


def test_spot_interruption_cuts_grace_to_the_notice() -> None:
    """With a grace period longer than the notice, pods are gone when the instance is."""
    config = make_config(
        NodePoolSpec("spot", "spot"), termination_grace_s=300.0, spot_notice_s=120.0
    )
    cluster, queue, rec = make_cluster(config)
    cluster.scale_deployment(at(queue, 0.0), 1)
    cluster.interrupt_node_at(200.0, 0)
    queue.run_until(400.0)
    assert ("stopping", 200.0, 0, 320.0, "spot_interruption") in rec.events
    assert rec.of("gone") == [(320.0, 0)]


def test_random_spot_interruptions_are_counted() -> None:
    """Each spot node draws an exponential interruption time from the per-hour rate."""
    config = make_config(NodePoolSpec("spot", "spot"), spot_interruptions_per_hour=6.0)
    cluster, queue, _ = make_cluster(config, seed=3)
    cluster.scale_deployment(at(queue, 0.0), 4)
    queue.run_until(3600.0)
    assert cluster.interruptions > 0
    assert cluster.status_replicas == 4


# -- configuration ----------------------------------------------------------------


def test_for_profile_uses_instance_prices_startup_and_advisor_band() -> None:
    """Node price = instance price (spot = on-demand x (1 - Spot Advisor savings));
    rate = -ln(1 - band midpoint) / 730 h (AWS Spot Instance Advisor bands are per month)."""
    profile = get_profile("llama-3-8b@g5.xlarge")
    config = ClusterConfig.for_profile(profile, spot=True)
    assert config.on_demand_usd_per_h == pytest.approx(1.006)
    assert config.spot_usd_per_h == pytest.approx(1.006 * 0.53)
    assert config.node_ready_s == (30.0, 60.0, 90.0)
    assert (config.image_pull_s, config.model_load_s) == (30.0, 60.0)
    assert config.spot_interruptions_per_hour == pytest.approx(-math.log(1 - 0.075) / 730.0)
    assert [(p.name, p.capacity_type, p.weight) for p in config.pools] == [
        ("gpu-spot", "spot", 50),
        ("gpu-on-demand", "on-demand", 10),
    ]
    shipped = ClusterConfig.for_profile(profile, spot=True, spot_first=False)
    assert [(p.name, p.weight, p.limit_nodes) for p in shipped.pools] == [
        ("gpu-on-demand", 50, 4),
        ("gpu-spot", 10, 32),
    ]
    plain = ClusterConfig.for_profile(profile, termination_grace_s=60.0)
    assert [p.capacity_type for p in plain.pools] == ["on-demand"]
    assert plain.termination_grace_s == 60.0


def test_for_profile_on_a_multi_gpu_instance() -> None:
    """One replica per GPU of a p5: eight per node, the whole instance billed."""
    config = ClusterConfig.for_profile(get_profile("llama-3-8b@p5.48xlarge"))
    assert (config.pods_per_node, config.gpus_per_node) == (8, 8)
    assert config.on_demand_usd_per_h == pytest.approx(55.04)
    cluster, queue, _ = make_cluster(replace(config, node_ready_s=(90.0, 90.0, 90.0)))
    cluster.scale_deployment(at(queue, 0.0), 9)
    queue.run_until(10.0)
    assert len(cluster.node_views()) == 2
    assert cluster.gpu_hours(3601.0) == pytest.approx(2 * 8 * 3600.0 / 3600)


def test_interruptions_per_hour_band_midpoint() -> None:
    """5-10 %/month -> 7.5 % survival loss over 730 h."""
    assert interruptions_per_hour((0.05, 0.10)) == pytest.approx(-math.log(0.925) / 730.0)
    with pytest.raises(ValueError, match="spot band"):
        interruptions_per_hour((0.2, 0.1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": "ten"}, "budget"),
        ({"weight": 101}, "weight"),
        ({"limit_nodes": -1}, "limit_nodes"),
        ({"consolidate_after_s": -1.0}, "consolidate_after_s"),
        ({"capacity_type": "reserved"}, "capacity_type"),
    ],
)
def test_nodepool_validation(kwargs: dict[str, object], message: str) -> None:
    """NodePoolSpec rejects what the NodePool CRD rejects (weight 0-100, budgets, limits)."""
    args: dict[str, object] = {"name": "p", "capacity_type": "on-demand"} | kwargs
    with pytest.raises(ValueError, match=message):
        NodePoolSpec(**args)  # type: ignore[arg-type]


def test_config_validation() -> None:
    """Bad triangles, empty pools, unknown overrides and negative replicas are ValueErrors."""
    with pytest.raises(ValueError, match="node_ready_s"):
        make_config(node_ready_s=(60.0, 30.0, 90.0))
    with pytest.raises(ValueError, match="at least one NodePool"):
        replace(make_config(), pools=())
    with pytest.raises(ValueError, match="unknown ClusterConfig"):
        ClusterConfig.for_profile(get_profile("llama-3-8b@g5.xlarge"), bogus=1)
    cluster, _, _ = make_cluster(make_config())
    with pytest.raises(ValueError, match="replicas"):
        cluster.scale_deployment(0.0, -1)


# -- invariants -------------------------------------------------------------------

_OPS = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=400.0),
        st.sampled_from(["scale", "balloons", "interrupt"]),
        st.integers(min_value=0, max_value=8),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, seed=st.integers(min_value=0, max_value=2**16))
def test_lifecycle_invariants(ops: list[tuple[float, str, int]], seed: int) -> None:
    """Every Ready pod gets exactly one pod_stopping then one pod_gone, or is alive at the end;
    status.replicas == spec after each scale call; pools never exceed their limits; cost grows.

    Sources as above: ReplicaSet replaces evicted pods at once (kubernetes
    pkg/controller/replicaset), NodePool limits (karpenter scheduler.go).
    """
    pools = (
        NodePoolSpec("spot", "spot", weight=50, limit_nodes=3, consolidate_after_s=60.0),
        NodePoolSpec("od", "on-demand", weight=10, limit_nodes=2, consolidate_after_s=30.0),
    )
    config = make_config(
        *pools,
        node_ready_s=(20.0, 60.0, 120.0),
        spot_interruptions_per_hour=4.0,
        pods_per_node=2,
    )
    cluster, queue, rec = make_cluster(config, seed=seed)
    limits = {p.name: p.limit_nodes for p in pools}
    last_cost = 0.0

    def advance(t: float) -> None:
        nonlocal last_cost
        while (nxt := queue.peek_time()) is not None and nxt <= t:
            queue.step()
            for name, limit in limits.items():
                assert sum(1 for v in cluster.node_views() if v.pool == name) <= (limit or 0)
            cost = cluster.cost_usd(queue.now)
            assert cost >= last_cost - 1e-12
            last_cost = cost
        queue.run_until(t)

    t = 0.0
    for dt, kind, value in ops:
        t += dt
        advance(t)
        if kind == "scale":
            cluster.scale_deployment(t, value)
            assert cluster.status_replicas == cluster.spec_replicas == value
        elif kind == "balloons":
            cluster.scale_balloons(t, value % 4)
            assert cluster.nodes.balloons == value % 4
        else:
            cluster.interrupt_node_at(t, value)
    advance(t + 2000.0)

    ready = [pid for _, pid in rec.of("ready")]
    stopping = [pid for _, pid in rec.of("stopping")]
    gone = [pid for _, pid in rec.of("gone")]
    assert len(set(ready)) == len(ready)
    assert len(set(stopping)) == len(stopping) and len(set(gone)) == len(gone)
    assert set(gone) <= set(stopping) <= set(ready)
    alive = {pid for v in cluster.node_views() for pid in v.pods}
    for pid in ready:
        assert (pid in gone) != (pid in alive)
    for kind, t_ev, _pid, deadline, _ in rec.events:
        if kind == "stopping":
            assert deadline is not None and deadline >= t_ev
    assert cluster.ready_replicas == len(set(ready) - set(stopping))
    assert cluster.ready_replicas <= cluster.status_replicas
    assert cluster.status_replicas == cluster.spec_replicas


def test_a_drained_pod_releases_its_slot_before_its_grace_period_ends() -> None:
    """vLLM exits once its last request is done: the listener's ``pod_drained``
    makes the pod gone then, and the empty node's consolidation clock starts
    from that instant rather than from the end of terminationGracePeriodSeconds
    (Karpenter's termination waits for pods to be gone, not for their grace)."""
    cluster, queue, rec = _empty_node_at_230()  # pod 0 stopping at 200, deadline 230
    cluster.pod_drained(at(queue, 205.0), 0)
    assert rec.of("gone") == [(205.0, 0)]
    cluster.pod_drained(at(queue, 206.0), 0)  # gone already: nothing more happens
    queue.run_until(260.0)
    assert rec.of("gone") == [(205.0, 0)]
    assert cluster.node_views() == ()  # consolidatable at 235, deleted by 260
    assert cluster.cost_usd(1000.0) < (275.0 - 1.0) * OD_PRICE / 3600


def test_pod_drained_ignores_a_pod_that_is_not_terminating() -> None:
    cluster, queue, rec = make_cluster(make_config())
    cluster.scale_deployment(at(queue, 0.0), 1)
    queue.run_until(200.0)
    cluster.pod_drained(200.0, 0)  # Ready, not deleted
    cluster.pod_drained(200.0, 99)  # unknown
    assert rec.of("gone") == [] and cluster.ready_replicas == 1
