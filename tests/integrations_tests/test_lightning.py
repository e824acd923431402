"""autotune.integrations.lightning: a LightningModule trained for real through the trial context: the user's module,
loaders and Trainer arguments are the baseline (unchosen settings stay theirs, recorded as the recipe), every chosen
row received by Lightning, bf16 with clipping trains, a reused module refused, a metric the module never logs named
with what it did log, the clocks without validation, the stop rules, the table derived from the catalogue, the
example end to end (a study, its front, `best --export`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune.core import ConfigError, TrialStopped
from autotune.integrations import lightning as tune_lightning
from autotune.integrations.tables import uncovered
from autotune.spec import SETTINGS
from autotune.spec.settings import DEFAULTS
from autotune.training import ContextMisuse, TrainingPlan, TrialContext, run_fit, trial_session
from tests.integrations_tests import lightning_fits
from tests.integrations_tests.lightning_fits import SEEN
from tests.support import lightning_trial as train

FITS = "tests.integrations_tests.lightning_fits"


# ---------------------------------------------------------------- the table and the catalogue


def test_every_setting_has_one_role_derived_from_the_catalogue() -> None:
    table = tune_lightning.LIGHTNING
    assert uncovered(table) == []
    roles = {key: table.role(key)[0] for key in SETTINGS}
    assert roles["precision"] == roles["batch_size"] == "mapped" and roles["label_smoothing"] == "yours"
    assert roles["optimizer"] == roles["lr_schedule"] == roles["compile"] == "part"
    assert roles["data_on_device"] == "cannot" and roles["prune_method"] == "builtin" and roles["device"] == "context"


def test_a_setting_the_mapping_forgets_is_refused_not_silently_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    table = tune_lightning.LIGHTNING
    monkeypatch.delitem(table.mapped, "grad_clip")  # (a mapping row lost: the derived role is "cannot")
    assert table.role("grad_clip")[0] == "cannot"
    assert table.refusal("grad_clip", [1.0]) == ("the Lightning integration cannot apply grad_clip: Lightning's "
                                                 "Trainer has no argument for it; drop the key (your code's own "
                                                 "value stays)")


# ---------------------------------------------------------------- each mapping row: Lightning received the value


def test_trainer_arguments_are_received_and_recorded_applied() -> None:
    r = train(grad_accum_steps=2, grad_clip=0.5, cudnn_benchmark=True, epochs=2)
    t = SEEN["trainer"]
    assert (t.accumulate_grad_batches, t.gradient_clip_val, t.max_epochs, t.precision) == (2, 0.5, 2, "32-true")
    assert SEEN["benchmark"] is True  # (Lightning sets torch's flag from Trainer(benchmark=))
    assert r.not_applied == {} and r.epochs_run == 2
    assert SEEN["steps"] == 2 * math.ceil(math.ceil(600 / 50) / 2)  # 12 batches an epoch, a step every 2


def test_bf16_reaches_the_trainer_and_fp16_on_a_cpu_is_recorded_not_applied() -> None:
    r = train(precision="bf16", epochs=1, data_fraction=0.2)
    assert SEEN["trainer"].precision == "bf16-mixed" and "precision" not in r.not_applied
    r = train(precision="fp16", epochs=1, data_fraction=0.2)
    assert SEEN["trainer"].precision == "bf16-mixed"  # Lightning's own choice on a CPU
    assert r.not_applied["precision"] == "Lightning's Trainer holds precision='bf16-mixed', not '16-mixed'"


def test_loader_settings_shape_the_dataloaders() -> None:
    r = train(batch_size=40, data_fraction=0.5, eval_batch_size=64, num_workers=1, pin_memory=True,
              prefetch_factor=3, persistent_workers=True, epochs=1)
    dl, val = SEEN["train_loader"], SEEN["val_loader"]
    assert (dl.batch_size, dl.num_workers, dl.prefetch_factor, dl.persistent_workers, dl.pin_memory) == \
        (40, 1, 3, True, True)
    assert len(dl.dataset) == 300 and SEEN["samples"] == 300 and val.batch_size == 64
    assert r.not_applied == {} and r.history[0].samples_per_s > 0


def test_worker_settings_without_workers_and_data_on_device_are_not_applied() -> None:
    r = train(prefetch_factor=4, data_on_device=True, epochs=1, data_fraction=0.2)
    assert r.not_applied == {"prefetch_factor": "with num_workers 0 the DataLoader has no worker processes",
                             "data_on_device": "Lightning's loop moves each batch to the device itself"}


def test_the_searched_optimizer_and_schedule_are_what_stepped() -> None:
    r = train(optimizer="adamw", lr=0.01, weight_decay=0.1, lr_schedule="cosine", epochs=2)
    opt = SEEN["optimizer"]
    assert type(opt) is torch.optim.AdamW and opt.param_groups[0]["weight_decay"] == 0.1
    assert SEEN["steps"] == 24 and SEEN["lrs"][0] == pytest.approx(0.01, rel=0.1) and SEEN["lrs"][-1] < 1e-3
    assert SEEN["schedulers"][0].interval == "step"
    assert r.not_applied == {} and not {"optimizer", "lr", "weight_decay", "lr_schedule"} & set(r.unused)
    assert r.history[0].lr > r.history[1].lr  # the cosine schedule moved the lr the epochs trained at


def test_a_searched_sgd_takes_its_momentum() -> None:
    r = train(optimizer="sgd", lr=0.05, momentum=0.7, epochs=1, data_fraction=0.5)
    opt = SEEN["optimizer"]
    assert type(opt) is torch.optim.SGD and opt.param_groups[0]["momentum"] == 0.7 and SEEN["steps"] == 6
    assert r.not_applied == {} and "momentum" not in r.unused


def test_the_schedule_spans_the_batches_lightning_trains() -> None:
    """limit_train_batches 0.5: 6 of 12 batches an epoch; the cosine schedule spans those 12 steps, not 24."""
    train(lightning_fits.fit_half_the_batches, optimizer="sgd", lr=0.1, lr_schedule="cosine", epochs=2)
    assert SEEN["steps"] == 12 and SEEN["lrs"][-1] < 0.01  # (over 24 steps it would still be near 0.05)


def test_own_optimizer_keeps_the_modules_and_a_chosen_lr_scales_it() -> None:
    r = train(lightning_fits.fit_own_optimizer, lr=0.5, lr_schedule="cosine", epochs=1)
    opt = SEEN["optimizer"]
    assert type(opt) is torch.optim.SGD and opt.param_groups[0]["initial_lr"] == pytest.approx(0.05)  # 0.1 x 0.5
    assert r.effective_lrs == ([0.1], [pytest.approx(0.05)]) and len(SEEN["schedulers"]) == 1  # the chosen cosine
    assert r.not_applied == {} and r.recipe["optimizer"] == "SGD (your configure_optimizers)"


def test_unchosen_settings_stay_the_modules_and_the_loaders_and_are_recorded() -> None:
    """Only precision chosen: the module's own SGD (lr 0.1, momentum 0.5) and no scheduler, the user's loader
    (batch 50, shuffled), Lightning's own clipping (none) and accumulation (1), the epochs given to fit."""
    values = {**DEFAULTS, "device": "cpu", "precision": "bf16"}
    ctx = TrialContext(TrainingPlan.bare(values, searched=("precision",)))
    with trial_session(values):
        r = run_fit(lightning_fits.fit_three_epochs, ctx)
    opt, loader = SEEN["optimizer"], SEEN["train_loader"]
    assert type(opt) is torch.optim.SGD and opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.5
    assert SEEN["schedulers"] == [] and loader.batch_size == 50
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)
    assert r.epochs_run == 3 and SEEN["trainer"].precision == "bf16-mixed"
    assert r.recipe == {"optimizer": "SGD (your configure_optimizers)", "lr": 0.1, "weight_decay": 0.0,
                        "momentum": 0.5, "lr_schedule": "none (your configure_optimizers)", "batch_size": 50,
                        "data_fraction": 1.0, "num_workers": 0, "pin_memory": False, "eval_batch_size": 1,
                        "grad_accum_steps": 1, "grad_clip": 0.0, "cudnn_benchmark": False, "epochs": 3}, r.recipe
    assert "precision" not in r.unused and {"optimizer", "lr", "epochs", "batch_size"} <= set(r.unused)



