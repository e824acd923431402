"""fit/plan.py and fit/function.py: a config and one point of its space to the trial's plan (the seed, what it
searched and fixed, its limits, its training half handed to the context as it is); the training function."""

from __future__ import annotations

from autotune import config
from autotune.fit import TrainingPlan, TrialPlan, trial_seed
from autotune.fit.function import fit_name, load_fit
from autotune.spec import RunConfig


def job(cfg: RunConfig) -> TrainingPlan:
    return TrialPlan.of(cfg, cfg.fixed(), 0).training


def test_job_measures_inference_only_when_an_objective_or_constraint_needs_it() -> None:
    plain = config.from_dict({})
    assert not job(plain).measure_inference
    latency = config.from_dict({"objectives": ["val_accuracy", "inference_latency_ms"]})
    assert job(latency).measure_inference
    drop = config.from_dict({"constraints": {"max_accuracy_drop": 0.01}})
    assert job(drop).measure_inference
    # early stopping watches val_loss, then the quality objectives (not clocks or sizes)
    assert job(latency).early_stopping_on == (("val_loss", "minimize"), ("val_accuracy", "maximize"))


def test_trial_seed_follows_the_study_seed_or_an_exported_trials_own() -> None:
    assert trial_seed(config.from_dict({"study": {"seed": 2}}), 5) == 2 * 100_003 + 5
    assert trial_seed(config.from_dict({}), 3) == 3
    assert trial_seed(config.from_dict({"study": {"seed": 2, "trial_seed": 41}}), 1) == 42


def test_the_training_function_is_the_configs_trainer_else_the_builtin() -> None:
    plain = config.from_dict({})
    assert load_fit(plain) is None and fit_name(plain, None) == "the built-in trainer"
    user = config.from_dict({"trainer": "tests.user_fits:fit"})
    fit = load_fit(user)
    assert callable(fit) and fit.__name__ == "fit" and fit_name(user, fit) == "tests.user_fits:fit"
    assert fit_name(plain, fit) == "tests.user_fits:fit"  # given in Python: named by its module and name


def test_searched_keys_are_the_active_ones_and_fixed_keys_default_to_train() -> None:
    cfg = config.from_dict({"train": {"epochs": 2}, "space": {
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
        "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}}}})
    adam = {**cfg.fixed(), "optimizer": "adam", "momentum": 0.5}
    assert TrialPlan.for_trial(cfg, adam, 0).training.searched == {"optimizer"}  # momentum's `when` does not hold
    assert TrialPlan.for_trial(cfg, {**adam, "optimizer": "sgd"}, 0).training.searched == {"optimizer", "momentum"}
    trained = TrialPlan.of(cfg, adam, 7).training
    assert trained.seed == 7 and trained.fixed == {"epochs"} and trained.settings["optimizer"] == "adam"
