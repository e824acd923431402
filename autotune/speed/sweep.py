"""`autotune speed FILE`: the acceleration half of the search on its own, in seconds, without a study.

For the model and data in FILE, every combination of the acceleration settings its space searches
(precision x channels_last x compile x batch_size x data_on_device..., and `model.*` keys) is probed:
the same training function a trial runs (built-in or the user's), ended after its warm-up and a few
timed steps. One window of a few steps is one reading of a noisy clock (on a busy machine neighbouring rows
differed 19x), so each row times windows back to back on its one run (throughput.RepeatedWindow) until the
last 3 agree within 10% or 5 are timed, and reports their median with its spread (`±%`: half their range
over the median).

A row is only as good as the machine was quiet: a row whose windows waited for cores (`contention`: other busy
processes held them; on a shared machine at 2 threads rows read ±80-160 % where 1 thread read 1-20 %) or whose
windows never agreed is taken again, up to `RETAKES` more times while the budget lasts, and the cleanest take is
kept. A row still contended or noisy after that is marked (`±163% contended`, `±40% noisy`) and listed after the
clean rows, not ranked among them ("vs best" compares clean rows only), and `busy_note` says in one line what to
do (fewer threads, a quiet machine). The table lists clean samples/s fastest first, with compile time and peak
memory (where the device reports it), and marks what fails here. Everything else (learning rate, optimizer,
schedule, `user.*` parameters, unsearched `model.*` keys) is held at a middle value, named in the header: only
the searched acceleration settings and `model.*` keys change from row to row.

Compiling costs 15-60 s per combination on a CPU: combinations with `compile: true` are probed last, and
only while the time budget (`budget_s`) lasts; `include_compile=False` leaves them out.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotune.core import AutotuneError, TrialStopped, describe_exception
from autotune.fit import TrialPlan, trainer
from autotune.search import space
from autotune.spec import MODEL_PREFIX, USER_PREFIX, RunConfig
from autotune.speed import probe
from autotune.training import Limits, Measurement, ProbeDone, RepeatedWindow, accel

# The searched settings a speed table spans: the throughput settings but the device (one per study).
ACCELERATION = tuple(k for k in probe.THROUGHPUT if k != "device")
PROBE_WARMUP, PROBE_STEPS = 2, 2  # a probe of its own: shorter than a trial's window (each one costs its steps)
PROBE_WINDOW_S = 0.02  # each window at least this long (a trial's one window: 0.05 s; here the median of several)
# windows per row: until the last PROBE_AGREE agree within PROBE_TOLERANCE of their median, at most PROBE_WINDOWS
PROBE_AGREE, PROBE_TOLERANCE, PROBE_WINDOWS = 3, 0.1, 5
RETAKES = 2  # a contended or noisy row is taken again at most this many times (within the budget)
PROBE_SECONDS = 120.0  # one probe running longer than this (hung, or far too slow) is reported, not waited for
# what a probe holds fixed whatever the study says: all the data (more steps per epoch), no early stop, no compression
PROBE_FIXED = {"data_fraction": 1.0, "epochs": 1_000_000, "early_stopping_patience": 0, "prune_method": "none",
               "prune_amount": 0.0, "finetune_epochs": 0, "quantize": "none", "qat": False}


@dataclass
class Row:
    combination: dict[str, Any]  # the searched acceleration settings (and model keys) of this row
    measurement: Measurement | None = None
    error: str | None = None
    skipped: str | None = None  # why it was not measured (the time budget, compile left out)
    seconds: float = 0.0  # the probe's own wall time
    spread: float = math.nan  # (max - min) / median of the windows the measurement is the median of
    windows: int = 0  # windows timed
    blame: str | None = None  # the setting a failure is attributable to (probe.blame); None: the code's own
    contended: bool = False  # the kept windows waited for cores (others held them): the machine's speed
    takes: int = 1  # times the row was measured (a contended or noisy one is taken again)

    @property
    def samples_per_s(self) -> float:
        return self.measurement.samples_per_s if self.measurement is not None else 0.0

    @property
    def noisy(self) -> bool:
        """Its windows never agreed within the tolerance."""
        return self.measurement is not None and math.isfinite(self.spread) and self.spread > PROBE_TOLERANCE

    @property
    def flagged(self) -> str | None:
        """Why this row's figure is not to be ranked ('contended', 'noisy'), or None: a clean reading."""
        if self.measurement is None:
            return None
        return "contended" if self.contended else "noisy" if self.noisy else None


def searched(cfg: RunConfig) -> dict[str, list[Any]]:
    """The acceleration settings (and model keys) the space searches, each with the values to probe."""
    out: dict[str, list[Any]] = {}
    for name in space.order(cfg.space):
        if name in ACCELERATION or name.startswith(MODEL_PREFIX):
            out[name] = _values(cfg.space[name])
    return out


