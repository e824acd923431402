"""Each row of the settings catalogue says how its setting acts and what applies it; the speed probe's, the
strategy's, the trial context's and the framework tables' groups are derived from those two words, and the
behaviour each word promises holds for every row (so a new row needs no edit here: it is tested by its words)."""

from __future__ import annotations

import pytest

from autotune.integrations.tables import FRAMEWORKS
from autotune.spec import APPLIERS, BUILTIN_ONLY, SETTINGS, acting, applied_by
from autotune.spec.settings import ACTS, DEFAULTS, Setting
from autotune.speed import probe, strategy, sweep
from autotune.training import BY_CONTEXT, TrainingPlan, TrialContext
from autotune.training.context import applied
from autotune.training.data import augment


def test_every_setting_is_classified() -> None:
    for name, s in SETTINGS.items():
        assert s.acts in ACTS, name
        assert s.applied_by in APPLIERS, name
        if s.exactness:  # ranks every choice of a setting that trades exactness for speed
            assert s.acts == "speed_and_result" and {n for n, _ in s.exactness} == set(s.names), name


def test_a_row_without_its_roles_or_with_an_unknown_one_is_refused() -> None:
    with pytest.raises(TypeError):
        Setting(name="x", kind="bool", default=False, doc="x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="setting x: acts must be one of result, speed, speed_and_result; got 'fast'"):
        Setting(name="x", kind="bool", default=False, doc="x", acts="fast", applied_by="around")
    with pytest.raises(ValueError, match="setting x: applied_by must be one of around, "):
        Setting(name="x", kind="bool", default=False, doc="x", acts="speed", applied_by="somewhere")
    with pytest.raises(ValueError, match="exactness ranks every name"):
        Setting(name="x", kind="choice", default="a", doc="x", names=("a", "b"), acts="speed_and_result",
                applied_by="around", exactness=(("a", 1),))


@pytest.mark.parametrize("key", SETTINGS)
def test_how_a_setting_acts_decides_what_the_probe_and_the_strategy_do_with_it(key: str) -> None:
    s = SETTINGS[key]
    assert (key in probe.THROUGHPUT) == (s.acts != "result")  # the probe measures each value of what moves speed
    assert (key in strategy.NEUTRAL) == (s.acts == "speed")  # probe_then_tune fixes only what moves speed alone
    assert (key in sweep.ACCELERATION) == (s.acts != "result" and key != "device")
    assert strategy.EXACTNESS.get(key) == (dict(s.exactness) if s.exactness else None)


def _nothing_read(key: str) -> dict[str, str]:
    """A fit that chose `key` (searched) and used nothing of the context but its epochs and report: what the trial
    records as not applied."""
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 1}, searched=[key]))
    for _ in ctx.epochs():
        ctx.report(val_loss=1.0)
    return ctx._state.unapplied()


# the reason a setting of each part is not applied when the fit never used that part of the context
UNUSED_PART: dict[str, str] = {
    "optimizer": "ctx.prepare(model) was never called: the context built no optimizer",
    "schedule": "ctx.backward(loss) was never called",
    "step": "ctx.backward(loss) was never called",
    "loader": "your fit never called ctx.loader(...)",
    "dataloader": "your fit never called ctx.loader(...)",
    "prepare": "ctx.prepare(model) was never called",
    "autocast": "ctx.autocast() was never used",
    "loss": "was never read: the loss is your own",
    "model": "was never read: the model is your own",
    "augment": "was never read: the augmentation is your own",
    "eval": "was never read: your evaluation batches its own way",
    "after": "was never read",
    "checkpoint": "was never read",
}


@pytest.mark.parametrize("key", [k for k, s in SETTINGS.items() if s.searchable])
def test_what_applies_a_setting_decides_when_the_trial_context_applies_it(key: str) -> None:
    """Applied around every trial (around, stop, clock): whatever the fit does. Every other part: only where the fit
    used that part of the context, else recorded not applied with that part's reason. (A setting that cannot be
    searched is never recorded so: only searched ones are.)"""
    part = SETTINGS[key].applied_by
    unapplied = _nothing_read(key)
    if part in ("around", "stop", "clock", "epochs"):
        assert key not in unapplied, unapplied
    else:
        assert UNUSED_PART[part] in unapplied[key], (key, unapplied)


def test_the_groups_are_the_catalogues_words() -> None:
    assert applied.APPLIED_AROUND == applied_by("around") and augment.SETTINGS == applied_by("augment")
    assert applied.EFFECT_KEYS == applied_by("optimizer", "schedule")
    assert BUILTIN_ONLY == applied_by("after", "checkpoint") and BY_CONTEXT == applied_by("around", "stop", "clock")
    assert set(probe.THROUGHPUT) == set(acting("speed", "speed_and_result"))


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_framework_gives_every_setting_one_role_from_its_mapping_and_the_catalogue(name: str) -> None:
    table = FRAMEWORKS[name]
    for key in SETTINGS:
        role, how = table.role(key)
        assert how, key
        if key in table.mapped:
            assert role == "mapped"
        elif key in BUILTIN_ONLY:
            assert role == "builtin"
        elif key in BY_CONTEXT:
            assert role == "context"
        else:
            assert role in ("yours", "part", "cannot"), (key, role)
        # what a trial choosing it meets at validation: refused exactly when the framework cannot apply it (one
        # that acts through another setting, `needs`, when that one is chosen too)
        assert (table.refusal(key, None, chosen=SETTINGS) is not None) == (role == "cannot"), key
        if key in table.needs:
            assert table.refusal(key, None) is not None and table.needs[key][0] in SETTINGS, key
