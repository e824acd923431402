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

`TrialContext` is the user's API, 14 names, all of them the user's; what autotune's own code reads of a trial (its
plan, ledger, parts, records, stop and result) is on the private `ctx._state` (state.py), built from the plan the
runner decided (plan.TrainingPlan, handed over as it is), and reached from outside this package only through the
port (port.py: the built-in trainer and the framework adapters). The parts, each testable
without a model: epoch_clock (clocks, counters, compile time, the speed probe's hooks), stepper (GradScaler,
accumulation, clipping, the optimizer and schedule steps), stop_rules (decisions, returned; the context raises
them), loaders (batches), collective (what the ranks agree on; a no-op in one process) and misuse (ContextMisuse
and its checks).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from autotune.core import TrialStopped, code_where, watchdog
from autotune.spec import Settings
from autotune.training import accel
from autotune.training.context import misuse
from autotune.training.context.applied import BUILT_WITH, Applied, WatchedParams, in_groups, wraps
from autotune.training.context.loaders import Batches, DeviceBatches, build
from autotune.training.context.misuse import ContextMisuse
from autotune.training.context.plan import TrainingPlan
from autotune.training.context.results import SHAPED, OnEpoch, TrainResult
from autotune.training.context.state import TrialState
from autotune.training.distributed.devices import Group
from autotune.training.throughput import ProbeWindow

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class TrialContext:
    """One trial's settings, clocks and stop rules, for a training function `fit(ctx)`.

    Call: `prepare`, `loader`, `epochs`, `autocast`, `backward`, `report`; a training function may return a dict
    of final metrics. Read: `settings` (trainer settings: `ctx.settings.epochs`, `.batch_size` the global batch,
    `.precision`...), `params` (every setting and user parameter by name), `device`, `seed`, `model` (the prepared,
    uncompiled model), `optimizer_factory` (the searched optimizer, as a factory of parameters ->
    torch.optim.Optimizer), `rank` and `world_size` (0 and 1 unless the trial trains on several devices).
    Its state is autotune's own (`_state`, a state.TrialState: the plan, the ledger, the parts, the records),
    built from the runner's plan (plan.TrainingPlan; a bare context makes its own from `settings`, `user_params`
    and `seed`) and its wiring: this rank's device `group`, the speed `probe`'s window, `on_record` (sees each
    epoch's record) and `on_epoch` (may raise TrialStopped). autotune's code outside the context reaches its state
    through port.TrialPort.
    """

    def __init__(self, settings: TrainingPlan | Settings | Mapping[str, Any], *,
                 user_params: Mapping[str, Any] | None = None, seed: int = 0, group: Group | None = None,
                 probe: ProbeWindow | None = None, on_record: OnEpoch | None = None,
                 on_epoch: OnEpoch | None = None) -> None:
        if isinstance(settings, TrainingPlan):
            if user_params is not None or seed:
                raise TypeError("a TrainingPlan carries its own user parameters and seed")
            plan = settings
        else:
            plan = TrainingPlan.bare(settings, user=user_params, seed=seed)
        st = self._state = TrialState(plan, group, probe, on_record, on_epoch)
        self.settings = st.settings
        self.params: Mapping[str, Any] = WatchedParams(plan.settings, plan.user, st.applied)
        self.seed = plan.seed
        self.device = plan.device
        self.rank, self.world_size = st.collective.rank, st.collective.world

    @property
    def model(self) -> nn.Module | None:  # the model ctx.prepare placed (uncompiled, unwrapped); None before
        return self._state.model

    @property
    def optimizer_factory(self) -> Callable[[Any], torch.optim.Optimizer]:
        """The trial's optimizer (name, lr, momentum, weight decay, fused kernels) as a factory of parameters."""
        return self._state.build_optimizer

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The trial's precision for the forward pass (fp32: a no-op)."""
        return accel.autocast(self.device, str(self.settings["precision"]))

    def prepare(self, model: nn.Module, optimizer: Any = None,
                init: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Apply the trial's settings to a model: weight init (`init=False` keeps loaded weights), device,
        channels_last, the optimizer (None: the searched one; a callable of parameters; or an optimizer),
        and torch.compile last. Returns (the model to train with, the optimizer); on several devices the model to
        train with is wrapped in DistributedDataParallel (then compiled), and `ctx.model` stays the plain module.

        An optimizer the fit built itself keeps its own groups and lrs; a searched (or fixed) `lr` multiplies each
        group's lr, unless the fit read `lr` itself (build a scheduler of your own after this call, so that it
        starts from the scaled lrs)."""
        st = self._state
        misuse.check_live(st.stop, "ctx.prepare")
        misuse.check_model(model, st.model is not None)
        st.check_fresh(model, "ctx.prepare")
        s = self.settings
        ap = st.applied
        ap.prepared(init)
        st.model = model = _place(model, s, self.device, init, ap)
        opt = misuse.optimizer_of(self.optimizer_factory if optimizer is None else optimizer, model)
        own = not wraps(opt, ap.built)  # (a Lookahead around ours is ours: not rescaled)
        # what the fit read and built its own optimizer with (a read for logging is not; a default is not chosen)
        ap.prepared(init, own, [k for k in BUILT_WITH if own and ap.chose(k) and ap.was_read(k)
                                and in_groups(opt, k, s[k])])
        # a chosen lr scales a fit-built optimizer's lrs, unless the fit read lr (it built with it: not twice) or
        # the chosen lr already cannot apply (an adapter found a scheduler of the fit's own holding its lrs)
        scaled = own and ap.chose("lr") and not ap.was_read("lr") and not ap.refused("lr")
        st.stepper.use(opt, float(s["lr"]) if scaled else None, own)
        ddp = st.stepper.ddp = st.collective.wrap(model)  # (None in one process)
        train_model = model if ddp is None else ddp
        if s["compile"]:  # (around the DDP wrapper: torch's DDPOptimizer splits the graph at its buckets)
            train_model = accel.compile_model(train_model, s["compile_mode"])
            st.clock.compiled = True
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
        st = self._state
        misuse.check_live(st.stop, "ctx.loader")
        s = self.settings
        bs = int(batch_size or (s["batch_size"] if train else s["eval_batch_size"]))
        shuffle = train if shuffle is None else shuffle
        drop_last = bool(dataloader_kwargs.pop("drop_last", train and bool(s["compile"])))
        inner = build(data, bs, shuffle, train, drop_last, dataloader_kwargs, s, self.device, self.seed,
                      st.applied, st.collective)
        if train and not st.clock.steps_given:  # the ctx.backward calls of an epoch: lr_schedule, the probe
            st.clock.loader_len = st.stepper.steps_per_epoch = len(inner)
            st.applied.loaded(isinstance(inner, DeviceBatches))
        deadline = st.rules.deadline if st.collective.alone else math.inf  # (several devices: in backward)
        return Batches(inner, train, functools.partial(st.clock.timed, stepper=st.stepper, deadline=deadline,
                                                       hang=self._hang))

    def _hang(self) -> TrialStopped:
        st = self._state
        return st.stopped(st.rules.hung(st.epoch))

    def epochs(self, steps_per_epoch: int | None = None) -> Generator[int, None, None]:
        """1 .. epochs, each with its own training clock; stops early when early stopping says so.

        `steps_per_epoch`: the ctx.backward calls of one epoch, for a loop that does not iterate a training
        ctx.loader (its length says it otherwise): `lr_schedule` and the speed probe's projection need it.
        An epoch whose body did not call ctx.report is recorded with its clocks only."""
        st = self._state
        misuse.check_live(st.stop, "ctx.epochs")
        misuse.check_epochs(st.epoch > 0, steps_per_epoch)
        if steps_per_epoch is not None:
            st.clock.steps_given = True
            st.clock.loader_len = st.stepper.steps_per_epoch = steps_per_epoch
        try:
            for epoch in range(1, st.epochs_total + 1):
                watchdog.check()  # every epoch boundary: an interrupt the fit swallowed comes back here too
                st.in_epoch = True
                st.clock.open(epoch)
                st.stepper.epoch_lr()  # (the lr count starts with the epoch)
                yield epoch
                try:
                    watchdog.check()
                    if st.stop is not None:
                        raise st.stop
                    if st.clock.running:  # the body reported nothing: the epoch's clocks are its record
                        self.report()
                finally:
                    st.in_epoch = False
                if st.stopped_early_at is not None:
                    return
        finally:  # training is over, however the loop ended: the meters' threads stop (a context nobody closes:
            st.clock.close_meters()  # a bare one in a notebook, a fine-tune's; each would poll /proc for good)

    def backward(self, loss: torch.Tensor, n_samples: int | None = None) -> None:
        """Backward for one micro-batch: loss scaling (fp16), then every `grad_accum_steps` micro-batches (and
        at the end of the training data) gradient clipping, the optimizer step and the schedule step.

        The loss is divided by `grad_accum_steps` before its backward (the accumulated gradient is the mean over
        the micro-batches): pass the micro-batch's own mean loss. An unreduced loss (one value per sample) is
        averaged here. `n_samples`: the samples in this micro-batch, for a loop that does not take its batches
        from a training ctx.loader (which counts them); an unreduced loss gives them by its first dimension."""
        st = self._state
        clock, rules = st.clock, st.rules
        watchdog.check()  # an interrupted trial's interrupt, again (a fit that swallowed it does not train on)
        if st.stop is not None or not (st.in_epoch and clock.running) or st.stepper.opt is None:
            misuse.refuse_backward(st.stop, st.in_epoch, clock.running, st.epoch, st.stepper.opt is not None)
        if rules.deadline != math.inf and st.collective.alone and time.perf_counter() > rules.deadline:
            raise self._hang()
        n = misuse.step_samples(loss, n_samples, clock.fed, clock.batch_n)
        if loss.ndim:
            loss = loss.mean()
        st.stepper.backward(loss, clock.last_batch)
        st.after_step(loss, n)

    def report(self, **metrics: Any) -> None:
        """This epoch's metrics (floats or 0-d tensors): the stop rules decide here whether the trial goes on."""
        st = self._state
        misuse.check_live(st.stop, "ctx.report")
        misuse.check_report(st.in_epoch, not st.clock.running, st.epoch)
        misuse.check_names(metrics, st.known, st.plan.config, "ctx.report({key}=...)")
        values = st.metrics(metrics)
        clock = st.clock
        seconds, stop = clock.end(clock.epoch >= st.epochs_total)
        if stop is not None:
            raise st.stopped(stop) from None
        rec = clock.record(values, seconds, st.stepper.epoch_lr())  # the lr its steps took, not the one after
        rec.epochs_planned = st.epochs_total
        st.history.append(rec)
        clock.running = False  # (reported)
        stop = st.rules.verdict(rec, st.history, clock.loss_n > 0, st.epochs_total, st.rules.chance_loss,
                                 st.collective)
        if stop is not None:
            raise st.stopped(stop) from None


