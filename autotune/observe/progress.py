"""What `autotune run` shows: a live progress bar and one row per trial, then the Pareto table.

On a terminal this uses rich; when stdout is not a terminal (CI logs, pipes) it prints plain lines.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.core import redact, shorten
from autotune.search import feasible
from autotune.spec import RunConfig, StudyRecord, TrialRecord, short, shown_with
from autotune.spec import fmt as fmt_metric
from autotune.study import is_surplus


def fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def fmt_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt_value(v)}" for k, v in params.items())


ERROR_WIDTH = 120  # characters of a failed trial's error on its line (the whole text is in its `error` attr)
_PLACE = re.compile(r" \(at [^()]*\)$")  # describe_exception's "(at file.py:12 in fit)"


def _or(value: Any, default: Any) -> Any:
    """A record's field, or `default` where the trial did not store it."""
    return default if value is None else value


def clip(text: str, width: int = ERROR_WIDTH) -> str:
    """`text` in at most `width` characters: cut at a word boundary with an ellipsis (...), the error's place in
    the user's code ("(at file:line in fn)") kept whole."""
    if len(text) <= width:
        return text
    m = _PLACE.search(text)
    place = m.group(0) if m is not None and len(m.group(0)) < width // 2 else ""
    return shorten(text[: len(text) - len(place)], width - len(place)) + place


class RunView:
    def __init__(self, cfg: RunConfig, plain: bool) -> None:
        self.cfg = cfg
        self.plain = plain
        self.console = Console(highlight=False, soft_wrap=True)
        self.progress: Progress | None = None
        self.task: Any = None
        self.metrics = [o.metric for o in cfg.objectives]
        self.ended: list[FrozenTrial] = []  # this run's trials, as they ended (a surplus one never ran: not kept)

    def on_start(self, study: optuna.Study, todo: int) -> None:
        done = sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
                   if not is_surplus(t))  # (a lost race never ran)
        device = _or(StudyRecord.of(study).device, "?")
        goal = "until the timeout" if todo < 0 else f"{todo} more"
        self._print(f"study {self.cfg.study.name} ({redact(self.cfg.study.storage)}): {done} finished, running {goal}; "
                    f"sampler {self.cfg.study.sampler}, objectives "
                    f"{', '.join(f'{o.metric} ({o.direction})' for o in self.cfg.objectives)}, device {device}")
        if todo == 0:
            self._print("the study already holds its n_trials finished trials: raise --n-trials or use --fresh "
                        "to run more")
            return
        if not self.plain:
            self.progress = Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("{task.description}"), console=self.console,
                                     transient=True)
            self.progress.start()
            self.task = self.progress.add_task("", total=todo if todo > 0 else None)

    def on_trial(self, study: optuna.Study, t: FrozenTrial) -> None:
        if not is_surplus(t):
            self.ended.append(t)
        r = TrialRecord.of(t)
        state = t.state.name
        if state == "PRUNED" or r.stop_reason == "early_stopped":
            state = f"{state} ({_or(r.stop_reason, 'pruned')} @ epoch {_or(r.stop_epoch, '?')})"
        elif state == "FAIL":
            state = f"FAIL ({_or(r.stop_reason, 'error')}: {clip(str(_or(r.error, '')))})"
        elif state == "COMPLETE" and not feasible(t):
            state = "COMPLETE (infeasible)"  # violates a constraint: kept, never recommended
        measured = "  ".join(f"{short(m)} {fmt_metric(m, r.metrics.get(m))}" for m in shown_with(self.metrics)
                             if m in self.metrics or m in r.metrics)
        line = f"trial {t.number:>3}  {state:<34} {measured}  | {fmt_params(t.params)}"
        if self.progress is not None:
            style = {"COMPLETE": "green", "PRUNED": "yellow", "FAIL": "red"}.get(t.state.name, "")
            self.progress.console.print(f"[{style}]{line}[/]" if style else line, markup=True, highlight=False)
            best = r.metrics.get("val_accuracy")
            self.progress.update(self.task, advance=1 if t.state.name in ("COMPLETE", "PRUNED") else 0,
                                 description=f"last acc {fmt_metric('val_accuracy', best)}")
        else:
            self._print(line)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, result: Any, wall_s: float) -> None:
        # (a surplus trial lost the race for the last slot and never ran: not the study's, said by the run apart)
        trials = [t for t in result.study.get_trials(deepcopy=False) if not is_surplus(t)]
        counts = {s: sum(1 for t in trials if t.state.name == s) for s in ("COMPLETE", "PRUNED", "FAIL")}
        self._print(f"\n{len(trials)} trials in the study ({counts['COMPLETE']} complete, {counts['PRUNED']} pruned, "
                    f"{counts['FAIL']} failed); this run took {wall_s:.1f}s")
        print_pareto(result, self.console, self.plain)
        print_best(result, self.console)

    def all_failed(self) -> str | None:
        """One line when every trial this run ran failed (none completed or was pruned), else None: the command
        then exits non-zero, even when fewer than `max_repeated_errors` ran (that rule stops the run on its own)."""
        if not self.ended or any(t.state.name != "FAIL" for t in self.ended):
            return None
        last = clip(str(_or(TrialRecord.of(self.ended[-1]).error, "no error stored")))
        return f"every trial this run ran failed ({len(self.ended)} of {len(self.ended)}); the last: {last}"

    def _print(self, text: str) -> None:
        if self.plain:
            print(text, flush=True)
        else:
            self.console.print(text, markup=False)


