"""Syne Tune's MOASHA on the replay: Syne Tune's own simulator backend (`UserBlackboxBackend`, simulated time) over
a Blackbox that answers from the same recording as every other arm (`Workload.nearest`, the 1-nearest-neighbour
surrogate), `epochs` searched as in the space and the trial's own maximum resource (`max_resource_attr`), MOASHA
(non-dominated sorting, Syne Tune's defaults: grace period 1, reduction factor 3, one bracket) over validation
error and training time.

A trial that reaches its own epochs is complete (its accuracy and training time count toward the front, as a
COMPLETE trial of an Optuna study does); one MOASHA stops earlier is pruned. `stopped_count`: a stopped trial's
last result counts toward the front as well (the measure most favourable to MOASHA, a multi-fidelity method whose
users read every reported result).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Any

import numpy as np

from autotune.spec import RunConfig
from bench.replay_workload import Workload

Events = list[tuple[float, float | None, float | None, str]]
OBJECTIVES = ["error", "train_time_s", "elapsed_time"]


def config_space(workload: Workload, cfg: RunConfig) -> dict[str, Any]:
    from syne_tune.config_space import choice, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for key, spec in workload.space.items():
        if spec["type"] in ("categorical", "bool"):
            out[key] = choice(list(spec.get("choices") or [False, True]))
        elif spec["type"] == "int":
            out[key] = randint(int(spec["low"]), int(spec["high"]))
        else:
            out[key] = (loguniform if spec.get("log") else uniform)(float(spec["low"]), float(spec["high"]))
    e = cfg.space["epochs"]
    out["epochs"] = randint(int(e.low), int(e.high))
    return out


def blackbox(workload: Workload, space: dict[str, Any]) -> Any:
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.config_space import randint

    class Recorded(Blackbox):
        def __init__(self) -> None:
            super().__init__(configuration_space=space, fidelity_space={"epoch": randint(1, workload.max_epochs)},
                             objectives_names=OBJECTIVES)

        @property
        def fidelity_values(self) -> np.ndarray:
            return np.arange(1, workload.max_epochs + 1)

        def _objective_function(self, configuration: dict[str, Any], fidelity: Any = None,
                                seed: int | None = None) -> np.ndarray:
            curve = workload.nearest({k: v for k, v in configuration.items() if k in workload.space})
            rows, elapsed = [], curve.setup_s
            for epoch in range(1, workload.max_epochs + 1):
                if epoch <= len(curve.epochs):
                    e = curve.epochs[epoch - 1]
                    elapsed += curve.epoch_s(epoch)
                    rows.append([1.0 - float(e["val_accuracy"]), float(e["train_time_s"]), elapsed])
                else:  # the recording diverged before here: chance accuracy, no further time
                    elapsed += 0.01
                    rows.append([1.0, rows[-1][1] if rows else 0.0, elapsed])
            return np.asarray(rows)

    return Recorded()


def run_moasha(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
               charge_cpu: bool = True, stopped_count: bool = False) -> Events:
    """`charge_cpu` is every runner's argument; Syne Tune's simulator keeps its own clock, so it has no effect here."""
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.backend.trial_status import Trial
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA
    from syne_tune.tuner_callback import TunerCallback

    space = config_space(workload, cfg)
    events: Events = []
    ended: set[int] = set()

    class Collect(TunerCallback):
        def on_trial_result(self, trial: Trial, status: str, result: dict[str, Any], decision: str) -> None:
            at = float(result.get("st_tuner_time", 0.0))
            if trial.trial_id in ended or at > budget:
                return
            if int(result["epoch"]) >= int(trial.config["epochs"]):
                ended.add(trial.trial_id)
                events.append((at, 1.0 - float(result["error"]), float(result["train_time_s"]), "COMPLETE"))
            elif decision == "STOP":
                ended.add(trial.trial_id)
                # stopped_count: a stopped trial's last result counts toward the front too (Syne Tune reports it;
                # with a constant learning rate it is what training that many epochs gives)
                events.append((at, 1.0 - float(result["error"]) if stopped_count else None,
                               float(result["train_time_s"]) if stopped_count else None, "PRUNED"))

    np.random.seed(seed)  # MOASHA draws its bracket with numpy's global generator
    backend = UserBlackboxBackend(blackbox=blackbox(workload, space), elapsed_time_attr="elapsed_time",
                                  max_resource_attr="epochs", seed=0, tuner_sleep_time=0.05)
    scheduler = MOASHA(space, metrics=["error", "train_time_s"], do_minimize=True, time_attr="epoch",
                       max_t=workload.max_epochs, random_seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("SYNETUNE_FOLDER")
        os.environ["SYNETUNE_FOLDER"] = tmp
        try:
            tuner = Tuner(trial_backend=backend, scheduler=scheduler, n_workers=workers, sleep_time=0,
                          stop_criterion=StoppingCriterion(max_wallclock_time=budget), results_update_interval=1e9,
                          print_update_interval=1e9, callbacks=[SimulatorCallback(), Collect()], save_tuner=False,
                          tuner_name=f"replay-moasha-{seed}-{workers}", suffix_tuner_name=True)
            with contextlib.redirect_stdout(io.StringIO()):  # its progress tables, per trial
                tuner.run()
        finally:
            if old is None:
                os.environ.pop("SYNETUNE_FOLDER", None)
            else:
                os.environ["SYNETUNE_FOLDER"] = old
    return sorted(events, key=lambda e: e[0])


__all__ = ["blackbox", "config_space", "run_moasha"]
