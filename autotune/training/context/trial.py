"""The trial context: what a training function receives, for built-in and user training alike.

A `fit(ctx)` trains in its own way; the context brings the trial's settings, keeps the clocks and
applies the stop rules. It is the only place that applies an acceleration setting or reads a clock:

    def fit(ctx: autotune.TrialContext):
        model, opt = ctx.prepare(MyNet(width=ctx.params["width"]))   # device, init, channels_last, compile, optimizer
        train = ctx.loader(my_train_dataset)                         # device-resident batches or a tuned DataLoader
        for epoch in ctx.epochs():                                   # honest epoch clocks
            model.train()
            for x, y in train:
                with ctx.autocast():                                 # the trial's precision
                    loss = my_loss(model(x), y)
                ctx.backward(loss)                                   # GradScaler, accumulation, clip, step
            ctx.report(val_f1=evaluate(ctx.model))                   # the stop rules act here
        return {"val_f1": evaluate(ctx.model, full=True)}            # optional: final metrics (a dict)

`ctx.backward` divides the loss by `grad_accum_steps` (the accumulated gradient is the mean over the
micro-batches): give it each micro-batch's mean loss, not one already divided. What `fit` returns, None
or a dict of final metrics, is added to (and overrides) the last epoch's reported metrics.

No Optuna here: the stop rules reach the context as one callback (`on_epoch`), which may raise
`TrialStopped`. An epoch's training clock runs from its start (after a device synchronize) to the end of
its last ctx.backward step, timed by a CUDA event per step on a GPU; the host never waits on the device
inside an epoch except once every `FINITE_CHECK_EVERY` steps (a blow-up is stopped early).

`TrialContext` keeps the user's API and delegates to its parts, modules of training/context/ each testable
without a model: `epoch_clock` (clocks, counters, compile time, the speed probe's hooks), `stepper` (GradScaler,
accumulation, clipping, the optimizer and schedule steps), `stop_rules` (decisions, returned; the context raises
them), `loaders` (batches), `collective` (what the ranks agree on; a no-op in one process) and `misuse`
(ContextMisuse and its checks).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from autotune.core import TrialStopped, code_where
from autotune.spec import Settings
from autotune.training import accel
from autotune.training.context import applied as unread
from autotune.training.context import misuse
from autotune.training.context.collective import collective
from autotune.training.context.epoch_clock import FINITE_CHECK_EVERY, EpochClock, steady_rate, wait_fraction
from autotune.training.context.limits import Limits
from autotune.training.context.loaders import Batches, DeviceBatches, LoaderBatches, build, fraction_indices
from autotune.training.context.misuse import CLOCK_METRICS, ContextMisuse
from autotune.training.context.records import EpochRecord, OnEpoch, TrainResult
from autotune.training.context.stepper import Stepper
from autotune.training.context.stop_rules import StopRules
from autotune.training.distributed.devices import Group
from autotune.training.optimizers import make_optimizer
from autotune.training.throughput import ProbeWindow

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class _Of:
    """A read-only attribute of the context that one of its parts keeps (`_Of("_stepper", "opt")`)."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, ctx: Any, owner: Any = None) -> Any:
        return self if ctx is None else getattr(getattr(ctx, self.part), self.name)


