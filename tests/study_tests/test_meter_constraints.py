"""Peak memory and energy as objectives and constraints, through a real study: `constraints.max_peak_memory_mb`
keeps an over-cap trial off the front and out of the recommendation, a trial crossing it mid-training is stopped
with its reason, `energy_j` where nothing can measure it is one validation error (exit 2), and the trial line, the
report and `best` show what was measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

import autotune
from autotune import config
from autotune.cli import main
from autotune.core import ConfigError
from autotune.observe import report_data, report_html
from autotune.observe.progress import print_best
from autotune.search import EPOCH_VALUES
from autotune.training.context import energy


def _study(tmp_path: Path, **sections: Any) -> config.RunConfig:
    raw: dict[str, Any] = {
        "study": {"name": "m", "storage": f"sqlite:///{tmp_path}/m.db", "n_trials": 2, "sampler": "grid"},
        "trainer": "tests.user_fits:fit_holds_memory",
        "train": {"epochs": 1, "batch_size": 64, "device": "cpu"},
        "space": {"user.hold_mb": {"type": "categorical", "choices": [0, 300]}},
        "objectives": [{"metric": "score", "direction": "maximize"},
                       {"metric": "peak_memory_mb", "direction": "minimize"}],
    }
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "m.yaml"))


def test_over_cap_trial_is_off_the_front_and_not_recommended(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two trials, each on the front unconstrained (more memory, more score); the one over the cap finishes (its one
    epoch is complete: no rule discards complete training) but is infeasible: the front and `best` leave it out."""
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "powercap")  # no energy counter, wherever this runs
    cap = 200  # MB a trial takes over what the process held when it began (memory.py)
    res = autotune.run(_study(tmp_path, constraints={"max_peak_memory_mb": cap}))
    by = {t.params["user.hold_mb"]: t for t in res.study.trials}
    big, small = by[300], by[0]
    assert big.state == small.state == TrialState.COMPLETE
    assert big.user_attrs["peak_memory_mb"] > cap > small.user_attrs["peak_memory_mb"]
    assert big.constraints == {"peak_memory_mb": pytest.approx(big.user_attrs["peak_memory_mb"] - cap)}
    assert small.constraints["peak_memory_mb"] < 0
    assert big.values[1] == big.user_attrs["peak_memory_mb"]  # the objective is the measured peak
    # per epoch too: what the Pareto pruners compare (as they do train_time_s)
    assert big.user_attrs[EPOCH_VALUES] == [[300.0, big.user_attrs["peak_memory_mb"]]]
    assert [s.number for s in res.pareto] == [small.number] and res.best.number == small.number
    assert big.user_attrs["meters"]["peak_memory_mb"] in ("vmhwm", "vmrss_sampled")  # what measured it
    # the report: the infeasible point drawn as such, the metric in the table; `best` shows it
    points = {p["number"]: p["category"] for p in report_data.pareto_data(res.study, res.config)["points"]}
    assert points[big.number] == "infeasible" and points[small.number] == "pareto"
    rows = report_data.top_trials(res.study, res.config)
    table = report_html._table(rows, ["score", "peak_memory_mb"])
    assert "<th>peak_memory_mb</th>" in table and "<th>energy_j</th>" not in table  # (no counter here: no column)
    capsys.readouterr()
    print_best(res)
    peak = small.user_attrs["peak_memory_mb"]
    assert f"peak_memory_mb {peak:,.0f}MB" in capsys.readouterr().out


def test_a_trial_crossing_the_cap_mid_training_is_stopped(tmp_path: Path) -> None:
    cap = 300
    cfg = _study(tmp_path, study={"name": "m", "storage": f"sqlite:///{tmp_path}/m.db", "n_trials": 1},
                 train={"epochs": 3, "batch_size": 64, "device": "cpu", "user.hold_mb": 200}, space={},
                 constraints={"max_peak_memory_mb": cap})
    t = autotune.run(cfg).study.trials[0]
    assert t.state == TrialState.PRUNED and t.user_attrs["stop_reason"] == "memory"
    assert t.user_attrs["stop_epoch"] == 2
    peak = t.user_attrs["history"][-1]["peak_memory_mb"]
    assert t.user_attrs["stop_detail"] == f"peak {peak:.0f} MB > max_peak_memory_mb {cap:g}"


@pytest.mark.parametrize(("section", "where"), [
    ({"objectives": ["val_accuracy", "energy_j"]}, "objectives.1.metric"),
    ({"constraints": {"max_energy_j": 100}}, "constraints.max_energy_j"),
])
def test_energy_without_a_counter_is_one_validation_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], section: dict[str, Any],
                                                          where: str) -> None:
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "powercap")  # no RAPL (as on this machine)
    raw = {"study": {"name": "e"}, "train": {"device": "cpu"}, **section}
    with pytest.raises(ConfigError) as e:
        config.from_dict(raw, source="e.yaml")
    assert str(e.value) == (
        f"e.yaml: {where}: energy_j cannot be measured on device cpu here: no readable RAPL counter "
        f"({tmp_path / 'powercap'}/intel-rapl:*/energy_uj: absent on this machine); allowed where measured: "
        "peak_memory_mb on a CUDA GPU or a Linux CPU, energy_j on an NVIDIA GPU through NVML (nvidia-ml-py) or a CPU "
        "with readable RAPL counters")
    (tmp_path / "e.yaml").write_text("study: {name: e}\ntrain: {device: cpu}\n"
                                     + "\n".join(f"{k}: {v}" for k, v in section.items()).replace("'", ""))
    assert main(["validate", str(tmp_path / "e.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{where}: energy_j cannot be measured on device cpu here" in err
    # as a plain record energy is simply absent: the same study without it validates
    config.from_dict({"study": {"name": "e"}, "train": {"device": "cpu"}}, source="e.yaml")


def test_constraint_caps_are_catalogued_metrics() -> None:
    """Each `max_METRIC` constraint names a catalogued metric (derived from the schema, not a copied list)."""
    from autotune.spec import CATALOGUE
    from autotune.spec.schema import Constraints

    caps = Constraints(max_peak_memory_mb=1, max_energy_j=2, max_accuracy_drop=0.1).caps()
    assert caps == {"peak_memory_mb": 1.0, "energy_j": 2.0} and set(caps) <= set(CATALOGUE)