def _values(spec: Any) -> list[Any]:
    """A categorical's choices; an integer range's values (a log-spaced handful of a long one)."""
    if spec.choices is not None:
        return [space.decode(spec, c) for c in space.choices(spec)]
    lo, hi, step = int(spec.low), int(spec.high), int(spec.step or 1)
    if (hi - lo) // step < 8:
        return list(range(lo, hi + 1, step))
    if lo <= 0:
        return sorted({lo, (lo + hi) // 2, hi})
    return sorted({lo, hi, *(int(round(lo * (hi / lo) ** (i / 4))) for i in range(1, 4))})


def combinations(cfg: RunConfig) -> list[dict[str, Any]]:
    """Every combination of the searched acceleration values, as a trial would take it: a setting whose `when`
    does not hold keeps its fixed value (so duplicates are dropped)."""
    grid = searched(cfg)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for combo in itertools.product(*grid.values()):
        values = space.fixed_point(cfg, dict(zip(grid, combo)))
        kept = {k: values[k] for k in grid if k not in cfg.space or space.active(cfg.space[k], values)}
        sig = repr(sorted(kept.items()))
        if sig not in seen:
            seen.add(sig)
            out.append(kept)
    return out


def measure(cfg: RunConfig, combo: dict[str, Any], fit: trainer.Fit | None = None,
            seconds: float = PROBE_SECONDS) -> Row:
    """Probe one combination: the study's training function, ended after warm-up and the timed steps."""
    values = {**space.fixed_point(cfg, combo), **PROBE_FIXED}
    window = RepeatedWindow(end_run=True, warmup=PROBE_WARMUP, steps=PROBE_STEPS, min_seconds=PROBE_WINDOW_S,
                            compiled=bool(values["compile"]), agree=PROBE_AGREE, tolerance=PROBE_TOLERANCE,
                            max_windows=PROBE_WINDOWS)
    plan = TrialPlan.of(cfg, values, cfg.study.seed or 0, measure_inference=False, study_rules=False)
    training = dataclasses.replace(plan.training, limits=Limits(hang_seconds=seconds))
    row = Row(dict(combo))
    t0 = time.perf_counter()
    try:
        trainer.train(training, fit, probe=window)
        row.error = "the run ended before its steps were timed (too little data for the warm-up and timed steps)"
    except ProbeDone as done:
        row.measurement, row.spread, row.contended = done.measurement, window.spread, window.contended
    except TrialStopped as e:  # unsupported here, or over its time
        if e.reason in ("slow", "hang"):
            row.skipped = f"not measured: still running after {seconds:.3g} s (the time budget)"
        else:
            row.error = e.detail or str(e)
    except AutotuneError:
        raise  # the configuration itself is wrong (a ConfigError): no row can run
    except Exception as e:  # what the combination raises here: the row says it
        row.error = ("out of memory: " if accel.is_oom(e) else "") + describe_exception(e, limit=200)
        row.blame = probe.blame(e, plan)
    finally:
        row.seconds = time.perf_counter() - t0
        row.windows = len(window.windows)
        accel.release_memory()
    return row


def run(cfg: RunConfig, fit: trainer.Fit | None = None, include_compile: bool = True, budget_s: float = math.inf,
        on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Probe every combination (compiled ones last, while the budget lasts); rows fastest first, failures last."""
    combos = combinations(cfg)
    combos.sort(key=lambda c: bool(c.get("compile")))  # stable: the file's order otherwise
    rows: list[Row] = []
    t0 = time.perf_counter()
    for combo in combos:
        left = budget_s - (time.perf_counter() - t0)
        if combo.get("compile") and not include_compile:
            row = Row(combo, skipped="compile left out (--no-compile)")
        elif left <= 0:
            row = Row(combo, skipped="not measured: over the time budget (--budget)")
        else:
            row = measure_clean(cfg, combo, fit, left)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return sort(rows)


def measure_clean(cfg: RunConfig, combo: dict[str, Any], fit: trainer.Fit | None = None,
                  left_s: float = math.inf, retakes: int = RETAKES) -> Row:
    """`measure`, taken again (at most `retakes` more times, while `left_s` lasts) while its reading is contended
    or noisy; the cleanest take is kept (uncontended first, then the smallest spread)."""
    t0 = time.perf_counter()
    best = measure(cfg, combo, fit, seconds=min(PROBE_SECONDS, left_s))
    takes = 1
    while best.flagged and takes <= retakes and (left := left_s - (time.perf_counter() - t0)) > 0:
        again = measure(cfg, combo, fit, seconds=min(PROBE_SECONDS, left))
        takes += 1
        if again.measurement is not None and (again.contended, again.spread) < (best.contended, best.spread):
            again.seconds += best.seconds
            best = again
        else:
            best.seconds += again.seconds
    best.takes = takes
    return best


def sort(rows: list[Row]) -> list[Row]:
    """Clean readings fastest first, then contended or noisy ones (apart: their order is the machine's), then
    failures and skipped rows."""
    return sorted(rows, key=lambda r: (r.measurement is None, r.skipped is not None, r.flagged is not None,
                                       -r.samples_per_s))


def busy_note(rows: list[Row], threads: int) -> str | None:
    """One line when some rows stayed contended or noisy after their retakes (None: every reading is clean)."""
    flagged = [r for r in rows if r.flagged]
    if not flagged:
        return None
    measured = sum(1 for r in rows if r.measurement is not None)
    contended = sum(1 for r in flagged if r.contended)
    fix = "run it with fewer threads (--threads 1) or on a quiet machine" if threads > 1 else \
        "run it on a quiet machine (stop other busy processes)"
    what = "noisy" if not contended else "contended" if contended == len(flagged) else "contended or noisy"
    return (f"{len(flagged)} of {measured} measured row(s) stayed {what} after "
            f"{RETAKES} retake(s) ({contended} waited for cores held by other processes, {len(flagged) - contended} "
            f"spread over {PROBE_TOLERANCE:.0%}) and are listed apart, unranked: the machine was busy at {threads} "
            f"thread(s); {fix}")


def _cell(v: Any) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def table(rows: list[Row], columns: list[str] | None = None) -> str:
    """The rows as a text table: samples/s and the ratio to the fastest, compile s, peak memory, the settings."""
    cols = columns or list(dict.fromkeys(k for r in rows for k in r.combination))
    best = max((r.samples_per_s for r in rows if not r.flagged), default=0.0)  # clean readings only
    head = ["#", "samples/s", "±%", "vs best", "compile s", "peak MiB", *cols]
    body: list[list[str]] = []
    notes: list[str] = []
    for i, r in enumerate(rows, 1):
        m = r.measurement
        if m is not None:
            spread = f"{50 * r.spread:.0f}" if math.isfinite(r.spread) else "-"
            cells = [f"{m.samples_per_s:,.0f}", f"{spread} {r.flagged}" if r.flagged else spread,
                     f"{m.samples_per_s / best:.2f}x" if best and not r.flagged else "-",
                     f"{m.compile_time_s:.1f}" if r.combination.get("compile") else "-",
                     f"{m.peak_memory_bytes / 2**20:,.0f}" if m.peak_memory_bytes else "-"]
        else:
            mark = "fails" if r.error else "skipped"
            cells = [mark, "-", "-", "-", "-"]
            notes.append(f"  {i}: {r.error or r.skipped}")
        body.append([str(i), *cells, *(_cell(r.combination.get(c, "")) for c in cols)])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [head, *body]]
    if notes:
        lines += ["", "not measured here:", *notes]
    return "\n".join(lines)


def held_fixed(cfg: RunConfig) -> dict[str, Any]:
    """The `user.*` and `model.*` values every row runs with (searched ones at their middle value): a user's
    function may build its model from them, so the table is for these values only."""
    grid = searched(cfg)
    values = space.fixed_point(cfg, {})
    return {k: v for k, v in values.items() if k.startswith((USER_PREFIX, MODEL_PREFIX)) and k not in grid}


def header(cfg: RunConfig, n: int) -> str:
    dev = accel.resolve_device(str(cfg.fixed()["device"]))
    what = cfg.trainer or f"model {cfg.model.name or cfg.model.factory}, data {cfg.data.name or cfg.data.factory}"
    fixed = held_fixed(cfg)
    held = "; held fixed: " + ", ".join(f"{k} {_fmt(v)}" for k, v in fixed.items()) if fixed else ""
    return (f"{cfg.file}: {what}; {n} combination(s) of "
            f"{', '.join(searched(cfg)) or 'no searched acceleration setting'}; on {accel.device_name(dev)}, "
            f"torch {torch.__version__}{held}")


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else _cell(v)


def compile_note(combos: list[dict[str, Any]], include_compile: bool, budget_s: float) -> str | None:
    """What happens to the combinations with compile: true (None when there are none)."""
    compiled = sum(1 for c in combos if c.get("compile"))
    if not compiled:
        return None
    how = "left out (--no-compile)" if not include_compile else \
        f"probed last, while the --budget of {budget_s:g} s lasts (compiling takes 15-60 s each on a CPU)"
    return f"{compiled} combination(s) with compile: true are {how}"


def row_line(row: Row, done: int, total: int) -> str:
    """One probe's progress line: its combination and samples/s, or why it was not measured."""
    mark = f" {row.flagged} after {row.takes} take(s)" if row.flagged else \
        f", take {row.takes}" if row.takes > 1 else ""
    what = f"{row.samples_per_s:,.0f} samples/s ±{50 * row.spread:.0f}%{mark} ({row.windows} windows)" \
        if row.measurement else (row.error or row.skipped or "")
    return (f"  [{done}/{total}] {', '.join(f'{k} {v}' for k, v in row.combination.items())}: "
            f"{what[:120]} ({row.seconds:.1f}s)")


__all__ = ["ACCELERATION", "RETAKES", "Row", "busy_note", "combinations", "compile_note", "header", "held_fixed",
           "measure", "measure_clean", "row_line", "run", "searched", "sort", "table"]
