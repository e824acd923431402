"""The only bridge between Optuna and torch: trial -> settings -> train -> values and user attrs."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import optuna
from optuna.trial import TrialState

from . import accel, data, pruners, space, trainer
from .config import RunConfig
from .errors import AutotuneError, ConfigError, TrialStopped
from .pruners import EPOCH_VALUES

PER_EPOCH_METRICS = {f.name for f in dataclasses.fields(trainer.EpochRecord)}


INFERENCE_METRICS = ("model_size_bytes", "inference_latency_ms", "params_nonzero")


def job_for(cfg: RunConfig, settings: dict[str, Any], seed: int,
            measure_inference: bool | None = None) -> trainer.TrainJob:
    """The trainer's job for these settings. Inference metrics (size, latency) cost a few timed
    forward passes per trial, so a study measures them only when an objective or constraint uses them."""
    if measure_inference is None:
        measure_inference = any(o.metric in INFERENCE_METRICS for o in cfg.objectives) or \
            cfg.constraints.max_accuracy_drop is not None
    return trainer.TrainJob(settings=settings, data=cfg.data, model=cfg.model, seed=seed, source=cfg.source,
                            distill=cfg.distill, measure_inference=measure_inference)


class Objective:
    """Callable for `study.optimize`: one real training run per trial."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.metrics = [o.metric for o in cfg.objectives]
        # Objectives that exist after every epoch drive per-epoch pruning in Pareto studies.
        self.epoch_metrics = [m for m in self.metrics if m in PER_EPOCH_METRICS]
        epoch_dirs = [str(o.direction) for o in cfg.objectives if o.metric in PER_EPOCH_METRICS]
        self.pareto = pruners.pareto_pruner(cfg) if len(epoch_dirs) >= 2 else None
        if self.pareto is not None:
            self.pareto.directions = epoch_dirs

    @functools.cached_property
    def chance_loss(self) -> float:
        """Cross-entropy of a uniform guess: ln(number of classes)."""
        return math.log(data.load(self.cfg.data, self.cfg.source).n_classes)

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        cfg = self.cfg
        settings = space.sample(trial, cfg)
        seed = (cfg.study.seed or 0) * 100_003 + trial.number
        trial.set_user_attr("seed", seed)
        trial.set_user_attr("settings", settings)
        dev = accel.resolve_device(settings["device"])
        trial.set_user_attr("device", accel.device_name(dev))
        trial.set_user_attr("precision", settings["precision"])
        why = accel.precision_error(str(dev), settings["precision"])
        if why is not None:
            self._stop(trial, "unsupported", 0, f"precision {settings['precision']} on {dev}: {why}")
        try:
            result = self._train(trial, settings, seed)
        finally:
            accel.release_memory()
        values = [float(result.metrics()[m]) for m in self.metrics]
        if not all(math.isfinite(v) for v in values):  # an objective never returns NaN
            self._stop(trial, "diverged", result.epochs_run, "non-finite objective value")
        for key, value in result.metrics().items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("epochs_run", result.epochs_run)
        if cfg.constraints.max_accuracy_drop is not None and "val_accuracy_before_compress" in result.extra:
            drop = result.extra["val_accuracy_before_compress"] - result.val_accuracy
            trial.set_constraint("accuracy_drop", drop - cfg.constraints.max_accuracy_drop)
        return values if len(values) > 1 else values[0]

    def _train(self, trial: optuna.Trial, settings: dict[str, Any], seed: int) -> trainer.TrainResult:
        history: list[dict[str, Any]] = []
        epoch_values: list[list[float]] = []
        epochs = int(settings["epochs"])
        p = self.cfg.pruning

        def on_epoch(rec: trainer.EpochRecord) -> None:
            d = dataclasses.asdict(rec)
            history.append(d)
            epoch_values.append([float(d[m]) for m in self.epoch_metrics])
            trial.set_user_attr("history", history)
            trial.set_user_attr(EPOCH_VALUES, epoch_values)
            if p.divergence is not None:
                pruners.check_divergence([h["train_loss"] for h in history], p.divergence.loss_factor, rec.epoch,
                                         self.chance_loss)
            pruners.check_slow(rec.train_time_s, rec.epoch, epochs, p.slow.max_trial_seconds)
            if p.slow.vs_front is not None and rec.epoch < epochs:
                pruners.check_vs_front(rec.train_time_s, rec.epoch, epochs, rec.val_accuracy, p.slow.vs_front,
                                       pruners.front_of(trial.study, self.cfg))
            if rec.epoch >= epochs:
                return
            if not self.cfg.multi_objective:
                trial.report(float(d[self.metrics[0]]) if self.metrics[0] in d else rec.val_loss, rec.epoch)
                if trial.should_prune():
                    raise TrialStopped("pruned", rec.epoch, "Optuna pruner")
            elif self.pareto is not None:
                self._pareto_check(trial, epoch_values, epochs)

        try:
            job = dataclasses.replace(job_for(self.cfg, settings, seed), wall_limit_s=p.slow.hang_seconds)
            result = trainer.train(job, on_epoch)
            if result.stopped_early_at is not None:  # a finished trial: values are its last epoch's
                trial.set_user_attr("stop_reason", "early_stopped")
                trial.set_user_attr("stop_epoch", result.stopped_early_at)
            return result
        except TrialStopped as e:
            self._stop(trial, e.reason, e.epoch, e.detail)
        except AutotuneError:
            raise
        except Exception as e:
            if accel.is_oom(e):
                accel.release_memory()
                return self._on_oom(trial, settings, seed, e, len(history))
            trial.set_user_attr("stop_reason", "error")
            trial.set_user_attr("stop_epoch", len(history))
            trial.set_user_attr("error", f"{type(e).__name__}: {e}"[:500])
            raise
        raise AssertionError("unreachable")

    def _pareto_check(self, trial: optuna.Trial, epoch_values: list[list[float]], epochs: int) -> None:
        study = trial.study
        step = len(epoch_values)
        cur = epoch_values[-1]
        if isinstance(self.pareto, pruners.ParetoASHAPruner):
            others = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))]
            if self.pareto.cut(cur, step, others, epochs):
                raise TrialStopped("dominated", step, "outside the non-dominated top 1/eta at this rung")
        elif isinstance(self.pareto, pruners.ParetoPruner):
            done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            by = self.pareto.dominated_by(cur, step, done)
            if by is not None:
                raise TrialStopped("dominated", step, f"dominated at epoch {step} by trial {by.number}")

    def _on_oom(self, trial: optuna.Trial, settings: dict[str, Any], seed: int, exc: BaseException,
                epoch: int) -> trainer.TrainResult:
        if self.cfg.pruning.oom == "retry_smaller_batch" and settings["batch_size"] > 1 and \
                not trial.user_attrs.get("oom_retried"):
            smaller = dict(settings, batch_size=max(1, settings["batch_size"] // 2))
            trial.set_user_attr("oom_retried", True)
            trial.set_user_attr("batch_size_used", smaller["batch_size"])
            try:
                return self._train(trial, smaller, seed)
            except Exception as e2:
                if not accel.is_oom(e2):
                    raise
        self._stop(trial, "oom", epoch, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        raise AssertionError("unreachable")

    @staticmethod
    def _stop(trial: optuna.Trial, reason: str, epoch: int, detail: str) -> None:
        trial.set_user_attr("stop_reason", reason)
        trial.set_user_attr("stop_epoch", epoch)
        if detail:
            trial.set_user_attr("stop_detail", detail[:500])
        raise optuna.TrialPruned(f"{reason} at epoch {epoch}: {detail}" if detail else reason)


__all__ = ["Objective", "ConfigError", "job_for"]