def test_fixed_optimizer_settings_the_modules_own_optimizer_does_not_take_are_recorded_not_applied() -> None:
    """weight_decay and momentum fixed in train: without `optimizer`: the module's own SGD trains as it is (its
    momentum 0.5, no decay), and the trial says so instead of dropping them silently."""
    values = {**DEFAULTS, "device": "cpu", "epochs": 1, "weight_decay": 1e-3, "momentum": 0.9}
    ctx = TrialContext(TrainingPlan.bare(values, fixed=("epochs", "weight_decay", "momentum")))
    with trial_session(values):
        r = run_fit(lightning_fits.fit, ctx)
    group = SEEN["optimizer"].param_groups[0]
    assert (group["momentum"], group["weight_decay"]) == (0.5, 0)
    why = "your own optimizer trained under Lightning: momentum, weight_decay were not used (choose optimizer too, " \
          "to train with autotune's)"
    assert r.not_applied == {"momentum": why, "weight_decay": why}


def test_bf16_with_gradient_clipping_trains() -> None:
    """Lightning's mixed-precision plugin refuses to clip a fused optimizer: autotune builds it unfused then."""
    r = train(precision="bf16", grad_clip=0.5, optimizer="adam", lr=0.01, epochs=2)
    opt = SEEN["optimizer"]
    assert type(opt) is torch.optim.Adam and not opt.defaults.get("fused")
    assert SEEN["trainer"].precision == "bf16-mixed" and SEEN["trainer"].gradient_clip_val == 0.5
    assert r.epochs_run == 2 and r.not_applied == {} and r.history[-1].metrics["val_accuracy"] > 0.5
    r = train(grad_clip=0.5, optimizer="adam", lr=0.01, epochs=1)  # (fp32: fused stays, Lightning clips it itself)
    assert SEEN["optimizer"].defaults.get("fused") and r.not_applied == {}


