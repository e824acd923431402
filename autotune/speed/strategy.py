"""`study.strategy`: how the search uses what the speed probe knows.

- `joint`: one search over every setting at once; the probe stops trials that cannot run here or are
  projected too slow (probe.py), and nothing else changes.
- `probe_then_tune`: first, every combination of the acceleration settings the space searches is probed
  (sweep.py, a few timed steps each, stored in the study like any probe). A combination is dropped when
  it fails here, or when another one with the same batch size and model keys, numerics at least as exact
  (fp32 over bf16 and fp16; matmul_precision highest over high over medium) and the same or any neutral
  settings, is more than `TOLERANCE` faster: reduced precision exists to be faster, so a slower one only
  loses. Then the study searches the rest: the settings that do not change the numbers computed
  (`NEUTRAL`: channels_last, compile, data_on_device, the DataLoader's...) are no longer searched but set,
  for each kept numeric combination, to its fastest measured choice; the numeric ones (precision,
  matmul_precision, batch_size, model keys) keep the values some kept combination has. A trial that still
  draws a dropped numeric combination (kept values, dropped together) stops before it trains, `slow`.

That shortlist (the kept groups, the dropped combinations) is stored in the study (user attr `strategy_plan`, its
stored name) by the first process that needs it (processes on one host take turns through a lock file), so every
worker and a resumed run search the same space.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune.config import from_dict
from autotune.core import TrialStopped, locks
from autotune.fit import TrialPlan, trainer
from autotune.search import space
from autotune.spec import SETTINGS, STRATEGIES, RunConfig, StudyRecord, acting
from autotune.speed import probe
from autotune.speed import sweep as speed

# From the settings catalogue: what changes only the speed, and the ranks of the choices that trade exactness
NEUTRAL = acting("speed")
EXACTNESS: dict[str, dict[Any, int]] = {name: dict(s.exactness) for name, s in SETTINGS.items() if s.exactness}
TOLERANCE = 0.10  # faster by less than this is a tie: two probes of the same thing differ by about that much
SHORTLIST_ATTR = "strategy_plan"  # the shortlist's study user attr (StudyRecord.strategy_plan: its stored name)


def _numeric(combo: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in combo.items() if k not in NEUTRAL}


def _shape(combo: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What must match for one combination to stand in for another: numerics other than the precisions."""
    return tuple(sorted((k, repr(v)) for k, v in _numeric(combo).items() if k not in EXACTNESS))


