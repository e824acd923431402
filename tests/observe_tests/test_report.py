"""report.py: the data builders on a real small study, then the HTML file and `autotune report`."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import autotune
from autotune.cli import app as cli
from autotune.observe import progress, report
from tests.support import tiny

TINY = Path(__file__).parents[1] / "studies" / "tiny_study.yaml"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> autotune.TuneResult:
    db = tmp_path_factory.mktemp("report") / "tiny.db"
    cfg = autotune.load_config(str(TINY), overrides={"study.storage": f"sqlite:///{db}", "study.n_trials": 5})
    return autotune.run(cfg)


@pytest.fixture(scope="module")
def mixed(tuned: autotune.TuneResult) -> optuna.Study:
    """The real trials plus a pruned trial (a real trial's first epoch) and a constraint-violating one (stored the
    way `trial.set_constraint` stores it: test_infeasible_trial_of_a_real_constrained_study runs the real thing)."""
    study = optuna.create_study(directions=tuned.config.directions)
    real = tuned.study.get_trials(states=(TrialState.COMPLETE,))
    study.add_trials(real)
    src = real[0]
    study.add_trial(create_trial(
        state=TrialState.PRUNED, params=src.params, distributions=src.distributions,
        user_attrs={**src.user_attrs, "history": src.user_attrs["history"][:1], "stop_reason": "dominated",
                    "stop_epoch": 1, "val_accuracy": None, "train_time_s": None, "samples_per_s": None}))
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, values=[1.0, 1e-3], params=src.params, distributions=src.distributions,
        user_attrs=src.user_attrs, constraints={"accuracy_drop": 0.5}))
    return study


def non_dominated(study: optuna.Study, directions: list[str]) -> list[int]:
    """The front by brute force, the definition itself: the complete feasible trials no other such trial is at
    least as good as on every objective and better on one."""
    sign = [1 if d == "maximize" else -1 for d in directions]
    done = [t for t in study.trials
            if t.state == TrialState.COMPLETE and all(c <= 0 for c in dict(t.constraints or {}).values())]
    score = {t.number: [s * v for s, v in zip(sign, t.values)] for t in done}

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return sorted(n for n, v in score.items() if not any(dominates(w, v) for m, w in score.items() if m != n))


def test_pareto_data_front_of_a_study_built_by_hand(tuned: autotune.TuneResult) -> None:
    """Fixed values, so the front is known by construction: (accuracy up, time down)."""
    study = optuna.create_study(directions=tuned.config.directions)
    dist = {"batch_size": CategoricalDistribution([64, 128])}

    def add(acc: float, time_s: float, **kw: object) -> None:
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=[acc, time_s], params={"batch_size": 64},
                                     distributions=dist, user_attrs={"val_accuracy": acc, "train_time_s": time_s},
                                     **kw))

    add(0.90, 2.0)  # 0: front
    add(0.80, 1.0)  # 1: front (the fastest feasible)
    add(0.85, 3.0)  # 2: dominated by 0
    add(0.95, 5.0)  # 3: front (the most accurate feasible)
    add(0.80, 1.5)  # 4: dominated by 1 (as accurate, slower)
    add(0.99, 0.5, constraints={"accuracy_drop": 0.2})  # 5: would dominate them all, but violates a constraint
    study.add_trial(create_trial(state=TrialState.PRUNED, params={"batch_size": 128}, distributions=dist,
                                 user_attrs={"history": [{"epoch": 1, "val_accuracy": 0.99, "train_time_s": 0.1}],
                                             "stop_reason": "dominated", "stop_epoch": 1}))  # 6: pruned
    study.add_trial(create_trial(state=TrialState.FAIL, params={"batch_size": 128}, distributions=dist))  # 7
    d = report.pareto_data(study, tuned.config)
    assert d["front"] == [0, 1, 3]
    cats = {p["number"]: p["category"] for p in d["points"]}
    assert cats == {0: "pareto", 1: "pareto", 2: "complete", 3: "pareto", 4: "complete", 5: "infeasible",
                    6: "pruned"}  # the failed trial measured nothing: not drawn
    assert {n: (p["x"], p["y"]) for n, p in ((p["number"], p) for p in d["points"])}[4] == (1.5, 0.80)
    assert d["recommended"] in (0, 1, 3)
    assert [p["number"] for p in d["points"] if p["recommended"]] == [d["recommended"]]


def test_pareto_data_marks_front_and_recommended(tuned: autotune.TuneResult) -> None:
    d = report.pareto_data(tuned.study, tuned.config)
    assert (d["x_metric"], d["y_metric"]) == ("train_time_s", "val_accuracy")
    complete = tuned.study.get_trials(states=(TrialState.COMPLETE,))
    by_number = {p["number"]: p for p in d["points"]}
    for t in complete:
        p = by_number[t.number]
        assert p["x"] == pytest.approx(t.user_attrs["train_time_s"])
        assert p["y"] == pytest.approx(t.user_attrs["val_accuracy"])
    front = non_dominated(tuned.study, tuned.config.directions)
    assert d["front"] == front and front
    assert {p["number"] for p in d["points"] if p["category"] == "pareto"} == set(front)
    recommended = [p["number"] for p in d["points"] if p["recommended"]]
    assert recommended == [tuned.best.number] == [d["recommended"]]
    assert d["recommended"] in front


def test_pareto_data_shows_pruned_where_it_stopped_and_infeasible_apart(mixed: optuna.Study,
                                                                        tuned: autotune.TuneResult) -> None:
    d = report.pareto_data(mixed, tuned.config)
    cats = {p["number"]: p["category"] for p in d["points"]}
    pruned = next(t for t in mixed.trials if t.state == TrialState.PRUNED)
    infeasible = mixed.trials[-1]
    assert cats[pruned.number] == "pruned"
    assert cats[infeasible.number] == "infeasible"
    # A dominating but infeasible trial is neither on the front nor recommended.
    assert infeasible.number not in d["front"] and d["recommended"] != infeasible.number
    p = next(p for p in d["points"] if p["number"] == pruned.number)
    first = pruned.user_attrs["history"][0]
    assert (p["x"], p["y"]) == (pytest.approx(first["train_time_s"]), pytest.approx(first["val_accuracy"]))
    assert p["stop_reason"] == "dominated" and p["stop_epoch"] == 1


def test_infeasible_trial_of_a_real_constrained_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """constraints.max_accuracy_drop with compression: the objective calls trial.set_constraint; a trial whose
    pruning (90% of the weights, no fine-tuning) costs more accuracy than allowed is drawn and listed infeasible."""
    cfg = tiny(tmp_path, study={"n_trials": 2, "sampler": "grid"}, constraints={"max_accuracy_drop": 0.05},
               train={"epochs": 1, "prune_amount": 0.9, "finetune_epochs": 0, "infer_batch_size": 64},
               space={"prune_method": {"type": "categorical", "choices": ["none", "l1_unstructured"]}})
    res = autotune.run(cfg)
    by = {t.params["prune_method"]: t for t in res.study.trials}
    pruned, plain = by["l1_unstructured"], by["none"]
    assert pruned.state == plain.state == TrialState.COMPLETE
    drop = pruned.user_attrs["val_accuracy_before_compress"] - pruned.user_attrs["val_accuracy"]
    assert drop > 0.05 and pruned.constraints == {"accuracy_drop": pytest.approx(drop - 0.05)}
    assert plain.constraints == {"accuracy_drop": pytest.approx(-0.05)}  # nothing compressed: no drop
    points = {p["number"]: p["category"] for p in report.pareto_data(res.study, cfg)["points"]}
    assert points[pruned.number] == "infeasible" and points[plain.number] == "pareto"
    rows = {r["number"]: r for r in report.top_trials(res.study, cfg)}
    assert rows[pruned.number]["feasible"] is False and rows[plain.number]["feasible"] is True
    assert res.best.number == plain.number and [s.number for s in res.pareto] == [plain.number]
    html = report.render(report.build(res.study, cfg))
    assert html.count(" infeasible</td>") == 1
    view = progress.RunView(cfg, plain=True)
    view.on_trial(res.study, pruned)
    view.on_trial(res.study, plain)
    lines = capsys.readouterr().out.splitlines()
    assert "COMPLETE (infeasible)" in lines[-2] and "infeasible" not in lines[-1]


def test_history_best_so_far_is_running_best(tuned: autotune.TuneResult) -> None:
    d = report.history_data(tuned.study, tuned.config)
    assert [o["metric"] for o in d["objectives"]] == ["val_accuracy", "train_time_s"]
    for o in d["objectives"]:
        pick = max if o["direction"] == "maximize" else min
        assert o["best_so_far"] == [pick(o["values"][: i + 1]) for i in range(len(o["values"]))]
        assert len(o["numbers"]) == len(tuned.study.get_trials(states=(TrialState.COMPLETE,)))


def test_learning_curves_grouped_by_state_and_stop_reason(mixed: optuna.Study, tuned: autotune.TuneResult) -> None:
    d = report.learning_curves(mixed, tuned.config)
    assert len(d["curves"]) == len(mixed.trials)  # every trial here ran at least one epoch
    for c in d["curves"]:
        t = mixed.trials[c["number"]]
        assert c["epoch"] == [h["epoch"] for h in t.user_attrs["history"]]
        assert c["val_accuracy"] == [h["val_accuracy"] for h in t.user_attrs["history"]]
        assert c["group"] == ("dominated" if t.state == TrialState.PRUNED else "complete")
    assert d["groups"] == ["complete", "dominated"]
    full = [c for c in d["curves"] if c["state"] == "COMPLETE"]
    assert all(c["epoch"] == [1, 2] for c in full)


def test_importances_per_objective(tuned: autotune.TuneResult) -> None:
    d = report.importances(tuned.study, tuned.config)
    assert [o["metric"] for o in d["objectives"]] == ["val_accuracy", "train_time_s"]
    for o in d["objectives"]:
        assert o["error"] is None
        assert set(o["importances"]) <= set(tuned.config.space)
        assert sum(o["importances"].values()) == pytest.approx(1.0, abs=1e-6)


def test_importances_with_too_few_trials_says_why(tuned: autotune.TuneResult) -> None:
    study = optuna.create_study(directions=tuned.config.directions)
    study.add_trials(tuned.study.get_trials(states=(TrialState.COMPLETE,))[:1])
    d = report.importances(study, tuned.config)
    assert all(o["importances"] == {} and "at least 3 complete trials" in o["error"] for o in d["objectives"])


def test_parallel_coordinates_columns(tuned: autotune.TuneResult) -> None:
    d = report.parallel_data(tuned.study, tuned.config)
    complete = tuned.study.get_trials(states=(TrialState.COMPLETE,))
    assert d["numbers"] == [t.number for t in complete]
    labels = [dim["label"] for dim in d["dimensions"]]
    assert labels[-2:] == ["validation accuracy", "training time (s)"]
    assert "log10 lr" in labels  # lr is searched on a log scale
    for dim in d["dimensions"]:
        assert len(dim["values"]) == len(complete)
        if "ticktext" in dim:
            dist = complete[0].distributions[dim["label"]]
            assert isinstance(dist, CategoricalDistribution)
            assert dim["ticktext"] == [str(c) for c in dist.choices]
    lr = d["dimensions"][labels.index("log10 lr")]["values"]
    assert lr == pytest.approx([math.log10(t.params["lr"]) for t in complete])


def test_throughput_by_precision_and_batch_size(tuned: autotune.TuneResult) -> None:
    d = report.throughput_data(tuned.study, tuned.config)
    finished = tuned.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    measured = [t for t in finished if report.measured(t, "samples_per_s", tuned.metrics) is not None]
    for kind, attr in (("by_precision", "precision"), ("by_batch_size", "batch_size")):
        groups = d[kind]
        assert sum(g["n"] for g in groups) == len(measured)
        assert {g["key"] for g in groups} == {str(t.params[attr]) for t in measured}
        for g in groups:
            for n, v in zip(g["numbers"], g["values"]):
                t = tuned.study.trials[n]
                assert str(t.params[attr]) == g["key"]
                assert v == pytest.approx(report.measured(t, "samples_per_s", tuned.metrics))
                assert v > 0
    keys = [g["key"] for g in d["by_batch_size"]]
    assert keys == sorted(keys, key=int)


def test_top_trials_recommended_first_then_front(tuned: autotune.TuneResult) -> None:
    rows = report.top_trials(tuned.study, tuned.config, n=10)
    assert rows[0]["number"] == tuned.best.number and rows[0]["recommended"]
    flags = [r["pareto"] for r in rows]
    assert flags == sorted(flags, reverse=True)  # front members before the rest
    assert all(set(r["params"]) <= set(tuned.config.space) for r in rows)
    assert all(r["precision"] in ("fp32", "bf16") for r in rows)


def test_single_objective_study(tuned: autotune.TuneResult, tmp_path: Path) -> None:
    cfg = autotune.load_config(str(TINY), overrides={"objectives": [{"metric": "val_accuracy"}],
                                                     "pruning.pruner": "none"})
    study = optuna.create_study(direction="maximize")
    for t in tuned.study.get_trials(states=(TrialState.COMPLETE,)):
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=[t.user_attrs["val_accuracy"]], params=t.params,
                                     distributions=t.distributions, user_attrs=t.user_attrs))
    d = report.pareto_data(study, cfg)
    assert (d["x_metric"], d["y_metric"]) == ("train_time_s", "val_accuracy")
    best = max(study.trials, key=lambda t: t.values[0])
    assert d["recommended"] == best.number and d["front"] == [best.number]
    assert [o["metric"] for o in report.importances(study, cfg)["objectives"]] == ["val_accuracy"]
    assert report.top_trials(study, cfg)[0]["number"] == best.number
    assert "Recommended: trial" in report.write(study, cfg, tmp_path / "single.html").read_text()


def test_empty_study_builds_and_renders(tuned: autotune.TuneResult, tmp_path: Path) -> None:
    study = optuna.create_study(directions=tuned.config.directions)
    data = report.build(study, tuned.config)
    assert data["pareto"]["points"] == [] and data["pareto"]["recommended"] is None
    assert data["top"] == []
    path = report.write(study, tuned.config, tmp_path / "empty.html")
    assert "nothing to recommend" in path.read_text()


def test_write_is_one_self_contained_file(tuned: autotune.TuneResult, tmp_path: Path) -> None:
    path = tuned.report(tmp_path / "sub" / "report.html")
    text = path.read_text()
    assert "<script src=" not in text and "cdn.plot.ly" not in text.split("</script>", 1)[1]
    assert len(text) > 3_000_000  # plotly.js itself is inline
    for name in ("pareto", "history", "curves", "importances", "parallel", "throughput"):
        assert f'id="fig-{name}"' in text
    assert f"Recommended: trial {tuned.best.number}" in text
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]  # no temp file left


def test_cli_report_from_yaml_and_from_storage(tuned: autotune.TuneResult, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    url = tuned.config.study.storage
    out = tmp_path / "a.html"
    assert cli.main(["report", str(TINY), "--storage", url, "-o", str(out)]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out
    out2 = tmp_path / "b.html"
    assert cli.main(["report", "--storage", url, "--study", "tiny", "-o", str(out2)]) == 0
    assert f"Recommended: trial {tuned.best.number}" in out2.read_text()


def test_cli_report_errors_are_one_line(tuned: autotune.TuneResult, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.html"
    url = tuned.config.study.storage
    assert cli.main(["report", "nope", "--storage", url, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --storage: --study: no study 'nope' in {url}; known: tiny"
    assert cli.main(["report", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: no such file" in capsys.readouterr().err
    assert cli.main(["report"]) == 2
    assert "FILE_OR_STUDY" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tuned: autotune.TuneResult, tmp_path: Path) -> None:
    from browser import console_errors, run, screenshot

    path = tuned.report(tmp_path / "report.html")
    url = path.resolve().as_uri()
    dom = run(url, tmp_path, "--dump-dom", wait_ms=8000)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_errors(dom.stderr) == []
    # Plotly replaced each figure's div with its rendered SVG (parcoords draws WebGL plus SVG axes).
    for name in ("pareto", "history", "curves", "importances", "parallel", "throughput"):
        div = dom.stdout.split(f'id="fig-{name}"', 1)[1].split('id="fig-', 1)[0]
        assert 'class="main-svg"' in div and "js-plotly-plot" in div, name
    assert dom.stdout.count('class="main-svg"') >= 6
    screenshot(url, tmp_path / "report.png", tmp_path)
