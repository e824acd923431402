"""bench/vs_optuna.py's measures on hand-made runs whose hypervolumes, times to target and speed-ups are known."""

from __future__ import annotations

import importlib
import math

import pytest

vs = importlib.import_module("bench.vs_optuna")

# (wall seconds, accuracy, training time, state) per finished trial; one seed per arm
PLAIN = [(3.0, 0.9, 1.0, "COMPLETE"), (6.0, 0.8, 0.5, "COMPLETE")]
AUTOTUNE = [(1.0, 0.9, 1.0, "COMPLETE"), (2.0, 0.95, 2.0, "COMPLETE")]
RANDOM = [(0.5, None, None, "PRUNED"), (4.0, 0.8, 0.5, "COMPLETE")]
RUNS = {"plain Optuna": [PLAIN], "autotune": [AUTOTUNE], "random search": [RANDOM]}


def test_reference_is_the_union_front_with_its_time_reference() -> None:
    # union front (time, accuracy): (0.5, 0.8), (1, 0.9), (2, 0.95); t_ref 1.1 x 2
    ref, t_ref = vs.reference(RUNS)
    assert t_ref == pytest.approx(2.2)
    assert ref == pytest.approx(0.8 * 0.5 + 0.9 * 1.0 + 0.95 * 0.2)
    assert vs.reference({"a": [[(1.0, None, None, "PRUNED")]]}) == (0.0, pytest.approx(math.nan, nan_ok=True))


def test_speedup_is_budget_over_the_time_to_the_baselines_final_hypervolume() -> None:
    c = [(1.0, 0.5), (2.0, 1.0)]
    assert vs.speedup(c, 0.8, 10.0) == pytest.approx(5.0)
    assert vs.speedup(c, 0.5, 10.0) == pytest.approx(10.0)
    assert vs.speedup(c, 1.5, 10.0) == 0.0  # never got there
    assert math.isnan(vs.speedup(c, 0.0, 10.0))  # the baseline found nothing


def test_summarize_times_to_target_final_share_and_speedups() -> None:
    s = vs.summarize(RUNS, budget=10.0)
    ref = s["reference_hv"]
    rows = s["rows"]
    # plain: hypervolume 1.08 at 3 s, then 0.4 + 1.08 = 1.48 at 6 s (99.3%): reaches 90% and 95% at 6 s
    assert rows["plain Optuna"]["to_90"] == 6.0 and rows["plain Optuna"]["to_95"] == 6.0
    assert rows["plain Optuna"]["hv_end"] == pytest.approx(1.48 / ref)
    # autotune: 1.08, then 0.9 + 0.19 = 1.09 (73%): never reaches 90%
    assert rows["autotune"]["to_90"] == math.inf and rows["autotune"]["hits_90"] == 0
    # random: 0.8 x 1.7 = 1.36 at 4 s (91.3%): 90% at 4 s, never 95%
    assert rows["random search"]["to_90"] == 4.0 and rows["random search"]["to_95"] == math.inf
    assert rows["random search"]["trials"] == 2 and rows["random search"]["stopped"] == 1
    assert rows["autotune"]["best_acc"] == 0.95
    # plain reaches random's end (1.36) at 6 s: 10 / 6; random never reaches plain's end; no arm against itself
    assert rows["plain Optuna"]["speedup vs random search"] == pytest.approx(10 / 6)
    assert rows["random search"]["speedup vs plain Optuna"] == 0.0
    assert rows["autotune"]["speedup vs plain Optuna"] == 0.0
    assert "speedup vs plain Optuna" not in rows["plain Optuna"]


def test_tasks_come_from_the_bench_or_search_spaces() -> None:
    assert vs.task_sections("digits")["data"]["name"] == "digits"
    assert vs.task_sections("cnn")["model"]["name"] == "cnn"  # search_spaces/cnn.yaml
    with pytest.raises(SystemExit, match=r"--tasks: unknown task 'nope'; known: .*digits.*image"):
        vs.task_sections("nope")


def test_per_seed_prints_best_accuracy_and_reads_the_goals_off_the_paired_interval(capsys) -> None:
    runs = {"plain Optuna": [PLAIN, PLAIN], "autotune": [AUTOTUNE, PLAIN]}
    goals = vs.per_seed("t", vs.summarize(runs, budget=10.0), 10.0, first_seed=1000)
    out = capsys.readouterr().out
    # the union front is (0.5, 0.8), (1, 0.9), (2, 0.95): plain reaches 90 % of it at 6 s, autotune's first seed never
    assert "| 1000 | 0.9000 / 6s | 0.9500 / never |" in out and "| 1001 | 0.9000 / 6s | 0.9000 / 6s |" in out
    # RMST: plain (6 + 6) / 2, autotune (10 + 6) / 2 -> 0.75x; the goal needs the interval's lower end at 2
    assert "autotune vs plain Optuna: RMST(baseline) / RMST(arm) 0.75x" in out
    assert goals[0].startswith("| t | >= 2x to 90 % of the front | 0.75x [") and goals[0].endswith("| not met |")
    assert goals[1] == "| t | best accuracy no lower (median over seeds) | 0.9250 vs 0.9000 | met |"