def _at_least_as_exact(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(EXACTNESS[k].get(a.get(k), 0) >= EXACTNESS[k].get(b.get(k), 0) and
               (a.get(k) == b.get(k) or EXACTNESS[k].get(a.get(k), 0) > EXACTNESS[k].get(b.get(k), 0))
               for k in EXACTNESS if k in a or k in b)


def make_shortlist(cfg: RunConfig, rows: list[speed.Row]) -> dict[str, Any]:
    """From measured rows: the kept combinations, and for each kept numeric combination its neutral settings."""
    ok = [r for r in rows if r.measurement is not None and not r.contended]  # a contended reading decides nothing
    kept: list[speed.Row] = []
    dropped: list[dict[str, Any]] = []
    for r in rows:
        if r.measurement is None and r.error is not None and r.blame is None:
            kept.append(r)  # the user's code failed, not a setting: no verdict on the combination
            continue
        if r.measurement is None:  # a setting failed, or the combination cannot run: busy cores do not change that
            dropped.append({"combination": r.combination, "why": r.error or r.skipped or "not measured"})
            continue
        if r.contended:
            kept.append(r)  # others held the cores while it was timed: no verdict on its speed
            continue
        better = max((o for o in ok if o is not r and _shape(o.combination) == _shape(r.combination)
                      and _at_least_as_exact(o.combination, r.combination)
                      and o.samples_per_s > r.samples_per_s * (1 + TOLERANCE)),
                     key=lambda o: o.samples_per_s, default=None)
        if better is not None:
            dropped.append({"combination": r.combination, "why": f"{r.samples_per_s:,.0f} samples/s; "
                            f"{probe.describe(better.combination)} computes at least as exactly at "
                            f"{better.samples_per_s:,.0f}"})
        else:
            kept.append(r)
    groups: dict[str, dict[str, Any]] = {}
    # the fastest clean one sets the neutrals; a contended one before any that failed (a failed row has no speed)
    for r in sorted(kept, key=lambda r: (r.measurement is None, r.contended, -r.samples_per_s)):
        g = _numeric(r.combination)
        groups.setdefault(repr(sorted(g.items())), {"numeric": g, "neutral": {k: v for k, v in r.combination.items()
                                                                             if k in NEUTRAL},
                                                    "samples_per_s": r.samples_per_s})
    return {"groups": list(groups.values()), "dropped": dropped, "measured": len(ok), "combinations": len(rows)}


def narrowed(cfg: RunConfig, shortlist: Mapping[str, Any]) -> RunConfig:
    """The config the search samples from: neutral settings out of the space (set per group instead), numeric
    choices narrowed to the kept ones (a single one left becomes fixed)."""
    raw = cfg.to_dict()
    grid = speed.searched(cfg)
    kept_values: dict[str, list[Any]] = {k: [] for k in grid if k not in NEUTRAL}
    for g in shortlist["groups"]:
        for k, v in g["numeric"].items():
            if k in kept_values and v not in kept_values[k]:
                kept_values[k].append(v)
    new_space = {}
    train = dict(raw.get("train") or {})
    for name, spec in raw["space"].items():
        if name in NEUTRAL and name in grid:
            continue  # set per numeric group (pins)
        if name in kept_values:  # (an integer range becomes its probed values)
            values = [v for v in grid[name] if v in kept_values[name]]  # the file's order
            if len(values) == 1 and not name.startswith("model."):
                train[name] = values[0]
                continue
            spec = {**spec, "type": "categorical", "choices": values or grid[name], "low": None, "high": None,
                    "log": False, "step": None}
        new_space[name] = spec
    # model.KEY narrowed to one value stays searched (a single choice): the model section's key must stay unset
    return from_dict({**raw, "space": new_space, "train": train}, source=cfg.source)


def pins(shortlist: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The neutral settings for these values' numeric combination (None: that combination was dropped)."""
    for g in shortlist["groups"]:
        if all(values.get(k) == v for k, v in g["numeric"].items()):
            return dict(g["neutral"])
    return None


class StrategyPoints:
    """Each trial's point as the study's strategy gives it: sampled (probe_then_tune: in the space its shortlist
    narrowed, with the shortlist's pins) and checked against the shortlist (the objective's one use of the
    strategy)."""

    def __init__(self, cfg: RunConfig, fit: trainer.Fit | None, *, write: probe.WriteStudy) -> None:
        self.cfg = cfg
        self.fit = fit
        self.write = write  # how the shortlist and the probes' records are stored in the study
        self.active = cfg.study.strategy == "probe_then_tune" and bool(speed.searched(cfg))
        self.shortlist: dict[str, Any] | None = None
        self.cfg_narrowed: RunConfig | None = None

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        if not self.active:
            return space.sample(trial, self.cfg)
        if self.shortlist is None:
            self.shortlist = shortlist_for(trial.study, self.cfg, self.fit, self.write)
            self.cfg_narrowed = narrowed(self.cfg, self.shortlist)
        assert self.cfg_narrowed is not None
        values = space.sample(trial, self.cfg_narrowed)
        found = pins(self.shortlist, values)
        if found is not None:
            values.update(found)
        return values

    def check(self, trial_plan: TrialPlan) -> None:
        """Stop a trial whose numeric combination the shortlist dropped (its values were each kept, not together)."""
        if not (self.active and self.shortlist is not None and self.shortlist["groups"]):
            return
        keys = {k for g in self.shortlist["groups"] for k in g["numeric"]}
        values = {k: trial_plan.value(k) for k in keys}
        if pins(self.shortlist, values) is None:
            combo = {k: values[k] for k in self.shortlist["groups"][0]["numeric"]}
            why = next((d["why"] for d in self.shortlist["dropped"] if _numeric(d["combination"]) == combo),
                       "dropped")
            raise TrialStopped("slow", 0, f"probe_then_tune dropped {probe.describe(combo)}: {why}")


def shortlist_for(study: optuna.Study, cfg: RunConfig, fit: trainer.Fit | None,
                  write: probe.WriteStudy) -> dict[str, Any]:
    """The study's stored shortlist; the first process (of this host) to need it probes and stores it (by `write`)."""
    stored = StudyRecord.of(study).strategy_plan
    if stored is not None:
        return stored
    # one host shortlists a study once: the first probes and stores, the others read
    with locks.host_lock(study, "shortlist"):
        stored = StudyRecord.of(study).strategy_plan  # (read from the storage again: another process may have one)
        if stored is not None:
            return stored
        shortlist = make_shortlist(cfg, probe_all(study, cfg, fit, write))
        write(study, StudyRecord(strategy_plan=shortlist))
        return shortlist


def probe_all(study: optuna.Study | None, cfg: RunConfig, fit: trainer.Fit | None,
              write: probe.WriteStudy) -> list[speed.Row]:
    """A speed row for every combination: from the study's probe records where it has them, else probed now
    (and recorded there, by `write`)."""
    from autotune.training import Measurement

    cache = probe.Cache(study, write)
    code = probe.code_fingerprint(fit)
    rows = []
    for combo in speed.combinations(cfg):
        at = TrialPlan.of(cfg, {**space.fixed_point(cfg, combo), **speed.PROBE_FIXED}, 0, study_rules=False)
        k = probe.key(probe.combination(at), probe.device_name(at))
        rec = probe.trusted(cache.get(k), code)  # an error of the user's code (or of older code) is measured again
        if probe.usable(rec):  # (a contended reading is measured again)
            rows.append(speed.Row(combo, Measurement.from_dict(rec)))  # type: ignore[arg-type]
            continue
        if rec is not None and rec.get("error"):
            rows.append(speed.Row(combo, error=rec["error"], blame=rec.get("blame")))
            continue
        row = speed.measure_clean(cfg, combo, fit)  # (an error not blamed on a setting is recorded, not trusted)
        cache.put(k, probe.record(probe.combination(at), probe.device_name(at), row.measurement, row.error,
                                  source="probe_then_tune", blame=row.blame, code=probe.code_fingerprint(fit),
                                  contended=row.contended))
        rows.append(row)
    return rows




__all__ = ["NEUTRAL", "SHORTLIST_ATTR", "STRATEGIES", "StrategyPoints", "make_shortlist", "narrowed", "pins",
           "probe_all", "shortlist_for"]
