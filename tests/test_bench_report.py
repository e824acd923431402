"""The replay's report command (bench/replay_report.py): cells cached on disk, a re-run skips the finished ones and
prints the same tables; the cache folder is named after the code every arm runs."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("onnxruntime")

from bench import replay_report as rr  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
ARGS = ["--report", "--only", "34539", "--seeds", "2", "--budgets", "0.5", "--workers", "1", "--jobs", "1",
        "--arms", "plain Optuna,random search,autotune"]


def test_the_report_caches_each_cell_and_a_rerun_skips_the_finished_ones(tmp_path, capsys) -> None:
    rr.main([*ARGS, "--cache", str(tmp_path)])
    first = capsys.readouterr().out
    cells = sorted(tmp_path.rglob("*.json"))
    assert {c.name for c in cells} == {f"34539_s{s}_{a}.json" for a in ("autotune", "plain-optuna", "random-search")
                                       for s in (1000, 1001)}
    assert "cells: 6, finished before 0, to run 6" in first
    assert "time to match (1 worker, budget 0.5)" in first and "| autotune | " in first
    assert "| 1 worker, budget 0.5 | time to match plain Optuna >= 2x |" in first
    assert "elapsed " in first and "epoch 1 (untrained) dropped for every arm" in first
    stamps = {c: c.stat().st_mtime_ns for c in cells}
    cells[0].unlink()  # one cell lost (an interrupted run): only it runs again
    rr.main([*ARGS, "--cache", str(tmp_path)])
    again = capsys.readouterr().out
    assert "cells: 6, finished before 5, to run 1" in again
    assert all(c.stat().st_mtime_ns == stamps[c] for c in cells[1:])
    # the same events, the same tables (the rerun cell is deterministic: same seed, simulated clock)
    table = [line for line in first.splitlines() if line.startswith("| random search |")]
    assert table and table == [line for line in again.splitlines() if line.startswith("| random search |")]


def test_the_cache_folder_changes_with_the_code(tmp_path, monkeypatch) -> None:
    root = rr.R.ROOT
    for rel in ("autotune/__init__.py", "bench/replay.py", "bench/yahpo_lcbench/lcbench.yaml",
                "bench/yahpo_lcbench/fronts.json", "bench/yahpo_lcbench/encoding.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, tmp_path / rel)
    monkeypatch.setattr(rr.R, "ROOT", tmp_path)
    before = rr.fingerprint()
    assert rr.fingerprint() == before
    with (tmp_path / "autotune" / "__init__.py").open("a") as f:
        f.write("\n# a change to autotune's code\n")
    assert rr.fingerprint() != before


def test_an_unknown_arm_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        rr.main(["--report", "--arms", "plain Optuna,nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("replay.py: --arms: unknown nope; known: plain Optuna, ")


def _blocks(argv: list[str]) -> list[tuple[int, float, int, int]]:
    a = rr.parse(argv)
    return [(b.workers, b.budget_trials, len(b.tasks), len(b.seeds))
            for b in rr.plan(a.full, a.seeds, a.seeds_small, a.tasks_small, a.tasks_budget, a.budgets, a.workers)]


def test_the_report_is_the_budget_20_blocks_and_budget_60_is_added_from_the_same_cache() -> None:
    """The report the 20 minutes were set for: 26 tasks x 3 seeds at 1 worker, 13 x 1 at 8; `--budgets 20 60` adds
    7 tasks x 1 seed at budget 60 (the budget-20 cells unchanged, so read from the cache); --full has both."""
    assert _blocks(["--report"]) == [(1, 20.0, 26, 3), (8, 20.0, 13, 1)]
    assert _blocks(["--report", "--budgets", "20", "60"]) == [(1, 20.0, 26, 3), (8, 20.0, 13, 1), (1, 60.0, 7, 1)]
    assert _blocks(["--report", "--full"]) == [(1, 20.0, 26, 50), (8, 20.0, 26, 50), (1, 60.0, 26, 50),
                                               (8, 60.0, 26, 50)]
