"""The trial context's port (training/context/port.py), driven as a framework's callbacks drive it: the checks a
step gets are ctx.backward's, whoever owns the loop."""

from __future__ import annotations

import pytest
import torch

from autotune.core import TrialStopped
from autotune.spec.settings import DEFAULTS
from autotune.training import Limits, TrainingPlan, TrialContext, TrialPort
from autotune.training.context.epoch_clock import FINITE_CHECK_EVERY


def _port(limits: Limits) -> TrialPort:
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 2}, limits=limits))
    return TrialPort(ctx, "a framework")


@pytest.mark.parametrize("loss", [None, torch.tensor(0.5)], ids=["framework logs its loss", "loss per step"])
def test_a_frameworks_steps_stop_at_the_memory_cap_inside_the_epoch(loss: torch.Tensor | None) -> None:
    """The HF Trainer's steps carry no loss (it logs the epoch's): the periodic check still reads the memory cap, as
    it does for ctx.backward, so a trial over the cap stops mid-epoch, not after its evaluation."""
    port = _port(Limits(max_peak_memory_mb=100))  # MB over what the process held when the trial began
    assert port.epoch_begin(steps_per_epoch=4 * FINITE_CHECK_EVERY)
    held = torch.ones(300 * 2**18)  # 300 MB, written: resident
    with pytest.raises(TrialStopped) as e:
        for _ in range(FINITE_CHECK_EVERY):
            port.batch_begin()
            port.step(8, loss)
    assert e.value.reason == "memory" and e.value.epoch == 1, e.value
    assert port._st.clock.steps == FINITE_CHECK_EVERY  # at the first periodic check
    del held


def test_a_non_finite_step_loss_stops_a_frameworks_epoch() -> None:
    port = _port(Limits())
    assert port.epoch_begin(steps_per_epoch=4 * FINITE_CHECK_EVERY)
    with pytest.raises(TrialStopped) as e:
        for i in range(2 * FINITE_CHECK_EVERY):
            port.step(8, torch.tensor(float("nan") if i == 3 else 0.5))
    assert e.value.reason == "diverged" and port._st.clock.steps == FINITE_CHECK_EVERY, e.value


def test_an_adapter_refusing_a_chosen_lr_leaves_the_fits_own_lrs_as_they_are() -> None:
    """The rescale decision reads the ledger, not a read made for its side effect: once an adapter says a chosen lr
    cannot apply (Lightning: the module's own scheduler holds the lrs), ctx.prepare does not multiply the fit's
    own groups' lrs by it, and the record says why."""
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "lr": 0.5}, searched=("lr",)))
    port = TrialPort(ctx, "a framework")
    assert port.applied.chose("lr") and port.applied.unread_choices() == ["lr"]
    port.applied.cannot("lr", "your scheduler holds the lrs", chosen_only=True)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx.prepare(model, opt)
    assert opt.param_groups[0]["lr"] == 0.1
    assert ctx._state.unapplied() == {"lr": "your scheduler holds the lrs"}
    # without the refusal the chosen lr multiplies the fit's own lrs (what the refusal prevents)
    other = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "lr": 0.5}, searched=("lr",)))
    model2 = torch.nn.Linear(2, 1)
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1)
    other.prepare(model2, opt2)
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.05)


def test_the_context_takes_its_plan_as_it_is() -> None:
    plan = TrainingPlan.bare({**DEFAULTS, "device": "cpu"}, user={"width": 4}, seed=7, fixed=("epochs",))
    ctx = TrialContext(plan)
    assert ctx._state.plan is plan and ctx.device is plan.device and ctx.seed == 7 and ctx.params["width"] == 4
    with pytest.raises(TypeError, match="its own user parameters and seed"):
        TrialContext(plan, seed=3)


def test_a_trial_resolves_its_device_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan resolves the device; the trainer, the context and its fine-tunes take it from there."""
    from autotune import config
    from autotune.fit import TrialPlan, load_fit, trainer
    from autotune.training import accel

    calls: list[str] = []
    real = accel.resolve_device
    monkeypatch.setattr(accel, "resolve_device", lambda name: calls.append(name) or real(name))
    cfg = config.from_dict({"trainer": "tests.user_fits:fit", "train": {"device": "cpu", "epochs": 1}})
    plan = TrialPlan.of(cfg, cfg.fixed(), 0, study_rules=False)
    r = trainer.train(plan.training, load_fit(cfg))
    assert calls == ["cpu"] and r.epochs_run == 1