def test_init_and_channels_last_through_prepare() -> None:
    r = train(init="kaiming_normal", channels_last=True, user={"conv": True}, epochs=1, data_fraction=0.2)
    assert SEEN["model"].conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert SEEN["biases_zero"] and r.not_applied == {}  # init (not default) zeroes the biases before training


def test_channels_last_without_a_conv_is_not_applied() -> None:
    r = train(channels_last=True, epochs=1, data_fraction=0.2)
    assert r.not_applied == {"channels_last": "the model has no 2-D convolution"}


@pytest.mark.slow
def test_compile_hands_lightning_the_compiled_module() -> None:
    r = train(compile=True, epochs=1, data_fraction=0.2)
    assert SEEN["compiled"] and r.not_applied == {} and r.compile_time_s > 0


def test_a_trainer_argument_of_the_users_stays_unless_the_trial_chose_it() -> None:
    r = train(lightning_fits.fit_with_precision_argument, epochs=1)  # the user's bf16-mixed: precision not chosen
    assert SEEN["trainer"].precision == "bf16-mixed" and r.recipe["precision"] == "bf16"
    r = train(lightning_fits.fit_with_precision_argument, precision="fp32", epochs=1)  # chosen: the trial's
    assert SEEN["trainer"].precision == "32-true" and "precision" not in r.recipe and r.not_applied == {}
    with pytest.raises(ContextMisuse, match=r"Trainer argument\(s\) accelerator follow the trial's device"):
        train(lightning_fits.fit_with_accelerator_argument, epochs=1)