def print_pareto(result: Any, console: Console | None = None, plain: bool = True) -> None:
    console = console or Console(highlight=False)
    front = result.pareto
    best = result.best
    title = "Pareto front" if result.config.multi_objective else "Best trial"
    # no empty column (a user's metrics)
    cols = [c for c in shown_with(result.metrics) if c in result.metrics or any(c in s.metrics for s in front)]
    front = sorted(front, key=lambda s: s.metrics.get("train_time_s", 0.0))
    if plain or not sys.stdout.isatty():
        print(f"\n{title} ({len(front)} trial(s); * = recommended):")
        header = ["trial", *[short(c) for c in cols], "settings"]
        print("  ".join(f"{h:>10}" if i < len(header) - 1 else h for i, h in enumerate(header)))
        for s in front:
            mark = "*" if best is not None and s.number == best.number else " "
            vals = [fmt_metric(c, s.metrics.get(c)) for c in cols]
            print("  ".join([f"{mark}{s.number:>9}", *[f"{v:>10}" for v in vals], fmt_params(s.params)]))
        return
    table = Table(title=f"{title} (* = recommended)")
    table.add_column("trial", justify="right")
    for c in cols:
        table.add_column(short(c), justify="right")
    table.add_column("settings")
    for s in front:
        mark = "*" if best is not None and s.number == best.number else ""
        table.add_row(f"{mark}{s.number}", *[fmt_metric(c, s.metrics.get(c)) for c in cols], fmt_params(s.params))
    console.print(table)


def print_best(result: Any, console: Console | None = None) -> None:
    best = result.best
    if best is None:
        print("no completed trial yet")
        return
    rule = result.config.select
    rule_s = rule if isinstance(rule, str) else ", ".join(f"{k}={v}" for k, v in rule.model_dump().items())
    measured = ", ".join(f"{m} {fmt_metric(m, best.metrics.get(m))}" for m in shown_with(result.metrics)
                         if m in result.metrics or m in best.metrics)
    print(f"\nRecommended configuration (trial {best.number}, select: {rule_s}): {measured}")
    for k, v in best.params.items():
        print(f"  {k}: {fmt_value(v) if not isinstance(v, float) else repr(v)}")
    if best.cpu_threads_used is not None:  # autotune chose its threads: said, and exported
        why = "capped: the cores were busy" if best.cpu_threads_capped else "one less per DataLoader worker"
        print(f"  cpu_threads: {best.cpu_threads_used} (trained on {best.cpu_threads_used} torch thread(s): {why})")
    note = best.lr_note()
    if note is not None:  # a searched lr on the fit's own optimizer: the rates it trained at
        print(f"  ({note})")
    for k, why in best.not_applied.items():  # searched, but nothing in the trial used it
        print(f"  ({k}: not applied, left out: {why})")
    for k, why in best.fixed_not_applied.items():  # fixed in train:, but the trial could not apply it
        print(f"  ({k}: fixed in train:, not applied: {why})")
    if best.recipe:  # not chosen: the user's code or the framework's defaults decided them
        print(f"  (yours, not set by the study: {best.recipe_text()})")
    print(f"  (export every setting with: autotune best {result.config.source} --export best.yaml)")
