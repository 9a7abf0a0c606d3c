"""Resource requests and placement across nodes, as plain functions of what the cluster has."""

import pytest

from dsac.config import Config
from dsac.distributed.topology import SHARD_ADD_CALLS_PER_S, chunk_period, plan_resources
from dsac.errors import DsacError


def sections(config):
    """What the plans are made from: a config's resources and flow sections."""
    config = config.validate()
    return config.resources, config.flow


def plan_of(config, cluster, nodes=None):
    """The plan of ``config`` on ``cluster``, as the driver asks for it."""
    return plan_resources(*sections(config), cluster, nodes, shards_given="num_replay_shards" not in config.defaulted)


def node(node_id, cpus, gpus=0, alive=True):
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {"NodeID": node_id * 8, "Alive": alive, "NodeManagerHostname": f"host-{node_id}", "Resources": resources}


def test_laptop_eight_workers_on_two_cpus_fit_with_fractional_requests():
    plan = plan_of(Config(num_workers=8).validate(), {"CPU": 2.0}, [node("a", 2)])
    assert plan.learner_cpus == 1.0 and plan.learner_gpus == 0.0
    assert plan.worker_cpus * 8 + plan.learner_cpus + plan.evaluator_cpus <= 2.0
    assert plan.worker_nodes == []  # one node: nothing to place


def test_workers_spread_over_nodes_and_the_learner_lands_on_the_gpu_node():
    nodes = [node("a", 8), node("b", 8), node("g", 8, gpus=1), node("dead", 8, alive=False)]
    config = Config(num_workers=12).validate()
    plan = plan_of(config, {"CPU": 24.0, "GPU": 1.0}, nodes)
    assert plan.learner_gpus == 1.0 and plan.learner_nodes == ["g" * 8]
    counts = plan.workers_per_node()
    assert sum(counts.values()) == 12 and "host-dead (node deaddead)" not in counts
    # Every live node gets workers, in proportion to the CPUs left after the learner and evaluator.
    assert len(counts) == 3 and min(counts.values()) >= 3 and max(counts.values()) <= 5
    assert counts["host-g (node gggggggg)"] == min(counts.values())  # the learner's node takes fewest


def test_two_learners_share_a_small_machine_and_gpu_requests_must_exist():
    plan = plan_of(Config(num_workers=4, num_learners=2).validate(), {"CPU": 2.0}, [node("a", 2)])
    assert plan.learner_cpus * 2 + plan.worker_cpus * 4 + plan.evaluator_cpus <= 2.0 + 1e-9
    with pytest.raises(DsacError, match="has 0 GPUs"):
        plan_of(Config(learner_gpus=1).validate(), {"CPU": 2.0}, [node("a", 2)])
    with pytest.raises(DsacError, match="do not fit"):
        plan_of(Config(num_workers=4, worker_cpus=1.0).validate(), {"CPU": 2.0}, [node("a", 2)])


def test_many_workers_get_more_replay_shards_and_longer_chunks():
    """One shard per 64 workers by default, and the workers on a shard send it at most
    SHARD_ADD_CALLS_PER_S chunks a second together."""
    few, one_shard, two_shards = (Config(num_workers=n).validate() for n in (8, 64, 128))
    assert (few.num_replay_shards, one_shard.num_replay_shards, two_shards.num_replay_shards) == (1, 1, 2)
    assert chunk_period(*sections(few)) == few.chunk_seconds  # 8 workers: 80 calls/s, under the bound
    assert chunk_period(*sections(one_shard)) == chunk_period(*sections(two_shards)) == 64 / SHARD_ADD_CALLS_PER_S
    assert plan_of(one_shard, {"CPU": 64.0}).chunk_seconds == chunk_period(*sections(one_shard))


def test_several_nodes_get_replay_beside_their_writers_and_a_weights_cache_each():
    nodes = [node("a", 4), node("b", 4), node("c", 2)]
    plan = plan_of(Config(num_workers=8).validate(), {"CPU": 10.0}, nodes)
    worker_nodes = set(plan.worker_nodes)
    assert plan.num_shards == len(worker_nodes) == 3  # the default grows to one per node with workers
    assert sorted(plan.shard_nodes) == sorted(worker_nodes)
    for i, node_id in enumerate(plan.worker_nodes):  # every worker writes beside itself
        assert plan.shard_nodes[plan.shard_of(i)] == node_id
    assert sum(plan.writers_of(k) for k in range(plan.num_shards)) == 8
    assert set(plan.cache_nodes) == worker_nodes | {plan.evaluator_node}
    assert plan.cache_index(plan.worker_nodes[0]) is not None
    # A number of shards the user chose is kept: fewer shards than nodes leave some nodes
    # writing elsewhere, more give the busiest nodes several.
    one = plan_of(Config(num_workers=8, num_replay_shards=1).validate(), {"CPU": 10.0}, nodes)
    assert one.num_shards == 1 and set(one.worker_shards) == {0}
    five = plan_of(Config(num_workers=8, num_replay_shards=5).validate(), {"CPU": 10.0}, nodes)
    assert five.num_shards == 5 and set(five.shard_nodes) == worker_nodes
    assert all(five.shard_nodes[five.shard_of(i)] == n for i, n in enumerate(five.worker_nodes))
    # One node: the shards stay beside the parameter server, workers pull it directly.
    single = plan_of(Config(num_workers=8).validate(), {"CPU": 2.0}, [node("a", 2)])
    assert single.shard_nodes == [] and single.cache_nodes == [] and single.shard_of(5) == 5 % single.num_shards


def test_a_tune_trial_is_sized_from_its_own_flags_in_one_placement_group():
    """A distributed trial's bundles: its driver, each learner (GPUs only when asked for), each
    rollout worker (1 CPU unless --worker_cpus), the evaluator; a local trial one CPU."""
    from dsac.distributed.topology import EVALUATOR_CPUS, trial_bundles, trial_plan
    from dsac.tune.trainable import resource_bundles

    config = Config(num_workers=3, num_learners=2, learner_gpus=0.5).validate()
    assert trial_bundles(*sections(config)) == [{"CPU": 1.0}, {"CPU": 1.0, "GPU": 0.5}, {"CPU": 1.0, "GPU": 0.5},
                                     {"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}, {"CPU": EVALUATOR_CPUS}]
    assert trial_bundles(*sections(Config(num_workers=2, worker_cpus=0.25)))[2:] == [
        {"CPU": 0.25}, {"CPU": 0.25}, {"CPU": EVALUATOR_CPUS}]
    bundles, plan = trial_bundles(*sections(config)), trial_plan(*sections(config))  # each role its own bundle
    assert [bundles[plan.learner_bundle(j)] for j in range(2)] == [{"CPU": 1.0, "GPU": 0.5}] * 2
    assert [plan.worker_bundle(i) for i in range(3)] == [3, 4, 5] and plan.evaluator_bundle() == len(bundles) - 1
    plan = trial_plan(*sections(Config(num_workers=2)), placement_group="pg")
    assert plan.learner_gpus == 0 and plan.total_cpus == 1 + 1 + 2 + EVALUATOR_CPUS
    assert "Tune trial's placement group of 4.1 CPUs" in plan.describe()
    assert resource_bundles({"env": "CartPole-v1", "local": True}) == [{"CPU": 1.0}]
    assert resource_bundles({"env": "CartPole-v1", "lr": -1}) == [{"CPU": 1.0}]  # refused in the trial's setup