# ---------------------------------------------------------------- clocks and stops


def test_several_devices_are_refused_at_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """devices > 1 with a fit that calls tune_lightning.fit: one line, exit 2, before any trial runs."""
    from autotune.cli import main
    from tests.support import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    text = (EXAMPLES / "digits_lightning.yaml").read_text(encoding="utf-8")
    path = tmp_path / "l.yaml"
    path.write_text(text.replace("sqlite:///studies/", f"sqlite:///{tmp_path}/").replace(
        "  device: auto", "  device: cpu\n  devices: 2"), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: l.yaml: train.devices: the Lightning integration trains a trial on one device; allowed: 1 " \
                  "(got 2)", err
    assert not list(tmp_path.glob("*.db"))
    # a fit handed to run() directly, from its own module's tune_lightning.fit
    path.write_text(path.read_text(encoding="utf-8").replace("devices: 2", "devices: 1"), encoding="utf-8")
    cfg = autotune.load_config(str(path))
    with pytest.raises(ConfigError, match=r"l\.yaml: train\.devices: the Lightning integration"):
        autotune.run(cfg.model_copy(update={"train": {**cfg.train, "devices": 2}}), lightning_fits.fit)
    with pytest.raises(ContextMisuse, match="the Lightning integration trains a trial on one device"):  # (run time)
        train(devices=2)


def test_validation_time_is_not_training_time() -> None:
    r = train(user={"val_sleep_s": 1.0}, epochs=2, optimizer="adam", lr=0.01)
    assert all(h.epoch_time_s < 1.0 for h in r.history)  # each epoch's validation slept 1 s after its training
    assert r.train_time_s == pytest.approx(sum(h.epoch_time_s for h in r.history))
    assert [sorted(h.metrics) for h in r.history] == [["val_accuracy", "val_loss"]] * 2
    assert r.history[-1].metrics["val_accuracy"] > 0.8 and r.history[0].train_loss < 1.2


def test_a_validation_inside_the_epoch_is_not_its_report() -> None:
    """val_check_interval 0.5: the epoch's training goes on after the first validation; the second is reported."""
    r = train(lightning_fits.fit_validating_twice_an_epoch, epochs=2, optimizer="adam", lr=0.01)
    assert r.epochs_run == 2 and SEEN["samples"] == 1200 and all("val_accuracy" in h.metrics for h in r.history)
    assert [h.samples_per_s * h.epoch_time_s for h in r.history] == pytest.approx([600, 600])


def test_a_stop_at_a_validation_ends_training_with_its_reason() -> None:
    def stop_at_2(rec: Any) -> None:
        if rec.epoch == 2:
            raise TrialStopped("dominated", epoch=2, detail="behind the front")

    with pytest.raises(TrialStopped) as stop:
        train(epochs=4, setup={"on_epoch": stop_at_2})
    assert (stop.value.reason, stop.value.epoch) == ("dominated", 2)
    assert SEEN["trainer"].current_epoch == 1  # raised out of the second epoch's validation: no third epoch


def test_early_stopping_ends_lightnings_loop() -> None:
    r = train(epochs=8, lr=1e-6, optimizer="sgd", early_stopping_patience=1, early_stopping_min_delta=1.0)
    assert r.stopped_early_at == 2 and r.epochs_run == 2 and SEEN["trainer"].current_epoch == 2


def test_a_missing_lightning_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # (None in sys.modules: the import fails)
    with pytest.raises(ConfigError, match=r"trainer: the Lightning integration needs lightning: pip install "
                                          r"'autotune\[lightning\]'"):
        tune_lightning.fit(TrialContext({**DEFAULTS, "device": "cpu"}), None)


# ---------------------------------------------------------------- the example, a study end to end


def test_the_lightning_example_runs_a_study_with_pruning_front_and_export(tmp_path: Path) -> None:
    from tests.support import run_example as run

    first = {"lr": 0.01, "optimizer": "adam", "batch_size": 64, "precision": "fp32", "grad_accum_steps": 1,
             "lr_schedule": "constant", "user.width": 8}
    res = run(tmp_path, "digits_lightning", 3, [first, {**first, "grad_accum_steps": 2, "user.width": 16}],
              **{"train.epochs": 2, "space.precision.choices": ["fp32"]})
    done = [t for t in res.study.trials if t.state.name == "COMPLETE"]
    assert len(done) >= 2, [t.user_attrs for t in res.study.trials]
    for t in done:
        hist = t.user_attrs["history"]
        assert len(hist) == 2 and t.values[0] == hist[-1]["val_accuracy"]
        assert t.values[1] == pytest.approx(sum(h["epoch_time_s"] for h in hist))
    assert done[0].values[0] > 0.5 and res.pareto and res.best is not None
    # `best --export`: the trial's settings and seed, trained again through Lightning, give its values again
    from autotune import config
    from autotune.observe import export
    from autotune.search import results

    cfg = res.config
    trial = done[1]
    again = config.load(export.export_best(cfg, results.summarize(trial, [o.metric for o in cfg.objectives]),
                                           tmp_path / "best.yaml"))
    one = autotune.run(again).study.trials[0]
    assert one.user_attrs["seed"] == trial.user_attrs["seed"] and one.params == {}
    assert one.values[0] == pytest.approx(trial.values[0], abs=1e-9)
    assert [h["train_loss"] for h in one.user_attrs["history"]] == pytest.approx(
        [h["train_loss"] for h in trial.user_attrs["history"]], rel=1e-6)
    html = res.report(str(tmp_path / "report.html"))  # the report reads the integration's records like any
    assert Path(html).stat().st_size > 10_000


def test_a_diverging_lightning_trial_ends_pruned_with_its_reason(tmp_path: Path) -> None:
    """A multi-objective study (accuracy vs training time): the stop rules end the trial out of trainer.fit."""
    from tests.support import run_example as run

    wild = {"lr": 1e9, "optimizer": "sgd_nesterov", "batch_size": 128, "precision": "fp32",
            "grad_accum_steps": 1, "lr_schedule": "constant", "user.width": 8}
    res = run(tmp_path, "digits_lightning", 1, [wild], **{"train.epochs": 3, "space.lr.high": 1e10})
    (t,) = res.study.trials
    assert t.state.name == "PRUNED", t.user_attrs
    assert t.user_attrs["stop_reason"] == "diverged" and len(t.user_attrs["history"]) <= 1


@pytest.mark.parametrize("multi", [True, False], ids=["pareto", "median"])
def test_the_studys_pruner_stops_a_lightning_trial(multi: bool, tmp_path: Path) -> None:
    """Two objectives, the Pareto pruner: the trial, dominated after its first epoch, ends PRUNED (dominated). One
    objective, Optuna's median pruner: below the median after its first epoch, PRUNED (pruned). Each compared with
    a finished trial no real one can match (accuracy 1.0 each epoch, in a microsecond), so the stop is certain;
    raised out of trainer.fit at the first validation: one epoch of three recorded."""
    from optuna.trial import create_trial

    from autotune.search.pruners import EPOCH_VALUES
    from autotune.study.runner import open_study
    from tests.support import EXAMPLES

    overrides: dict[str, Any] = {
        "study.storage": f"sqlite:///{tmp_path}/l.db", "study.n_trials": 2, "train.epochs": 3,
        "pruning.pruner": "pareto" if multi else "median",
        "pruning.pruner_args": {"n_startup_trials": 1, "n_warmup_steps": 1 if multi else 0}}
    if multi:
        ahead = create_trial(values=[1.0, 1e-6], user_attrs={EPOCH_VALUES: [[1.0, 1e-6 * e] for e in (1, 2, 3)]})
    else:
        overrides["objectives"] = [{"metric": "val_accuracy", "direction": "maximize"}]
        ahead = create_trial(value=1.0, intermediate_values={1: 1.0, 2: 1.0, 3: 1.0})
    cfg = autotune.load_config(str(EXAMPLES / "digits_lightning.yaml"), overrides=overrides)
    study = open_study(cfg)
    study.add_trial(ahead)
    study.enqueue_trial({"lr": 0.01, "optimizer": "adam", "batch_size": 128, "precision": "fp32",
                         "grad_accum_steps": 1, "lr_schedule": "constant", "user.width": 8})
    t = autotune.run(cfg).study.trials[1]
    assert t.state.name == "PRUNED", t.user_attrs
    assert t.user_attrs["stop_reason"] == ("dominated" if multi else "pruned"), t.user_attrs
    assert t.user_attrs["stop_epoch"] == 1 and len(t.user_attrs["history"]) == 1
    assert t.user_attrs["stop_detail"] == ("dominated at epoch 1 by trial 0" if multi else "Optuna pruner")


@pytest.mark.slow
def test_the_lightning_example_with_two_workers_on_a_journal(tmp_path: Path) -> None:
    """`autotune run --workers 2` on one machine's journal file: both workers train Lightning trials."""
    import subprocess
    import sys

    from tests.support import EXAMPLES, assert_exact

    yaml_text = (EXAMPLES / "digits_lightning.yaml").read_text().replace("epochs: 4", "epochs: 2")
    (tmp_path / "w.yaml").write_text(yaml_text.replace("choices: [fp32, bf16]", "choices: [fp32]"))
    (tmp_path / "digits_lightning.py").write_text((EXAMPLES / "digits_lightning.py").read_text())
    (tmp_path / "digits_data.py").write_text((EXAMPLES / "digits_data.py").read_text())
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(tmp_path / "w.yaml"), "--plain", "--n-trials",
                           "8", "--workers", "2", "--storage", f"journal:///{tmp_path}/w.log"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="digits-lightning",
                              storage=JournalStorage(JournalFileBackend(str(tmp_path / "w.log"))))
    # (8 trials: with 4, one worker once finished them all while the other was still importing Lightning)
    done = assert_exact(study, 8)
    assert len({t.user_attrs["worker"] for t in done}) == 2 and any(t.state.name == "COMPLETE" for t in done)


