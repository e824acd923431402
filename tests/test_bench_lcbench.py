"""YAHPO Gym's LCBench surrogate as the replay reads it (bench/replay_lcbench.py): the encoding gives YAHPO Gym's
answers, and a replayed LCBench trial reports exactly the surrogate's curve on the simulated clock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("onnxruntime")

from bench import replay_lcbench as lc  # noqa: E402
from bench.replay_backend import SimClock, replay_train  # noqa: E402

# (task, YAHPO configuration, YAHPO Gym 1.0.2's answer): computed once with yahpo-gym 1.0.2 (numpy 1.26, in a
# separate virtualenv: it pins numpy < 2) through BenchmarkSet("lcbench", instance=task).objective_function(...)
PINNED = [
    ("3945", {"epoch": 52, "batch_size": 64, "learning_rate": 0.01, "momentum": 0.9, "weight_decay": 0.0001,
              "num_layers": 3, "max_units": 256, "max_dropout": 0.2},
     {"time": 143.51068, "val_accuracy": 91.37455, "val_cross_entropy": 0.33157, "val_balanced_accuracy": 0.70267,
      "test_cross_entropy": 0.43403, "test_balanced_accuracy": 0.67323}),
    ("7593", {"epoch": 1, "batch_size": 512, "learning_rate": 0.0002, "momentum": 0.1, "weight_decay": 0.1,
              "num_layers": 1, "max_units": 64, "max_dropout": 0.0},
     {"time": 12.63962, "val_accuracy": 16.80849, "val_cross_entropy": 1.9223, "val_balanced_accuracy": 0.14773,
      "test_cross_entropy": 1.98997, "test_balanced_accuracy": 0.14971}),
    ("146212", {"epoch": 26, "batch_size": 91, "learning_rate": 0.0031622777, "momentum": 0.545,
                "weight_decay": 0.050005, "num_layers": 5, "max_units": 1024, "max_dropout": 1.0},
     {"time": 282.51572, "val_accuracy": 92.51302, "val_cross_entropy": 0.82464, "val_balanced_accuracy": 0.49221,
      "test_cross_entropy": 1.64247, "test_balanced_accuracy": 0.47959}),
    ("189909", {"epoch": 17, "batch_size": 16, "learning_rate": 0.1, "momentum": 0.99, "weight_decay": 1e-05,
                "num_layers": 2, "max_units": 100, "max_dropout": 0.7},
     {"time": 51.13398, "val_accuracy": 71.78982, "val_cross_entropy": 0.49764, "val_balanced_accuracy": 0.75097,
      "test_cross_entropy": 0.83669, "test_balanced_accuracy": 0.76211}),
]


@pytest.mark.parametrize(("task", "config", "answer"), PINNED, ids=[p[0] for p in PINNED])
def test_the_surrogate_gives_yahpo_gyms_pinned_answers(task: str, config: dict, answer: dict) -> None:
    row = lc.surrogate().query([config], task)[0]
    assert dict(zip(lc.OUTPUTS, row.tolist())) == pytest.approx(answer, rel=1e-4, abs=1e-4)


def test_the_surrogate_agrees_with_yahpo_gym_where_it_is_installed(tmp_path, monkeypatch) -> None:
    yahpo = pytest.importorskip("yahpo_gym")  # pins numpy < 2: absent beside numpy 2
    monkeypatch.setenv("HOME", str(tmp_path))
    yahpo.local_config.init_config()
    root = tmp_path / "data"
    (root / "lcbench").mkdir(parents=True)
    for f in ("model.onnx", "config_space.json", "encoding.json"):
        (root / "lcbench" / f).symlink_to(lc.DIR / f)
    yahpo.local_config.set_data_path(str(root))
    for task, config, _ in PINNED:
        bench = yahpo.benchmark_set.BenchmarkSet("lcbench", instance=task, multithread=False)
        theirs = bench.objective_function({"OpenML_task_id": task, **config})[0]
        ours = dict(zip(lc.OUTPUTS, lc.surrogate().query([config], task)[0].tolist()))
        assert ours == pytest.approx({k: float(v) for k, v in theirs.items()}, rel=1e-5)


def test_a_replayed_lcbench_trial_reports_the_surrogates_curve_from_epoch_2() -> None:
    """Epoch 1 of LCBench is the untrained network (YAHPO Gym's FAQ): the replay's epoch 1 is the surrogate's epoch
    2, for every arm (they all read `LCBench.nearest`), its seconds kept in the cumulative time; the end is epoch 52."""
    work = lc.LCBench("146212")
    point = {"batch_size": 91, "lr": 0.0031622777, "momentum": 0.545, "weight_decay": 0.050005, "model.depth": 5,
             "model.hidden": 1024, "dropout": 0.5}
    raw = lc.surrogate().curve(lc.yahpo_config(point), "146212")  # epochs 1-52, one batched call
    assert len(raw) == 52 and lc.EPOCHS == work.max_epochs == 51 and lc.FIRST_EPOCH == 2
    clock = SimClock(1, budget_s=1e9, charge_cpu=False)
    clock.enter(0)
    records = []
    result = replay_train(work, clock)(SimpleNamespace(settings={**point, "epochs": 51}, probe=None),
                                       on_record=records.append)
    assert [r.val_accuracy for r in records] == pytest.approx((raw[1:, 1] / 100).tolist())
    times = [float(max(raw[: e + 1, 0].max(), 0.0)) for e in range(52)]  # the running maximum (see the module)
    assert [r.train_time_s for r in records] == pytest.approx(times[1:])
    assert result.epochs_run == 51 and result.val_accuracy == pytest.approx(raw[-1, 1] / 100)
    assert clock.now() == pytest.approx(times[-1])  # the clock charged each epoch its time, nothing else
    assert work.nearest(point) is work.nearest(dict(point))  # cached
    from bench.replay import SPACES
    from bench.replay_arms import variant

    assert variant(SPACES["lcbench"]).train["epochs"] == 51  # the study trains the replay's 51 epochs


def test_the_space_and_tasks_are_lcbenchs() -> None:
    assert len(lc.tasks()) == 34 and "3945" in lc.tasks()
    sp = lc.space()
    assert sp["batch_size"] == {"type": "int", "low": 16.0, "high": 512.0, "log": True}
    assert sp["lr"]["log"] and sp["lr"]["low"] == pytest.approx(1e-4)
    assert set(lc.NAMES) == set(sp)


def test_the_reference_front_is_that_of_2000_random_configurations() -> None:
    """The fixed reference every arm is measured against (bench/yahpo_lcbench/fronts.json): the front of the first
    REFERENCE_RANDOM of the seed-0 random configurations whose median 52-epoch time sets the budget."""
    import numpy as np

    task = "167161"
    x = lc.random_configs(10_000, np.random.default_rng(0))[:lc.REFERENCE_RANDOM]
    front = lc.front_2d(lc.final_points(lc.surrogate(), task, x))
    saved = lc.fronts()[task]
    assert saved["random"] == lc.REFERENCE_RANDOM == 2_000
    assert np.array(saved["front"]) == pytest.approx(front, abs=1e-4)
    times = [t for t, _ in saved["front"]]
    assert times == sorted(times) and saved["median_time_s"] > times[0]
