"""Does a script tuned through autotune train as it does on its own, with the same settings? (issue 41)

Four ports of public examples, each a plain script plus the lines marked `# autotune`:
- examples/hf_seqcls.py: the Transformers guide's text classification (a 2-layer BERT from a config, the guide's
  TrainingArguments: AdamW 3e-3, linear schedule with warmup, 3 epochs, eval batch 16);
- examples/hf_clm.py: the Transformers guide's causal language modeling (a 2-layer GPT-2 from a config, the guide's
  group_texts blocks and collator; AdamW 2e-3, linear schedule, 3 epochs): its figure is the final val_loss (the
  guide's perplexity is exp of it), not an accuracy;
- examples/lightning_backbone.py: Lightning's backbone image classifier on digits (Adam 1e-4, 20 epochs);
- examples/lightning_litmnist.py: the LitMNIST module of Lightning's hello-world tutorial on digits (its own data
  hooks, no DataModule; Adam 2e-4, 3 epochs), its plain arm the script's own main() (CSVLogger, checkpoints).

For each seed, arm (a) runs the script as it is (`trainer.train()` / `Trainer.fit`, seeded as the script seeds),
arm (b) runs it through autotune: `autotune run` of a study that searches nothing (every setting the script's
own), one trial with `study.trial_seed` that seed. Each run is its own process (nothing carried between them).
Printed per seed: the final validation accuracy of each arm and (b) - (a); then the mean difference with a paired
t interval (95%), and the lines each port adds or changes (its `# autotune` marks).

    python bench/recipe_parity.py [--seeds 3] [--only hf|clm|lightning|litmnist]

Accuracy is not a timing: other processes on the cores slow the runs but do not move the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLES)]), "OMP_NUM_THREADS": "1"}

PLAIN = {
    "hf": ("import hf_seqcls as s, transformers; transformers.logging.set_verbosity_error(); "
           "transformers.set_seed({seed}); s.trainer.args.seed = {seed}; s.trainer.train(); "
           "print(s.trainer.state.log_history[-2]['eval_accuracy'])"),
    "clm": ("import hf_clm as s, transformers; transformers.logging.set_verbosity_error(); "
            "transformers.set_seed({seed}); s.trainer.args.seed = {seed}; s.trainer.train(); "
            "print(s.trainer.state.log_history[-2]['eval_loss'])"),
    "lightning": ("import lightning as L, lightning_backbone as s, logging; "
                  "logging.getLogger('lightning.pytorch').setLevel(logging.WARNING); L.seed_everything({seed}); "
                  "t = L.Trainer(max_epochs=s.MAX_EPOCHS, logger=False, enable_progress_bar=False, "
                  "enable_checkpointing=False, enable_model_summary=False); "
                  "t.fit(s.LitClassifier(s.Backbone()), datamodule=s.MyDataModule()); "
                  "print(float(t.callback_metrics['valid_acc']))"),
    "litmnist": ("import lightning as L, lightning_litmnist as s, logging; "
                 "logging.getLogger('lightning.pytorch').setLevel(logging.WARNING); L.seed_everything({seed}); "
                 "t = s.main(); print(float(t.callback_metrics['val_acc']))"),
}
STUDY = {  # the trainer, the figure compared, its direction
    "hf": ("hf_seqcls:fit", "val_accuracy", "maximize"),
    "clm": ("hf_clm:fit", "val_loss", "minimize"),
    "lightning": ("lightning_backbone:fit", "valid_acc", "maximize"),
    "litmnist": ("lightning_litmnist:fit", "val_acc", "maximize"),
}


def plain(name: str, seed: int, cwd: str) -> float:
    out = subprocess.run([sys.executable, "-c", PLAIN[name].format(seed=seed)], capture_output=True, text=True,
                         cwd=cwd, env=ENV, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def tuned(name: str, seed: int, cwd: str) -> float:
    fit, metric, direction = STUDY[name]
    db = Path(cwd) / f"{name}-{seed}.db"
    yaml_text = (f"study: {{name: parity, storage: 'sqlite:///{db}', n_trials: 1, trial_seed: {seed}}}\n"
                 f"trainer: {fit}\nobjectives: [{{metric: {metric}, direction: {direction}}}, train_time_s]\n"
                 "train: {device: cpu}\n")
    path = Path(cwd) / f"{name}-{seed}.yaml"
    path.write_text(yaml_text)
    out = subprocess.run([sys.executable, "-m", "autotune", "run", str(path), "--plain"], capture_output=True,
                         text=True, cwd=cwd, env=ENV, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    import optuna

    (trial,) = optuna.load_study(study_name="parity", storage=f"sqlite:///{db}").trials
    return float(trial.values[0])


def marked(example: str) -> int:
    text = (EXAMPLES / f"{example}.py").read_text()
    return sum(1 for line in text.splitlines() if re.search(r"(?<!`)# autotune\b", line))


def interval(diffs: list[float]) -> str:
    """The mean of paired differences with a 95% t interval (n-1 degrees of freedom)."""
    t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return f"{mean:+.4f}"
    half = t95.get(len(diffs) - 1, 2.0) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return f"{mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", choices=sorted(PLAIN))  # hf | clm | lightning
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows = {}
    for name in [args.only] if args.only else sorted(PLAIN):
        diffs = []
        with tempfile.TemporaryDirectory() as cwd:
            for seed in range(42, 42 + args.seeds):
                a, b = plain(name, seed, cwd), tuned(name, seed, cwd)
                diffs.append(b - a)
                print(f"{name:9s} seed {seed}: plain {a:.5f}  through autotune {b:.5f}  (b)-(a) {b - a:+.5f}",
                      flush=True)
        rows[name] = interval(diffs)
    example = {"hf": "hf_seqcls", "clm": "hf_clm", "lightning": "lightning_backbone",
               "litmnist": "lightning_litmnist"}
    for name, text in rows.items():
        print(f"{name:9s} mean (b)-(a) {text}; lines the port adds or changes: {marked(example[name])}")
    print(json.dumps({"load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
