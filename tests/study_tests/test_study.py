"""Studies end to end: every sampler and pruner, resume, fresh, failures that must not stop a study."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial

import autotune
from autotune.core.errors import ConfigError
from autotune.search import cost
from autotune.search.pruners import PRUNERS
from autotune.search.samplers import SAMPLERS
from autotune.study import runner as study_mod
from tests.support import tiny

SMALL_SPACE = {
    "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [64, 128]},
}
GRID_SPACE = {"batch_size": {"type": "categorical", "choices": [64, 128]}, "channels_last": {"type": "bool"}}


# each name's Optuna class, as the README documents them (an independent oracle for the registry)
SAMPLER_CLASSES = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
                   "gp": optuna.samplers.GPSampler, "cmaes": optuna.samplers.CmaEsSampler,
                   "nsga2": optuna.samplers.NSGAIISampler, "qmc": optuna.samplers.QMCSampler,
                   "grid": optuna.samplers.GridSampler}
PRUNER_CLASSES = {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
                  "percentile": optuna.pruners.PercentilePruner,
                  "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
                  "hyperband": optuna.pruners.HyperbandPruner, "wilcoxon": optuna.pruners.WilcoxonPruner}


def spy(monkeypatch: pytest.MonkeyPatch, cls: type, method: str) -> list[object]:
    """Calls of `cls.method` on an instance of exactly `cls` (the object each call was made on)."""
    calls: list[object] = []
    real = getattr(cls, method)

    def wrapped(self: object, *args: object, **kwargs: object) -> object:
        if type(self) is cls:
            calls.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, wrapped)
    return calls


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_runs(sampler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = SAMPLER_CLASSES[sampler]
    asked = spy(monkeypatch, want, "before_trial")  # Optuna calls it as each trial starts
    objectives = ["val_accuracy"] if sampler == "cmaes" else ["val_accuracy", "train_time_s"]
    cfg = tiny(tmp_path, study={"sampler": sampler, "n_trials": 2}, objectives=objectives,
               space=GRID_SPACE if sampler == "grid" else SMALL_SPACE, train={"epochs": 1})
    res = autotune.run(cfg)
    trials = res.study.get_trials()
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    used = res.study.sampler
    while type(used) is not want and hasattr(used, "inner"):  # (candidates auto, stopped as shorter: wrappers)
        used = used.inner
    assert type(used) is want
    assert len(asked) == 2 and all(s is used for s in asked)  # that sampler started both trials
    if sampler == "grid":  # two different points of the grid
        assert trials[0].params != trials[1].params and {t.system_attrs.get("grid_id") for t in trials} <= {0, 1, 2, 3}
    assert res.best is not None and res.best.metrics["val_accuracy"] > 0


def test_seeded_sampler_repeats(tmp_path: Path) -> None:
    """`candidates: 1`: the seeded sampler's points as they are (with `auto` the mode proposing each trial follows
    measured CPU times, which busy cores change: docs/concepts/strategy.md)."""
    params = []
    for name in ("a", "b"):
        cfg = tiny(tmp_path, study={"name": name, "n_trials": 3, "sampler": "random", "seed": 5, "candidates": 1},
                   space=SMALL_SPACE, train={"epochs": 1})
        params.append([t.params for t in autotune.run(cfg).study.trials])
    assert params[0] == params[1]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_seeded_study_never_proposes_its_first_point_twice(sampler: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The strategy's random mode draws from a stream of its own: seeded like the inner sampler (a random one, or
    TPE's start-up), it drew the same point, so trial 1 (the inner sampler's) repeated trial 0 (random mode's). The
    CPU cap's modes are pinned here as a machine where trial 0 trains for a second would choose them."""
    modes = iter(["random", "inner", "inner"])
    monkeypatch.setattr(cost.Meter, "mode", lambda self: next(modes))
    cfg = tiny(tmp_path, study={"name": sampler, "n_trials": 3, "sampler": sampler, "seed": 5},
               space=SMALL_SPACE, train={"epochs": 1})
    points = [tuple(sorted(t.params.items())) for t in autotune.run(cfg).study.trials]
    assert len(set(points)) == len(points), points