class TrialContext:
    """One trial's settings, clocks and stop rules, for a training function `fit(ctx)`.

    Read: `params` (every setting and user parameter by name), `settings` (trainer settings only),
    `device`, `seed`, `epochs_total`, `batch_size` (the global batch), `precision`, `model` (the prepared,
    uncompiled model), `opt` (the optimizer `prepare` returned), `optimizer_factory` (the searched optimizer, as a
    factory of parameters -> torch.optim.Optimizer; `optimizer` is its deprecated old name),
    `rank` and `world_size` (0 and 1 unless the trial trains on several devices).
    Call: `prepare`, `loader`, `epochs`, `autocast`, `backward`, `report`; a training function may return a dict
    of final metrics (`result`). With `group` (several devices) the context is one rank's (collective.py).
    """

    opt = _Of("_stepper", "opt")  # the optimizer ctx.prepare returned
    sched = _Of("_stepper", "sched")  # the trial's lr_schedule (None: constant, or the fit's own scheduler)
    scaler = _Of("_stepper", "scaler")  # the GradScaler (fp16 on a GPU), else None
    epoch = _Of("_clock", "epoch")  # the epoch running (0 before ctx.epochs)
    compile_time_s = _Of("_clock", "compile_time_s")
    stopped_early_at = _Of("_rules", "stopped_early_at")  # the epoch early stopping ended training at
    _own_scheduler = _Of("_stepper", "own_scheduler")  # (read by unread.why)
    _stepped = _Of("_stepper", "stepped")

    def __init__(self, settings: Mapping[str, Any], *, user_params: Mapping[str, Any] | None = None,
                 seed: int = 0, limits: Limits | None = None, on_record: OnEpoch | None = None,
                 on_epoch: OnEpoch | None = None, metrics: Iterable[str] | None = None,
                 early_stopping_on: Sequence[tuple[str, str]] = (("val_loss", "minimize"),),
                 chance_loss: float = math.inf, config: Any = None, group: Group | None = None,
                 probe: ProbeWindow | None = None, searched: Iterable[str] = (), fixed: Iterable[str] = ()) -> None:
        raw = self._raw = Settings(settings)
        # What this trial read (applied): the context's uses, the fit's reads (ctx.settings, ctx.params); a searched
        # key nothing read is not_applied. One `searched` or `fixed` explicitly is chosen (a searched lr scales lrs).
        self._reads: set[str] = set(unread.APPLIED_AROUND)
        self._searched = tuple(searched)
        self._chosen = frozenset(self._searched) | frozenset(fixed)
        self.settings = raw.watched(self._reads)  # typed and frozen: ctx.settings["lr"] or ctx.settings.lr
        self.group = group
        self._collective = coll = collective(group)  # a no-op in one process
        self.rank, self.world_size = coll.rank, coll.world
        self.params: Mapping[str, Any] = unread.WatchedParams(raw, user_params or {}, self._reads)
        self.seed = seed
        self.config = config  # the RunConfig of the study, when there is one
        self.device = accel.resolve_device(str(raw["device"]))
        self.chance_loss = chance_loss  # divergence: a loss above loss_factor x this is never "learning"
        self.limits = limits = limits or Limits()
        objectives = [o.metric for o in getattr(config, "objectives", ())]  # (a study's; none without a config)
        self._rules = StopRules(self.settings, limits, on_record, on_epoch, early_stopping_on,
                                objectives=objectives)
        self._known = None if metrics is None else set(metrics)
        self.not_applied: dict[str, str] = {}
        self.history: list[EpochRecord] = []
        self.model: nn.Module | None = None
        scaler = accel.grad_scaler(self.device, str(raw["precision"]))
        self._stepper = Stepper(self.settings, self._reads, self._searched, scaler, int(raw["grad_accum_steps"]),
                                self.not_applied)
        # (a trial on several devices is not probed: a stop on rank 0 alone would strand the others)
        self._clock = EpochClock(self.device, self.settings, coll, probe if coll.world == 1 else None,
                                 float(raw["data_fraction"]))
        self._own_optimizer: bool | None = None  # None: no ctx.prepare yet; True: the fit built its optimizer
        self._built: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # the optimizers autotune built
        # Settings that shaped training by their effect (unread.EFFECT_KEYS: reads of these prove nothing): the
        # settings an optimizer autotune built took, once it stepped; see `_effects_now` for the rest.
        self._effects: set[str] = set()
        self._built_with: set[str] = set()  # lr, momentum, weight_decay the fit read and built its optimizer with
        self._init_asked: bool | None = None  # ctx.prepare's init (None: not called)
        self._train_on_device: bool | None = None  # the training loader's batches: on the device (None: no loader)
        self.stop: TrialStopped | None = None
        self._in_epoch = False  # inside the body of `for epoch in ctx.epochs()` (its clock: self._clock.running)

    @property
    def precision(self) -> str:
        return str(self.settings["precision"])

    @property
    def epochs_total(self) -> int:
        return int(self.settings["epochs"])

    @property
    def batch_size(self) -> int:  # the trial's (global) training batch size
        return int(self.settings["batch_size"])

    @property
    def optimizer(self) -> Callable[[Any], torch.optim.Optimizer]:
        """Deprecated: the factory is `optimizer_factory`; the optimizer itself is `opt`."""
        return misuse.deprecated_optimizer(self.optimizer_factory)

    @property
    def optimizer_factory(self) -> Callable[[Any], torch.optim.Optimizer]:
        """The trial's optimizer (name, lr, momentum, weight decay, fused kernels) as a factory of parameters."""
        def build(params: Any) -> torch.optim.Optimizer:
            took: set[str] = set()  # what this optimizer's builder read: the settings it takes
            s = self._raw.watched(took)
            opt = make_optimizer(s["optimizer"], params, s, self.device)
            self._built.add(opt)
            # applied once it steps (whoever steps it), not when built; (a weak reference: no cycle through it)
            me = weakref.ref(self)
            opt.register_step_post_hook(lambda *_: (ctx := me()) is not None and ctx._effects.update(took))
            return opt

        return build

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The trial's precision for the forward pass (fp32: a no-op)."""
        return accel.autocast(self.device, self.precision)

    def prepare(self, model: nn.Module, optimizer: Any = None,
                init: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Apply the trial's settings to a model: weight init (`init=False` keeps loaded weights), device,
        channels_last, the optimizer (None: the searched one; a callable of parameters; or an optimizer),
        and torch.compile last. Returns (the model to train with, the optimizer); on several devices the model to
        train with is wrapped in DistributedDataParallel (then compiled), and `ctx.model` stays the plain module.

        An optimizer the fit built itself keeps its own groups and lrs; a searched (or fixed) `lr` multiplies each
        group's lr, unless the fit read `lr` itself (build a scheduler of your own after this call, so that it
        starts from the scaled lrs)."""
        misuse.check_live(self.stop, "ctx.prepare")
        misuse.check_model(model, self.model is not None)
        s = self.settings
        self._init_asked = init
        self.model = model = _place(model, s, self.device, init, self.not_applied)
        opt = misuse.optimizer_of(self.optimizer_factory if optimizer is None else optimizer, model)
        own = self._own_optimizer = opt not in self._built
        if own:  # what the fit read and built its optimizer with (a read for logging is not; a default is not chosen)
            self._built_with = {k for k in unread.BUILT_WITH if k in self._chosen and k in self._reads
                                and unread.in_groups(opt, k, s[k])}
        # a chosen lr scales a fit-built optimizer's lrs, unless the fit read lr (it built with it: not twice)
        scaled = own and "lr" in self._chosen and "lr" not in self._reads
        self._stepper.use(opt, float(s["lr"]) if scaled else None, own)
        ddp = self._stepper.ddp = self._collective.wrap(model)  # (None in one process)
        train_model = model if ddp is None else ddp
        if s["compile"]:  # (around the DDP wrapper: torch's DDPOptimizer splits the graph at its buckets)
            train_model = accel.compile_model(train_model, s["compile_mode"])
            self._clock.compiled = True
        return train_model, opt

    def loader(self, data: Any, batch_size: int | None = None, shuffle: bool | None = None, train: bool = True,
               **dataloader_kwargs: Any) -> Batches:
        """Batches on the device, per the trial's settings.

        `data`: a tuple of tensors (x, y, ...), a TensorDataset, or any torch Dataset. Tensors with
        `data_on_device` live on the device and are batched by index (no DataLoader); otherwise a DataLoader
        with the trial's num_workers, pin_memory, prefetch_factor and persistent_workers. A training loader
        (train=True) takes the trial's batch_size, shuffles, uses `data_fraction` of the data, drops the last
        short batch when compiling (a new shape would recompile inside the timed epoch), and is timed.
        `train=False` (evaluation): eval_batch_size, in order, untimed.
        On several devices a training loader yields this rank's share of every global batch of `batch_size`
        (the same order on every rank, reshuffled each epoch); an evaluation loader is not split.
        """
        misuse.check_live(self.stop, "ctx.loader")
        s = self.settings
        bs = int(batch_size or (self.batch_size if train else s["eval_batch_size"]))
        shuffle = train if shuffle is None else shuffle
        drop_last = bool(dataloader_kwargs.pop("drop_last", train and bool(s["compile"])))
        inner = build(data, bs, shuffle, train, drop_last, dataloader_kwargs, s, self.device, self.seed,
                      self.not_applied, self._collective)
        if train and not self._clock.steps_given:  # the ctx.backward calls of an epoch: lr_schedule, the probe
            self._clock.loader_len = self._stepper.steps_per_epoch = len(inner)
            self._train_on_device = isinstance(inner, DeviceBatches)
        deadline = self._rules.deadline if self._collective.alone else math.inf  # (several devices: in backward)
        return Batches(inner, train, functools.partial(self._clock.timed, stepper=self._stepper, deadline=deadline,
                                                       hang=self._hang))

    def _hang(self) -> TrialStopped:
        return self._stopped(self._rules.hung(self.epoch))

    def epochs(self, steps_per_epoch: int | None = None) -> Iterator[int]:
        """1 .. epochs, each with its own training clock; stops early when early stopping says so.

        `steps_per_epoch`: the ctx.backward calls of one epoch, for a loop that does not iterate a training
        ctx.loader (its length says it otherwise): `lr_schedule` and the speed probe's projection need it.
        An epoch whose body did not call ctx.report is recorded with its clocks only."""
        misuse.check_live(self.stop, "ctx.epochs")
        misuse.check_epochs(self.epoch > 0, steps_per_epoch)
        if steps_per_epoch is not None:
            self._clock.steps_given = True
            self._clock.loader_len = self._stepper.steps_per_epoch = steps_per_epoch
        for epoch in range(1, self.epochs_total + 1):
            self._in_epoch = True
            self._clock.open(epoch)
            self._stepper.epoch_lr()  # (the lr count starts with the epoch)
            yield epoch
            try:
                if self.stop is not None:
                    raise self.stop
                if self._clock.running:  # the body reported nothing: the epoch's clocks are its record
                    self.report()
            finally:
                self._in_epoch = False
            if self.stopped_early_at is not None:
                return

    def backward(self, loss: torch.Tensor, n_samples: int | None = None) -> None:
        """Backward for one micro-batch: loss scaling (fp16), then every `grad_accum_steps` micro-batches (and
        at the end of the training data) gradient clipping, the optimizer step and the schedule step.

        The loss is divided by `grad_accum_steps` before its backward (the accumulated gradient is the mean over
        the micro-batches): pass the micro-batch's own mean loss. An unreduced loss (one value per sample) is
        averaged here. `n_samples`: the samples in this micro-batch, for a loop that does not take its batches
        from a training ctx.loader (which counts them); an unreduced loss gives them by its first dimension."""
        clock, rules = self._clock, self._rules
        if self.stop is not None or not (self._in_epoch and clock.running) or self._stepper.opt is None:
            misuse.refuse_backward(self.stop, self._in_epoch, clock.running, self.epoch, self._stepper.opt is not None)
        if rules.deadline != math.inf and self._collective.alone and time.perf_counter() > rules.deadline:
            raise self._hang()
        n = misuse.step_samples(loss, n_samples, clock.fed, clock.batch_n)
        if loss.ndim:
            loss = loss.mean()
        self._stepper.backward(loss, clock.last_batch)
        if clock.stepped(loss, n):  # every FINITE_CHECK_EVERY steps: a non-finite loss, on several devices the hang
            stop = rules.periodic(clock.finite(), self._collective, clock.epoch)
            if stop is not None:
                raise self._stopped(stop)
        if clock.probe is not None and not clock.probe.done:
            stop = clock.probe_step(n)
            if stop is not None:
                raise self._stopped(stop) from None

    def report(self, **metrics: Any) -> None:
        """This epoch's metrics (floats or 0-d tensors): the stop rules decide here whether the trial goes on."""
        misuse.check_live(self.stop, "ctx.report")
        misuse.check_report(self._in_epoch, not self._clock.running, self.epoch)
        values = self._metrics(metrics)
        clock = self._clock
        seconds, stop = clock.end(clock.epoch >= self.epochs_total)
        if stop is not None:
            raise self._stopped(stop) from None
        rec = clock.record(values, seconds, self._stepper.epoch_lr())  # the lr its steps took, not the one after
        self.history.append(rec)
        clock.running = False  # (reported)
        stop = self._rules.verdict(rec, self.history, clock.loss_n > 0, self.epochs_total, self.chance_loss,
                                   self._collective)
        if stop is not None:
            raise self._stopped(stop) from None

    def _metrics(self, metrics: Mapping[str, Any], where: str = "ctx.report({key}=...)") -> dict[str, float]:
        return misuse.check_metrics(metrics, self._known, lambda: misuse.reportable(self.config, self._known), where)

    def _stopped(self, stop: TrialStopped) -> TrialStopped:
        self.stop = stop
        self._clock.running = False
        return stop

    def _effects_now(self) -> set[str]:
        """The optimizer settings and lr_schedule that shaped training (unread.EFFECT_KEYS), by what happened: the
        optimizer autotune built stepped (its settings), or the fit's own stepped with its lrs scaled by a chosen
        lr or built with the values it read; the context's schedule decided the lr (no scheduler of the fit's own,
        no lrs the fit set itself)."""
        st = self._stepper
        out = set(self._effects) & set(unread.EFFECT_KEYS)
        if self._own_optimizer and st.opt_steps:
            out |= self._built_with | ({"lr"} if st.scaled is not None else set())
        if st.decided and not st.own_scheduler:
            out.add("lr_schedule")
        return out - {"lr", "lr_schedule"} if st.overwritten else out

    def _applied(self, key: str, effects: set[str]) -> bool:
        return key in effects if key in unread.EFFECT_KEYS else key in self._reads

    def unapplied(self) -> dict[str, str]:
        """Settings that took no effect in this trial, with the reason: what the context could not apply, every
        searched optimizer setting or lr_schedule that did not act (whoever read it), and every other searched
        setting (or `user.` parameter) nothing read (applied.py says why)."""
        out = dict(self.not_applied)
        effects = self._effects_now()
        missed = [k for k in self._searched if not self._applied(k, effects) and k not in out]
        for key in missed:
            out[key] = unread.why(self, key, missed)
        return out

    def unused(self) -> list[str]:
        """Settings whose values did not shape this trial, searched or not (a default optimizer adam under the fit's
        own SGD): the trial's stored settings leave them out."""
        effects = self._effects_now()
        return sorted(set(self.unapplied()) | {k for k in unread.EFFECT_KEYS if k not in effects})

    def effective_lrs(self) -> tuple[list[float], list[float]] | None:
        """(the fit's optimizer's own group lrs, what a chosen lr scaled them to), when that took effect."""
        scaled = self._stepper.scaled
        return None if scaled is None or "lr" not in self._effects_now() else (scaled[1], scaled[2])

    def result(self, returned: Any = None) -> TrainResult:
        """The run's result once `fit` returned: the last epoch's metrics, then whatever fit returned (a dict)."""
        misuse.check_returned(returned, len(self.history))
        final = dict(self.history[-1].metrics)
        if returned is not None:
            final.update(self._metrics(returned, "the dict your fit returned, key {key!r}"))
        return TrainResult(
            final=final, train_time_s=self._clock.train_time_s, samples_per_s=steady_rate(self.history),
            compile_time_s=self.compile_time_s, data_wait_fraction=wait_fraction(self.history),
            epochs_run=len(self.history), device=accel.device_name(self.device), precision=self._raw["precision"],
            history=list(self.history), stopped_early_at=self.stopped_early_at,
            loss_scale=float(self.scaler.get_scale()) if self.scaler is not None else None,
            not_applied=self.unapplied(), unused=self.unused(), effective_lrs=self.effective_lrs(), model=self.model,
            model_params=sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0,
        )


