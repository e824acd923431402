"""Syne Tune's MOASHA on the replay, as its authors run it on a simulated benchmark: Syne Tune's own simulator
backend (`UserBlackboxBackend`) over a Blackbox that answers from the same workload as every other arm
(`Workload.nearest`: the recording's 1-nearest-neighbour curve, or YAHPO Gym's LCBench surrogate), a constant
maximum resource (the workload's last epoch, `epochs` a constant of the config space and `max_resource_attr`, as
Syne Tune's benchmark definitions do; the space's other parameters searched), MOASHA with Syne Tune's defaults
(non-dominated sorting, grace period 1, reduction factor 3, one bracket) over validation error and training time.

The same cost model as every other arm:
- no simulator latency: Syne Tune's default `SimulatorConfig` delays each start, result, stop and completion by
  0.05 s, steps its clock 2 ms past each stop, and its tuner polls every 0.05 s; here every delay is 0, a stop
  takes 2e-9 s, and when every worker is busy the tuner's sleep jumps to the next event (`NextEvent`), so MOASHA
  reacts to each result the moment it happens;
- strategy time in one unit: Syne Tune's time keeper advances by the *wall* seconds the tuner loop and scheduler
  spend outside the backend; `CpuTimeKeeper` makes that the loop's thread CPU seconds, the unit in which the
  Optuna arms' own work is charged (bench/replay_backend.py's SimClock), or nothing with `charge_cpu=False`.

Two MOASHAs: `as shipped` (Syne Tune 0.16's rung decision) and `rank-corrected` (`RankCorrectedMOASHA`). The
shipped rung decision (`Bracket.on_result`) feeds `nondominated_sort`'s *ordering* (the item indices, best
first) to `np.searchsorted(sorted(p), p)` as if it held each item's rank, so the new trial's "rank" is the index of
whichever trial sorts last, divided by the rung's size: a trial that dominates its whole rung goes on about as
often as a random one. The correction gives the decision each item's position in that ordering (its rank); the
rest of MOASHA (rungs, the 1/eta share, the epsilon-net order within a front) is unchanged.

Counting (every arm alike, bench/replay_arms.counted): a trial that reaches the last epoch is complete; one MOASHA
stops after epoch k counts toward the front only where the configuration with `epochs: k` trains exactly the same
(epochs searched, k in range, a constant learning rate, no compression): then its values after epoch k are that
configuration's.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from typing import Any

import numpy as np

from autotune.spec import RunConfig
from bench.replay_workload import Workload

Events = list[tuple[float, float | None, float | None, str]]
OBJECTIVES = ["error", "train_time_s", "elapsed_time"]


def config_space(workload: Workload, cfg: RunConfig) -> dict[str, Any]:
    """The workload's space in Syne Tune's terms, and `epochs` the constant maximum resource."""
    from syne_tune.config_space import choice, lograndint, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for key, spec in workload.space.items():
        if spec["type"] in ("categorical", "bool"):
            out[key] = choice(list(spec.get("choices") or [False, True]))
        elif spec["type"] == "int":
            out[key] = (lograndint if spec.get("log") else randint)(int(spec["low"]), int(spec["high"]))
        else:
            out[key] = (loguniform if spec.get("log") else uniform)(float(spec["low"]), float(spec["high"]))
    out["epochs"] = workload.max_epochs
    return out


def blackbox(workload: Workload, space: dict[str, Any]) -> Any:
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.config_space import randint

    class Replayed(Blackbox):
        def __init__(self) -> None:
            super().__init__(configuration_space={k: v for k, v in space.items() if k != "epochs"},
                             fidelity_space={"epoch": randint(1, workload.max_epochs)},
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

    return Replayed()


def rank_corrected_bracket() -> type:
    """Syne Tune's `Bracket` with the rung decision given each item's rank (see the module's doc)."""
    from syne_tune.optimizer.scheduler import SchedulerDecision
    from syne_tune.optimizer.schedulers.asha import Bracket

    class RankCorrectedBracket(Bracket):
        def on_result(self, trial_id: int, cur_iter: int, metrics: dict | None) -> str:
            action = SchedulerDecision.CONTINUE
            for milestone, recorded in self.rungs:
                if cur_iter < milestone or trial_id in recorded:
                    continue
                if recorded:  # (the first result at a rung goes on, as shipped)
                    table = np.array([list(x.values()) for x in recorded.values()] + [list(metrics.values())])
                    if self.priority is not None:
                        order = np.asarray(self.priority(table))  # item indices, best first
                        position = np.empty(len(order), dtype=float)
                        position[order] = np.arange(len(order))  # the correction: each item's rank
                    else:  # one objective: as shipped (there the values are the priorities)
                        p = table.flatten()
                        position = np.searchsorted(sorted(p), p).astype(float)
                    if position[-1] / len(position) > 1 / self.rf:
                        action = SchedulerDecision.STOP
                recorded[trial_id] = metrics
                break
            return action

    return RankCorrectedBracket


def make_moasha(space: dict[str, Any], max_t: int, seed: int, corrected: bool) -> Any:
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

    scheduler = MOASHA(space, metrics=["error", "train_time_s"], do_minimize=True, time_attr="epoch", max_t=max_t,
                       random_seed=seed)
    if corrected:
        cls = rank_corrected_bracket()
        for b in scheduler.brackets:
            b.__class__ = cls  # same state, the corrected decision
    return scheduler


def zero_latency_backend(workload: Workload, space: dict[str, Any], charge_cpu: bool) -> Any:
    """Syne Tune's simulator backend with every delay 0 and its time keeper in thread CPU seconds."""
    from syne_tune.backend.simulator_backend.simulator_backend import SimulatorConfig
    from syne_tune.backend.simulator_backend.time_keeper import SimulatedTimeKeeper
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend

    class CpuTimeKeeper(SimulatedTimeKeeper):
        """Time outside the backend (the tuner loop, the scheduler) as this thread's CPU seconds, or none."""

        def mark_exit(self) -> None:
            self._last_recent_exit = time.thread_time()

        def real_time_since_last_recent_exit(self) -> float:
            self._assert_has_started()
            return max(0.0, time.thread_time() - self._last_recent_exit) if charge_cpu else 0.0

    from syne_tune.backend.simulator_backend.events import CompleteEvent, StopEvent

    class ZeroLatency(UserBlackboxBackend):
        def _stop_or_pause_trial(self, trial_id: int, status: str) -> None:
            """As shipped, but the stop and the completion happen at the moment of the decision: Syne Tune steps its
            clock 1 ms past each of the two events to process them (2 ms a stopped trial); here 1e-9 s."""
            self._advance_by_outside_time()
            now = self._time_keeper.time() + self.simulator_config.delay_stop
            self._simulator_state.push(StopEvent(trial_id=trial_id), event_time=now)
            self._time_keeper.advance_to(now + 1e-9)
            self._process_events_until_now()
            done = self._time_keeper.time() + self.simulator_config.delay_complete_after_stop
            self._simulator_state.push(CompleteEvent(trial_id=trial_id, status=status), event_time=done)
            self._time_keeper.advance_to(done + 1e-9)
            self._process_events_until_now()
            self._time_keeper.mark_exit()

    zero = SimulatorConfig(delay_on_trial_result=0.0, delay_complete_after_final_report=0.0,
                           delay_complete_after_stop=0.0, delay_start=0.0, delay_stop=0.0)
    backend = ZeroLatency(blackbox=blackbox(workload, space), elapsed_time_attr="elapsed_time",
                                  max_resource_attr="epochs", seed=0, simulator_config=zero, tuner_sleep_time=0.0)
    backend._time_keeper = CpuTimeKeeper()
    return backend


def next_event_callback() -> Any:
    """Syne Tune's SimulatorCallback, its sleep (every worker busy) a jump to the next event instead of a poll."""
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback

    class NextEvent(SimulatorCallback):
        def on_tuning_sleep(self, sleep_time: float) -> None:
            heap = self._tuner.trial_backend._simulator_state.event_heap
            if heap:
                self._time_keeper.advance_to(heap[0][0])

    return NextEvent()


def no_sleep(tuner: type) -> type:
    """Syne Tune's Tuner without its real `time.sleep(sleep_time)` when every worker is busy (0 s here: a yield of
    the CPU, a millisecond of wall time on a busy machine, hundreds of times a run); its callbacks' `on_tuning_sleep`
    (NextEvent's jump to the next event) still run, so nothing it decides changes."""

    class NoSleep(tuner):  # type: ignore[misc, valid-type]
        def _sleep(self) -> None:
            for callback in self.callbacks:
                callback.on_tuning_sleep(self.sleep_time)

    return NoSleep


def run_moasha(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
               charge_cpu: bool = True, corrected: bool = False) -> Events:
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.trial_status import Trial
    from syne_tune.tuner_callback import TunerCallback

    from bench.replay_arms import counted

    space = config_space(workload, cfg)
    events: Events = []
    ended: set[int] = set()

    class Collect(TunerCallback):
        def on_trial_result(self, trial: Trial, status: str, result: dict[str, Any], decision: str) -> None:
            at = float(result.get("st_tuner_time", 0.0))
            if trial.trial_id in ended or at > budget:
                return
            epoch = int(result["epoch"])
            acc, tt = 1.0 - float(result["error"]), float(result["train_time_s"])
            if epoch >= workload.max_epochs:
                ended.add(trial.trial_id)
                events.append((at, acc, tt, "COMPLETE"))
            elif decision == "STOP":
                ended.add(trial.trial_id)
                ok = counted(cfg, trial.config, epoch)  # the one counting rule (bench/replay_arms.py)
                events.append((at, acc if ok else None, tt if ok else None, "PRUNED"))

    np.random.seed(seed)  # MOASHA draws its bracket with numpy's global generator
    backend = zero_latency_backend(workload, space, charge_cpu)
    scheduler = make_moasha(space, workload.max_epochs, seed, corrected)
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("SYNETUNE_FOLDER")
        os.environ["SYNETUNE_FOLDER"] = tmp
        try:
            tuner = no_sleep(Tuner)(trial_backend=backend, scheduler=scheduler, n_workers=workers, sleep_time=0,
                          stop_criterion=StoppingCriterion(max_wallclock_time=budget), results_update_interval=1e9,
                          print_update_interval=1e9, callbacks=[next_event_callback(), Collect()], save_tuner=False,
                          tuner_name=f"replay-moasha-{seed}-{workers}", suffix_tuner_name=True)
            with contextlib.redirect_stdout(io.StringIO()):  # its progress tables, per trial
                tuner.run()
        finally:
            if old is None:
                os.environ.pop("SYNETUNE_FOLDER", None)
            else:
                os.environ["SYNETUNE_FOLDER"] = old
    return sorted(events, key=lambda e: e[0])


__all__ = ["blackbox", "config_space", "make_moasha", "next_event_callback", "no_sleep", "rank_corrected_bracket",
           "run_moasha", "zero_latency_backend"]