@pytest.mark.slow
def test_the_dashboard_lists_a_lightning_study_with_its_records(tmp_path: Path) -> None:
    """Two trials of the Lightning example (the second with fp16, which Lightning turns into bf16 on a CPU: not
    applied), served by the real optuna-dashboard: /api/studies lists the study, its trials and their user attrs."""
    import json

    import requests

    from tests.support import attrs_of as _attrs
    from tests.support import run_example as run
    from tests.support import start_dashboard as _start_dashboard

    first = {"lr": 0.01, "optimizer": "adam", "batch_size": 128, "precision": "fp32", "grad_accum_steps": 1,
             "lr_schedule": "constant", "user.width": 8}
    res = run(tmp_path, "digits_lightning", 2, [first, {**first, "precision": "fp16"}],
              **{"train.epochs": 2, "space.precision.choices": ["fp32", "fp16"], "pruning.pruner": "none"})
    stored = res.study.trials
    assert [t.state.name for t in stored] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in stored]
    dash, base = _start_dashboard(f"sqlite:///{tmp_path}/digits_lightning.db")
    try:
        studies = requests.get(f"{base}/api/studies", timeout=30).json()["study_summaries"]
        (sid,) = [s["study_id"] for s in studies if s["study_name"] == "digits-lightning"]
        detail = requests.get(f"{base}/api/studies/{sid}", timeout=30).json()
    finally:
        dash.stop()
    assert detail["objective_names"] == ["val_accuracy", "train_time_s"]
    trials = sorted(detail["trials"], key=lambda t: t["number"])
    assert [(t["number"], t["state"]) for t in trials] == [(0, "Complete"), (1, "Complete")]
    for shown, t in zip(trials, stored):
        ua = _attrs(shown["user_attrs"])
        assert {"history", "settings", "seed"} <= set(ua), sorted(ua)
        assert json.loads(ua["history"]) == t.user_attrs["history"]  # each epoch's record, as stored
        assert json.loads(ua["settings"]) == t.user_attrs["settings"]
        assert [float(v) for v in shown["values"]] == pytest.approx(t.values)
    fp16 = _attrs(trials[1]["user_attrs"])
    assert "not_applied" not in _attrs(trials[0]["user_attrs"])
    assert json.loads(fp16["not_applied"])["precision"].startswith("Lightning's Trainer holds precision='bf16-mixed'")


