"""The Transformers guide's causal language modeling (examples/hf_clm.py: a 2-layer GPT-2 from a config, the
guide's group_texts blocks and DataCollatorForLanguageModeling, offline answers), tuned as a user would tune it: a
module-level model and Trainer handed to hf.trainer_fit. The study runs and each trial keeps the script's recipe
where the study does not choose; `-m slow`: a plain run and the same settings through autotune reach the same
val_loss (bench/recipe_parity.py --only clm runs that over seeds). Issue 49."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import autotune  # noqa: E402
from autotune.study.runner import open_study  # noqa: E402
from tests.support import ROOT  # noqa: E402

EXAMPLES = ROOT / "examples"


def _study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: list[dict], **overrides: object) -> list:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.chdir(tmp_path)
    cfg = autotune.load_config(str(EXAMPLES / "hf_clm.yaml"), overrides={
        "study.storage": f"sqlite:///{tmp_path}/clm.db", "study.n_trials": len(first), **overrides})
    study = open_study(cfg)
    for params in first:
        study.enqueue_trial(params)
    return autotune.run(cfg).study.trials


def test_the_clm_port_is_the_guides_script_plus_six_marked_lines() -> None:
    text = (EXAMPLES / "hf_clm.py").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if re.search(r"(?<!`)# autotune\b", ln)]
    assert len(lines) == 6, lines  # the import, fit =, the __main__ guard, train() and the evaluation under it
    assert any("hf.trainer_fit(trainer)" in ln for ln in lines)


def test_the_clm_port_study_learns_and_keeps_the_guides_recipe(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _study(tmp_path, monkeypatch, [{"lr": 2e-3, "batch_size": 8, "precision": "fp32"},
                                            {"lr": 5e-3, "batch_size": 16, "precision": "bf16"}],
                    **{"train.epochs": 2})
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    from examples import hf_clm

    uniform = math.log(len(hf_clm.vocab))  # a model that learned nothing
    assert all(t.values[0] < 0.6 * uniform for t in trials), [t.values for t in trials]
    recipe = trials[0].user_attrs["recipe"]
    assert recipe["lr_schedule"] == "linear" and recipe["eval_batch_size"] == 8 and recipe["grad_clip"] == 1.0
    assert recipe["optimizer"].startswith("adamw_torch") and recipe["weight_decay"] == 0.01
    assert "not_applied" not in trials[0].user_attrs


@pytest.mark.slow
def test_the_clm_port_plain_and_through_autotune_reach_the_same_loss(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import hf_clm as s, transformers\ntransformers.set_seed(42)\ns.trainer.args.seed = 42\n"
            "s.trainer.train()\nprint(s.trainer.state.log_history[-2]['eval_loss'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env={"PYTHONPATH": f"{ROOT}:{EXAMPLES}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    plain = float(done.stdout.strip().splitlines()[-1])
    (t,) = _study(tmp_path, monkeypatch, [{}], **{"space": {}, "study.trial_seed": 42})
    print(f"\nhf_clm: plain val_loss {plain:.5f}, through autotune {t.values[0]:.5f}")
    assert abs(plain - t.values[0]) <= 0.02