@pytest.mark.parametrize("pruner", [p for p, k in PRUNERS.items() if k.objectives != "several" and p != "threshold"])
def test_every_single_objective_pruner(pruner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = PRUNER_CLASSES[pruner]
    consulted = spy(monkeypatch, want, "prune")
    cfg = tiny(tmp_path, objectives=["val_accuracy"], pruning={"pruner": pruner}, space=SMALL_SPACE,
               study={"n_trials": 2}, train={"epochs": 2})
    res = autotune.run(cfg)
    assert len(res.study.trials) == 2
    assert all(len(t.intermediate_values) >= 1 for t in res.study.trials)  # trial.report really ran
    assert type(res.study.pruner) is want
    assert all(p is res.study.pruner for p in consulted)  # that pruner judged every reported epoch
    assert len(consulted) == sum(len(t.intermediate_values) for t in res.study.trials)


def test_threshold_pruner_prunes(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, objectives=["val_accuracy"], pruning={"pruner": "threshold", "pruner_args": {"lower": 0.99}},
               study={"n_trials": 1}, train={"epochs": 3, "lr": 1e-4})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "pruned"


def test_resume_and_fresh(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, study={"n_trials": 2}, train={"epochs": 1})
    autotune.run(cfg)
    more = tiny(tmp_path, study={"n_trials": 3}, train={"epochs": 1})
    res = autotune.run(more)  # resumes: one more trial to reach 3
    assert [t.number for t in res.study.trials] == [0, 1, 2]
    assert len(autotune.run(more).study.trials) == 3  # already there: nothing runs
    assert len(autotune.run(cfg, fresh=True).study.trials) == 2


def test_divergent_trial_pruned_and_study_goes_on(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, study={"n_trials": 2, "sampler": "random"}, train={"epochs": 3},
               space={"lr": {"type": "categorical", "choices": [1e4]}, "optimizer": {"type": "categorical",
                                                                              "choices": ["adam"]}})
    res = autotune.run(cfg)
    for t in res.study.trials:
        assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "diverged"
        assert t.user_attrs["stop_epoch"] == 1


def test_oom_is_pruned_with_reason_and_study_finishes(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, model={"factory": "tests.factories:oom_above_64"}, study={"n_trials": 4, "sampler": "grid"},
               space={"batch_size": {"type": "categorical", "choices": [32, 256]}}, train={"epochs": 1})
    res = autotune.run(cfg)
    by_bs = {t.params["batch_size"]: t for t in res.study.trials}
    assert len(res.study.trials) == 2  # the grid is exhausted: both points ran
    assert by_bs[256].state.name == "PRUNED" and by_bs[256].user_attrs["stop_reason"] == "oom"
    assert by_bs[32].state.name == "COMPLETE"


def test_oom_retry_smaller_batch(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, model={"factory": "tests.factories:oom_above_64"}, study={"n_trials": 1},
               train={"epochs": 1, "batch_size": 128}, pruning={"oom": "retry_smaller_batch"})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "COMPLETE" and t.user_attrs["oom_retried"] and t.user_attrs["batch_size_used"] == 64


def test_unreachable_storage_is_config_error(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, study={"storage": "postgresql+psycopg://u:pw@127.0.0.1:1/x"})
    with pytest.raises(ConfigError, match=r"study\.storage: cannot reach postgresql\+psycopg://u:\*\*\*@127"):
        autotune.run(cfg)


def test_direction_mismatch_on_resume(tmp_path: Path) -> None:
    autotune.run(tiny(tmp_path, study={"n_trials": 1}, train={"epochs": 1}))
    with pytest.raises(ConfigError, match=r"has objectives \[val_accuracy \(maximize\), train_time_s \(minimize\)\], "
                                          r"this config \[val_loss \(minimize\)\]"):
        autotune.run(tiny(tmp_path, objectives=["val_loss"], study={"n_trials": 1}, train={"epochs": 1}))


def test_study_records_what_reproduces_it(tmp_path: Path) -> None:
    res = autotune.run(tiny(tmp_path, study={"n_trials": 1}, train={"epochs": 1}))
    ua = res.study.user_attrs
    assert set(ua["versions"]) >= {"autotune", "torch", "optuna"} and ua["config"]["study"]["name"] == "t"
    t = res.study.trials[0]
    assert {"seed", "settings", "history", "device", "precision", "samples_per_s"} <= set(t.user_attrs)
    assert len(t.user_attrs["history"]) == 1


def test_public_api(tmp_path: Path) -> None:
    cfg = autotune.load_config(str(Path(__file__).parents[2] / "search_spaces/cnn.yaml"),
                               overrides={"study.n_trials": 2, "study.storage": f"sqlite:///{tmp_path}/a.db",
                                          "train.epochs": 2, "space": {}})
    res = autotune.run(cfg)
    assert isinstance(res, autotune.TuneResult)
    assert res.pareto and all(isinstance(p, autotune.TrialSummary) for p in res.pareto)
    rows = res.to_dataframe()
    assert len(rows) == 2
    tr = autotune.train(cfg, params={"lr": 3e-3, "optimizer": "adam", "batch_size": 128})
    assert isinstance(tr, autotune.TrainResult)
    assert tr.val_accuracy > 0.8 and tr.train_time_s > 0 and tr.samples_per_s > 0 and len(tr.history) == 2
    with pytest.raises(ConfigError, match=r"params: optimiser: unknown setting \(did you mean 'optimizer'\?\)"):
        autotune.train(cfg, params={"optimiser": "adam"})


def test_knee_prefers_fewer_errors_over_tiny_time_gain() -> None:
    from optuna.trial import create_trial

    from autotune.search.results import knee

    fast = create_trial(values=[0.94, 0.76])
    accurate = create_trial(values=[0.983, 0.87])
    cheap = create_trial(values=[0.62, 0.20])
    assert knee([fast, accurate, cheap], ["maximize", "minimize"]) is accurate


def test_trial_that_raises_is_recorded_and_study_goes_on(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, model={"factory": "tests.factories:broken_above_64"}, study={"n_trials": 2, "sampler": "grid"},
               space={"batch_size": {"type": "categorical", "choices": [32, 128]}}, train={"epochs": 1})
    trials = {t.params["batch_size"]: t for t in autotune.run(cfg).study.trials}
    assert trials[128].state.name == "FAIL" and trials[128].user_attrs["stop_reason"] == "error"
    assert "a bug in the user's model" in trials[128].user_attrs["error"]
    assert trials[32].state.name == "COMPLETE"


def test_precision_the_device_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.training import accel

    real = accel.precision_error
    monkeypatch.setattr(accel, "precision_error",
                        lambda dev, p: "bf16 is not supported here (simulated)" if p == "bf16" else real(dev, p))
    with pytest.raises(ConfigError, match=r"train\.precision: bf16 cannot run on cpu: bf16 is not supported"):
        autotune.run(tiny(tmp_path, train={"precision": "bf16"}))
    assert not (tmp_path / "t.db").exists()
    cfg = tiny(tmp_path, study={"n_trials": 2, "sampler": "grid"}, train={"epochs": 1},
               space={"precision": {"type": "categorical", "choices": ["fp32", "bf16"]}})
    trials = {t.params["precision"]: t for t in autotune.run(cfg).study.trials}
    assert trials["bf16"].state.name == "PRUNED" and trials["bf16"].user_attrs["stop_reason"] == "unsupported"
    assert trials["fp32"].state.name == "COMPLETE"


def test_the_run_header_names_the_threads_the_trials_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """This process runs 2 torch threads; trials fixed at cpu_threads 1 use 1, and the header says 1 (or 'threads
    searched' when the space searches them), as each trial's own device attr does."""
    import torch

    from autotune.observe import progress
    from autotune.study import runner as study_mod

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fixed = tiny(tmp_path, study={"name": "fixed", "n_trials": 1}, train={"epochs": 1, "cpu_threads": 1})
        progress.RunView(fixed, plain=True).on_start(study_mod.open_study(fixed), 1)
        assert capsys.readouterr().out.splitlines()[0].endswith(f"device cpu ({platform_name()}, 1 threads)")
        assert study_mod.open_study(fixed).user_attrs["device"].endswith(", 1 threads)")
        trial = autotune.run(fixed).study.trials[0]
        assert trial.user_attrs["device"].endswith(", 1 threads)")
        searched = tiny(tmp_path, study={"name": "searched", "n_trials": 1},
                        space={"cpu_threads": {"type": "categorical", "choices": [1, 2]}})
        progress.RunView(searched, plain=True).on_start(study_mod.open_study(searched), 1)
        assert capsys.readouterr().out.splitlines()[0].endswith(", threads searched)")
    finally:
        torch.set_num_threads(old)


def platform_name() -> str:
    import platform

    return platform.processor() or platform.machine()


def _process_state() -> tuple[object, ...]:
    import gc
    import signal
    import sys
    import warnings

    return gc.get_freeze_count(), list(warnings.filters), signal.getsignal(signal.SIGTERM), list(sys.path)


def test_a_run_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    """No freeze of the collector, warning filter, signal handler or import path outlives a run (a notebook's)."""
    autotune.run(tiny(tmp_path / "warm", study={"n_trials": 1}, train={"epochs": 1}))  # first-use imports
    before = _process_state()
    res = autotune.run(tiny(tmp_path, study={"n_trials": 2}, train={"epochs": 1}))
    assert len(res.study.trials) == 2
    assert _process_state() == before
    assert before[0] == 0


class Hook:
    """A RunCallback, as MLflow's tracker is one: what the study layer tells it, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, study: optuna.Study) -> None:
        self.events.append(("start", len(study.trials)))

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.events.append(("trial", trial.number))

    def finish(self, study: optuna.Study, status: str | None = "FINISHED") -> None:
        self.events.append(("finish", status))


def test_run_callbacks_hear_the_start_each_trial_and_how_the_run_ended(tmp_path: Path) -> None:
    hook, plain = Hook(), []
    cfg = tiny(tmp_path, study={"n_trials": 2}, train={"epochs": 1})
    study_mod.run(cfg, callbacks=[hook, lambda s, t: plain.append(t.number)])
    assert hook.events == [("start", 0), ("trial", 0), ("trial", 1), ("finish", "FINISHED")]
    assert plain == [0, 1]  # a plain Optuna callback has no start or finish, and still hears every trial
    assert isinstance(hook, study_mod.RunCallback) and not isinstance(plain.append, study_mod.RunCallback)

    def interrupt(study: optuna.Study, trial: FrozenTrial) -> None:
        raise KeyboardInterrupt

    killed = Hook()
    with pytest.raises(KeyboardInterrupt):
        study_mod.run(tiny(tmp_path, study={"name": "k", "n_trials": 3}, train={"epochs": 1}),
                      callbacks=[killed, interrupt])
    assert killed.events == [("start", 0), ("trial", 0), ("finish", "KILLED")]


def test_the_budget_stops_a_shared_study_without_callbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FinishedBudget counts what its objective finishes (pruned too, NaN not: Optuna fails it) and stops the
    study when the storage holds n_trials finished, others' trials included; `run` hands Optuna no callbacks of
    its own (for callbacks Optuna reads each trial back from the storage)."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    calls = iter([[0.5, 1.0], [float("nan"), 1.0], "pruned", [0.6, 1.0], [0.7, 1.0], [0.8, 1.0]])

    def inner(trial: optuna.Trial) -> list[float]:
        out = next(calls)
        if trial.number == 3:  # another process finishes two trials meanwhile
            for _ in range(2):
                study.add_trial(optuna.trial.create_trial(values=[0.1, 1.0]))
        if out == "pruned":
            raise optuna.TrialPruned()
        return out

    budget = study_mod.FinishedBudget(inner, 6, study, refresh_s=0.0)
    study.optimize(budget, n_trials=20)
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") + states.count("PRUNED") == 6 and states.count("FAIL") == 1
    assert len(states) == 7  # 5 of its own (the NaN one failed) and the other process's 2: none past the budget

    seen: list[object] = []
    real = optuna.Study.optimize
    monkeypatch.setattr(optuna.Study, "optimize",
                        lambda self, *a, **k: seen.append(k["callbacks"]) or real(self, *a, **k))
    study_mod.run(tiny(tmp_path, study={"n_trials": 1}))
    assert seen == [None]