# ---------------------------------------------------------------- checks before and at the first trial


def _study(tmp_path: Path, fit: str = "fit", **sections: Any) -> Any:
    from autotune import config

    raw: dict[str, Any] = {
        "study": {"name": "l", "storage": f"sqlite:///{tmp_path}/l.db", "n_trials": 3},
        "trainer": f"{FITS}:{fit}",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}, "train_time_s"],
        "train": {"device": "cpu", "epochs": 1},
    }
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "l.yaml"))


def test_a_module_level_module_is_refused_at_the_second_trial(tmp_path: Path) -> None:
    from autotune.study.runner import open_study

    cfg = _study(tmp_path, "fit_shared_module")
    with pytest.raises(ConfigError, match=r"l\.yaml: trainer: autotune\.integrations\.lightning\.fit got "
                                          r"lightning_fits\.py: SHARED \(Blobs\), the model object an earlier trial "
                                          r"already trained: this trial would start where that one ended"):
        autotune.run(cfg)
    assert [t.state.name for t in open_study(cfg).trials] == ["COMPLETE", "FAIL"]



def test_best_says_which_fixed_settings_lightning_did_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    """fp16 fixed on a CPU: Lightning trains bf16-mixed. The trial records it and `best` says it (it showed only the
    searched settings not applied); the export keeps the file's fp16, which trains the trial again as it was."""
    from autotune.observe import export, progress

    cfg = _study(tmp_path, study={"name": "l", "storage": f"sqlite:///{tmp_path}/l.db", "n_trials": 1},
                 train={"device": "cpu", "epochs": 1, "precision": "fp16"})
    res = autotune.run(cfg)
    assert res.best is not None and res.best.not_applied == {}
    assert res.best.fixed_not_applied == {"precision": "Lightning's Trainer holds precision='bf16-mixed', not "
                                                       "'16-mixed'"}
    capsys.readouterr()
    progress.print_best(res)
    assert "(precision: fixed in train:, not applied: Lightning's Trainer holds precision='bf16-mixed', not " \
           "'16-mixed')" in capsys.readouterr().out
    assert export.best_yaml(cfg, res.best)["train"]["precision"] == "fp16"