def _place(model: nn.Module, s: Settings, dev: torch.device, init: bool, applied: Applied) -> nn.Module:
    """ctx.prepare's model: weight init (`init=False` keeps loaded weights), on the device, channels_last."""
    if init and s["init"] != "default":
        from autotune.training.models import init_weights

        init_weights(model, s["init"])
    model = model.to(dev)
    if s["channels_last"]:
        if any(isinstance(m, nn.Conv2d) for m in model.modules()):
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        else:
            applied.cannot("channels_last", "the model has no 2-D convolution")
    return model


@contextlib.contextmanager
def trial_session(plan: TrainingPlan | Settings) -> Iterator[None]:
    """Around one trial: backend flags set and restored (a plan's torch threads as it decided them), the
    compiler's caches reset before and after a compiled trial (a new model must compile afresh and report its
    compile time; graphs and CUDA-graph pools must not outlive their trial)."""
    settings = plan.settings if isinstance(plan, TrainingPlan) else plan
    threads = plan.threads.used if isinstance(plan, TrainingPlan) and plan.threads is not None else None
    compiled = bool(settings["compile"])
    if compiled:
        accel.reset_compiler()
    try:
        with accel.backend_flags(settings, threads):
            yield
    finally:
        if compiled:
            accel.reset_compiler()


