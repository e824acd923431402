"""Two versions of one arm, each run by `bench/replay.py --save` / `--save-each` from its own checkout, compared on
the seeds both ran (a change to autotune's code has no arm name of its own: the old code's "autotune" and the new
code's are both "autotune").

    python bench/replay_compare.py --old old/*.json --new new/*.json [--arm autotune] [--baseline "plain Optuna"]

Prints, per version and the baseline (taken from the --new files), the summary of `bench/replay.py`, then new vs
baseline, old vs baseline and new vs old: RMST speed-ups to 90 % / 95 % (linear time; median over tasks, its 95 %
interval, tasks whose paired interval is above / below 1), time to match and the anytime hypervolume
(bench/replay_match.py) and the mean paired differences in best accuracy and end
hypervolume (median over tasks, tasks whose interval is above / below 0). One worker count at a time (the first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import replay as R  # noqa: E402
from bench import replay_match as rm  # noqa: E402


def workload_of(files: list[Path]) -> str:
    """The one workload the saved runs replayed (lcbench, mnist1d, ...): comparing across workloads is an error."""
    names = {json.loads(f.read_text()).get("workload", "lcbench") for f in files}
    if len(names) != 1:
        raise SystemExit(f"replay_compare: the files replayed different workloads: {sorted(names)}")
    return names.pop()


def runs_of(files: list[Path], rename: dict[str, str]) -> dict[tuple[str, int, str], dict[int, Any]]:
    """(task, workers, arm) -> {seed: events}, the arms in `rename` only, under their new names."""
    out: dict[tuple[str, int, str], dict[int, Any]] = {}
    for f in files:
        saved = json.loads(f.read_text())
        for key, rs in saved["runs"].items():
            task, n, arm = key.split("|")
            if arm in rename:
                out.setdefault((task, int(n), rename[arm]), {}).update(
                    {s: [tuple(e) for e in ev] for s, ev in zip(saved["seeds"], rs)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, nargs="+", required=True)
    ap.add_argument("--new", type=Path, nargs="+", required=True)
    ap.add_argument("--arm", default="autotune")
    ap.add_argument("--baseline", default="plain Optuna")
    args = ap.parse_args()
    name = workload_of([*args.old, *args.new])
    by = {**runs_of(args.new, {args.arm: "new", args.baseline: args.baseline}),
          **runs_of(args.old, {args.arm: "old"})}
    n = min(k[1] for k in by)
    tasks = sorted({t for t, w, _ in by if w == n})
    arms = [args.baseline, "old", "new"]
    runs: R.Runs = {}
    for t in tasks:
        common = sorted(set.intersection(*(set(by.get((t, n, a), {})) for a in arms)))
        for a in arms:
            runs[(t, n, a)] = [by[(t, n, a)][s] for s in common]
        print(f"task {t}: seeds {common[0]}-{common[-1]} ({len(common)})" if common else f"task {t}: no common seed")
    budgets = {(t, n): R.budget_of(name, t or None, n) for t in tasks}
    ms = R.all_measures(name, runs, budgets)
    R.summary(n, list(tasks), arms, ms, budgets)
    for mine, base in (("new", args.baseline), ("old", args.baseline), ("new", "old")):
        print(f"\n{mine} vs {base}")
        for q in R.TARGETS:
            per = [([s.to[("lin", q)] for s in ms[(t, n, base)]], [s.to[("lin", q)] for s in ms[(t, n, mine)]],
                    budgets[(t, n)]) for t in tasks]
            each = [R.paired_ratio(*p) for p in per]
            print(f"  to {int(100 * q)} %: {R.fmt_x(R.median_ratio(per))}; per task "
                  + " ".join(f"{x[0]:.2f}" for x in each)
                  + f" (interval above 1: {sum(x[1] > 1 for x in each)}, below 1: {sum(x[2] < 1 for x in each)})")
        for what, get in rm.MEASURES.items():  # time to match, anytime hypervolume: tasks and seeds resampled
            per_t = rm.per_task(ms, tasks, n, mine, base, get, budgets)
            print(f"  {what}: {rm.fmt(rm.ratio_boot(per_t))} (geometric mean over tasks x seeds)")
        for what, get in (("best accuracy", lambda s: s.best_acc), ("HV end (lin)", lambda s: s.hv_end["lin"]),
                          ("HV end (log)", lambda s: s.hv_end["log"])):
            ds = [R.paired_diff([get(s) for s in ms[(t, n, base)]], [get(s) for s in ms[(t, n, mine)]])
                  for t in tasks]
            print(f"  {what}: {statistics.median(d[0] for d in ds):+.4f} median over tasks; per task "
                  + " ".join(f"{d[0]:+.4f}" for d in ds)
                  + f" (interval above 0: {sum(d[1] > 0 for d in ds)}, below 0: {sum(d[2] < 0 for d in ds)})")


if __name__ == "__main__":
    main()