def test_a_metric_the_module_never_logs_stops_the_run_naming_what_it_logged(tmp_path: Path) -> None:
    """Lightning's own example logs `valid_loss` (on_step too): an objective `val_loss` is named with what the first
    epoch logged, and the run stops at its first trial, not after three full ones."""
    from autotune.study.runner import open_study

    cfg = _study(tmp_path, "fit_logs_valid_loss", objectives=[{"metric": "val_loss", "direction": "minimize"},
                                                              "train_time_s"])
    with pytest.raises(ConfigError, match=r"l\.yaml: objectives\.0\.metric: Lightning logged no val_loss in the "
                                          r"first epoch's evaluation; it logged: valid_loss, valid_loss_epoch, "
                                          r"valid_loss_step \(one step's value: the epoch's is valid_loss\) \(did "
                                          r"you mean 'valid_loss'\?\)"):
        autotune.run(cfg)
    assert [t.state.name for t in open_study(cfg).trials] == ["FAIL"]



def test_a_training_metric_logged_per_epoch_is_recorded_with_its_own_epoch() -> None:
    """At a validation's end Lightning still holds the previous epoch's on_epoch training values (none in the first
    epoch): each epoch's record holds that epoch's own train_acc, as Lightning computed it at the epoch's end."""
    r = train(lightning_fits.fit_logs_train_acc_per_epoch, searched=("lr",), lr=1.0, epochs=3,
              setup={"metrics": ["val_accuracy", "val_loss", "train_acc"]})
    assert len(r.history) == len(SEEN["train_acc"]) == 3
    assert [h.metrics.get("train_acc") for h in r.history] == pytest.approx(SEEN["train_acc"])