def unsupported_combination(settings: Settings) -> str | None:
    """Why this combination of acceleration settings cannot run as asked, before anything trains (else None)."""
    if settings["compile"] and settings["compile_mode"] in CUDA_GRAPH_MODES and settings["grad_accum_steps"] > 1:
        return (f"compile_mode {settings['compile_mode']} records CUDA graphs, whose gradients are overwritten on "
                f"replay: grad_accum_steps {settings['grad_accum_steps']} cannot accumulate there")
    if settings["batch_size"] < settings["devices"]:
        return (f"batch_size {settings['batch_size']} cannot be split over devices {settings['devices']}: batch_size "
                "is the global batch, at least one sample per device")
    return None


def run_fit(fit: Callable[[TrialContext], Any], ctx: TrialContext,
            after: Callable[[TrainResult], None] | None = None) -> TrainResult:
    """Run a training function on a context (inside `trial_session`) and return what it measured. `after`: steps
    on the trained model (the built-in trainer's compression), run on the result; the settings they read count
    as applied too."""
    try:
        returned = fit(ctx)
    except BaseException as e:  # a stop or a failure: what shaped the run so far goes with it (the trial's record)
        _carry_shaped(e, ctx._state)
        raise
    finally:
        ctx._state.close()
        ctx._state.trained()
    if ctx._state.stop is not None:  # the function caught a stop and returned: the trial still stopped
        _carry_shaped(ctx._state.stop, ctx._state)
        raise ctx._state.stop
    try:
        result = ctx._state.result(returned)
    except ContextMisuse as e:  # found once fit returned (no epoch, a bad return value): the fit is the place
        e._autotune_where = code_where(fit)
        raise
    if after is not None:
        after(result)
        result.not_applied = ctx._state.unapplied()
    return result


def _carry_shaped(exc: BaseException, state: TrialState) -> None:
    """Put the run's `Shaped` on the exception that ends it (never raising: the fit's own error comes first)."""
    try:
        shaped = state.shaped()
        if shaped is not None:
            setattr(exc, SHAPED, shaped)
    except Exception:  # (an exception type without attributes, or a state the failure left half-built)
        pass


__all__ = ["TrialContext", "run_fit", "trial_session", "unsupported_combination"]