def _place(model: nn.Module, s: Mapping[str, Any], dev: torch.device, init: bool,
           not_applied: dict[str, str]) -> nn.Module:
    """ctx.prepare's model: weight init (`init=False` keeps loaded weights), on the device, channels_last."""
    if init and s["init"] != "default":
        from autotune.training.models import init_weights

        init_weights(model, s["init"])
    model = model.to(dev)
    if s["channels_last"]:
        if any(isinstance(m, nn.Conv2d) for m in model.modules()):
            model = model.to(memory_format=torch.channels_last)
        else:
            not_applied["channels_last"] = "the model has no 2-D convolution"
    return model


@contextlib.contextmanager
def trial_session(settings: Mapping[str, Any]) -> Iterator[None]:
    """Around one trial: backend flags set and restored, the compiler's caches reset before and after a
    compiled trial (a new model must compile afresh and report its compile time; graphs and CUDA-graph
    pools must not outlive their trial)."""
    compiled = bool(settings["compile"])
    if compiled:
        accel.reset_compiler()
    try:
        with accel.backend_flags(settings):
            yield
    finally:
        if compiled:
            accel.reset_compiler()


def unsupported_combination(settings: Mapping[str, Any]) -> str | None:
    """Why this combination of acceleration settings cannot run as asked, before anything trains (else None)."""
    if settings["compile"] and settings["compile_mode"] in CUDA_GRAPH_MODES and settings["grad_accum_steps"] > 1:
        return (f"compile_mode {settings['compile_mode']} records CUDA graphs, whose gradients are overwritten on "
                f"replay: grad_accum_steps {settings['grad_accum_steps']} cannot accumulate there")
    if settings["batch_size"] < settings["devices"]:
        return (f"batch_size {settings['batch_size']} cannot be split over devices {settings['devices']}: batch_size "
                "is the global batch, at least one sample per device")
    return None


def run_fit(fit: Callable[[TrialContext], Any], ctx: TrialContext) -> TrainResult:
    """Run a training function on a context (inside `trial_session`) and return what it measured."""
    returned = fit(ctx)
    if ctx.stop is not None:  # the function caught a stop and returned: the trial still stopped
        raise ctx.stop
    try:
        return ctx.result(returned)
    except ContextMisuse as e:  # found once fit returned (no epoch, a bad return value): the fit is the place
        e._autotune_where = code_where(fit)
        raise


# (CLOCK_METRICS, DeviceBatches, FINITE_CHECK_EVERY, Limits, LoaderBatches, fraction_indices: importable from here as
# before the context was split into its parts)
__all__ = ["CLOCK_METRICS", "FINITE_CHECK_EVERY", "Batches", "ContextMisuse", "DeviceBatches", "EpochRecord",
           "Limits", "LoaderBatches", "OnEpoch", "TrainResult", "TrialContext", "fraction_indices", "run_fit",
           "trial_session",
           "unsupported_combination"]