def test_an_objective_logged_per_step_only_stops_the_run_naming_it(tmp_path: Path) -> None:
    """A training_step's self.log is per step by default: its value is the epoch's last batch's. As an objective it
    stops the run at the first evaluation, which names it and how to log the epoch's value."""
    from autotune.study.runner import open_study

    cfg = _study(tmp_path, "fit_logs_train_acc_per_step", objectives=[
        {"metric": "train_acc", "direction": "maximize"}, "train_time_s"])
    with pytest.raises(ConfigError, match=r"objectives\.0\.metric: Lightning logged no train_acc in the first epoch's "
                                          r"evaluation; it logged: val_accuracy, val_loss, train_acc \(one step's "
                                          r"value: log it with on_epoch=True\)"):
        autotune.run(cfg)
    assert [t.state.name for t in open_study(cfg).trials] == ["FAIL"]


def test_data_on_device_is_refused_at_validation_and_false_is_what_lightning_does(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"space\.data_on_device: the Lightning integration cannot apply "
                                          r"data_on_device: Lightning's loop moves each batch to the device itself"):
        _study(tmp_path, space={"data_on_device": {"type": "bool"}})
    _study(tmp_path, train={"device": "cpu", "data_on_device": False})


def test_the_lr_note_only_when_lr_multiplies_the_modules_own_optimizer(tmp_path: Path) -> None:
    from autotune.fit import notes

    lr = {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}
    said = notes(_study(tmp_path, space={"lr": lr}))  # the module's optimizer: lr multiplies its group lrs
    assert len(said) == 1 and "Lightning trains your module's own optimizer (configure_optimizers) unless optimizer " \
                               "is searched or fixed too, and lr multiplies each of its parameter groups' lr" in said[0]
    assert "ctx.prepare" not in said[0]  # (the note for hand-written fits speaks of calls a Lightning user never makes)
    assert notes(_study(tmp_path, space={"lr": lr, "optimizer": {"type": "categorical", "choices": ["adam"]}})) == []


@pytest.mark.slow
def test_a_study_prints_no_framework_chatter(tmp_path: Path) -> None:
    """Lightning's per-trial lines (device summary, tips, "max_epochs reached") are left out; the run's own lines
    stay, and warnings that matter (fp16 on a CPU) too."""
    import subprocess
    import sys

    from tests.support import ROOT

    (tmp_path / "l.yaml").write_text(
        f"study: {{name: l, storage: 'sqlite:///{tmp_path}/l.db', n_trials: 2}}\ntrainer: {FITS}:fit\n"
        "objectives: [{metric: val_accuracy, direction: maximize}, train_time_s]\n"
        "train: {device: cpu, epochs: 1, optimizer: adam}\n"
        "space: {precision: {type: categorical, choices: [fp32, fp16]}}\n")
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(tmp_path / "l.yaml"), "--plain"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    for noise in ("GPU available", "TPU available", "Tip:", "max_epochs=", "LeafSpec", "multiplies each"):
        assert noise not in out, out
    assert out.count("trial   0") == 1 and "2 trials in the study" in out
