"""The budget of a shared study: claims are exact when workers race, a lost race ends PRUNED as `surplus` (not a
failure, in no count) before it samples anything, and a worker waits while trials it could still see die hold the
last slots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import config
from autotune.study import budget, orphans, storage


def journal(tmp_path: Path) -> optuna.Study:
    """A study on a journal opened the way workers open it (every trial stamped with its owner)."""
    st = storage.make_storage(config.from_dict({"study": {"storage": f"journal:///{tmp_path}/b.log"}}))
    return optuna.create_study(study_name="b", storage=st)


def test_claim_lets_exactly_n_trials_run_when_workers_race(tmp_path: Path) -> None:
    """Five workers passed the 'room left?' check at once for a 3-trial budget: three may run."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "r.log")))
    study = optuna.create_study(storage=storage, study_name="r")
    asked = [study.ask() for _ in range(5)]
    assert [budget.claim(study, t.number, 3) for t in asked] == [True, True, True, False, False]
    for t in asked[3:]:
        study.tell(t, state=TrialState.FAIL)  # the surplus trials fail at once
    study.tell(asked[1], state=TrialState.FAIL)  # a claimed trial dies ...
    study.enqueue_trial({})  # ... and its retry is queued (number 5)
    late = study.ask()  # a worker that asked before the retry was popped would get a new trial,
    assert late.number == 5  # but ask() pops the WAITING retry first
    extra = optuna.Trial(study, study._storage.create_new_trial(study._study_id))  # number 6
    assert extra.number == 6
    assert budget.claim(study, late.number, 3)  # 0 and 2 ahead of it
    assert not budget.claim(study, extra.number, 3)  # 0, 2 and the retry 5 ahead of it


def test_a_trial_that_lost_the_race_ends_surplus_before_sampling_and_is_no_failure(tmp_path: Path) -> None:
    study = journal(tmp_path)
    ahead = [study.ask() for _ in range(2)]  # two workers hold the whole budget of 2
    ran: list[int] = []
    claimed = budget.ClaimedObjective(lambda t: ran.append(t.number) or t.suggest_float("x", 0, 1), n_trials=2)
    study.optimize(claimed, n_trials=1, catch=(budget.SurplusTrial,))
    late = study.trials[-1]
    assert ran == [] and late.params == {}  # nothing sampled, nothing trained
    assert late.state == TrialState.PRUNED and late.user_attrs["surplus"] is True and claimed.surplus == 1
    assert late.user_attrs["stop_reason"] == "surplus" and "lost race" in late.user_attrs["stop_detail"]
    assert budget.counts(study.trials) == budget.Counts(finished=0, running=2, waiting=0, failed=0, surplus=1)
    study.tell(ahead[0], state=TrialState.FAIL)  # one of the two dies: its slot is free again
    study.optimize(claimed, n_trials=1, catch=(budget.SurplusTrial,))
    assert ran == [study.trials[-1].number] and study.trials[-1].state == TrialState.COMPLETE
    seen: list[int] = []
    budget.unless_surplus(lambda s, t: seen.append(t.number))(study, late)
    assert seen == []  # callbacks never hear of a lost race


def test_a_lost_race_ends_the_batch_and_a_lone_worker_reads_once(tmp_path: Path) -> None:
    """One surplus trial ends `optimize` (the loop then reads the study) instead of failing the rest of the batch
    as surplus too; a worker alone takes every free slot in one batch (its claims need no read: the bound is
    exact for its own trials), one beside running workers half its share."""
    study = journal(tmp_path)
    [study.ask() for _ in range(2)]  # two workers hold the whole budget of 2
    claimed = budget.ClaimedObjective(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    study.optimize(claimed, n_trials=5, catch=(budget.SurplusTrial,))
    assert len(study.trials) == 3 and claimed.surplus == 1
    assert budget.batch(budget.Seen(total=10, alive=10, running=0), 1000) == 990
    assert budget.batch(budget.Seen(total=10, alive=10, running=3), 1000) == 990 // 8
    assert budget.batch(budget.Seen(total=999, alive=999, running=1), 1000) == 1
    assert budget.batch(budget.Seen(total=5, alive=5), None) == 16 and budget.batch(None, 10) == 1


def test_next_step_runs_waits_and_stops(tmp_path: Path) -> None:
    study = journal(tmp_path)
    assert budget.next_step(study, None) == "run"  # no budget: run until the timeout
    running = [study.ask() for _ in range(2)]
    assert all(orphans.owner_of(study.trials[t.number]) is not None for t in running)  # stamped by the storage
    assert budget.next_step(study, 3) == "run"  # a slot is left
    # the budget is in flight in live processes of this host, which could still die: wait for them
    assert budget.next_step(study, 2) == "wait"
    for t in running:
        study.tell(t, 1.0)
    assert budget.next_step(study, 2) == "done"
    c = budget.counts(study.get_trials())
    assert (c.finished, c.running, c.waiting, c.failed) == (2, 0, 0, 0)


def test_a_claim_far_from_the_budgets_end_needs_no_read(tmp_path: Path) -> None:
    """The worker loop's last read bounds how many trials can be alive below a new one: far from the end, the
    claim is granted without reading the study again; near it, the claim reads and is exact."""
    study = journal(tmp_path)
    done = [study.ask() for _ in range(3)]
    for t in done:
        study.tell(t, 1.0)
    seen = budget.Seen.of(study.get_trials())
    assert (seen.total, seen.alive) == (3, 3)
    others = [study.ask() for _ in range(2)]  # two other workers started trials since that read
    mine = study.ask()  # number 5: at most 3 + 2 alive below it
    reads: list[int] = []
    real = study.get_trials
    study.get_trials = lambda *a, **k: reads.append(1) or real(*a, **k)  # type: ignore[method-assign]
    assert budget.claim(study, mine.number, 6, seen) and reads == []  # 5 < 6: no read
    assert not budget.claim(study, mine.number, 5, seen) and reads == [1]  # 5 alive below it: read, refused
    study.tell(others[0], state=TrialState.FAIL)
    assert budget.claim(study, mine.number, 5, seen)  # the read sees the failed one: a slot is free


def test_the_stale_watcher_says_once_why_it_could_not_look(tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    import logging
    import time

    calls: list[int] = []

    def broken(study: optuna.Study) -> None:
        calls.append(1)
        raise OSError("database is locked\nsecond line")

    monkeypatch.setattr(orphans, "reap", broken)
    cfg = config.from_dict({"study": {"storage": f"journal:///{tmp_path}/b.log"}})
    watcher = budget.StaleWatcher(journal(tmp_path), cfg)
    watcher.every = 0.01
    with caplog.at_level(logging.WARNING, logger="autotune.study.budget"), watcher:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(calls) >= 3 and watcher.failures == len(calls)  # it kept looking
    said = [r.getMessage() for r in caplog.records if "stale-trial watcher" in r.getMessage()]
    assert said == ["the stale-trial watcher could not read the study (OSError: database is locked); it keeps "
                    "trying, and the worker loop looks between trials too"]


def test_workers_racing_for_the_last_slot_leave_no_failure_and_exact_counts(tmp_path: Path) -> None:
    """29.10: three workers (threads, each its own ClaimedObjective, as `autotune worker` processes have) pass the
    'room left?' check together for the last slot of a 4-trial budget: one trains, the others end PRUNED as
    surplus; the study shows 4 finished and no failure (Optuna's FAIL read as an error by users), and the report
    files them under 'surplus'."""
    import threading

    from autotune.observe.report_data import stop_group
    from autotune.study.runner import n_finished

    study = journal(tmp_path)
    for _ in range(3):
        study.tell(study.ask(), 1.0)
    gate = threading.Barrier(3)

    def worker() -> None:
        claimed = budget.ClaimedObjective(lambda t: t.suggest_float("x", 0, 1), n_trials=4)
        gate.wait()  # all three saw one free slot
        study.optimize(claimed, n_trials=1, catch=(budget.SurplusTrial,))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    trials = study.get_trials()
    assert len(trials) == 6 and not [t for t in trials if t.state == TrialState.FAIL]
    surplus = [t for t in trials if t.user_attrs.get("surplus")]
    assert len(surplus) == 2 and all(t.state == TrialState.PRUNED and t.params == {} for t in surplus)
    assert {stop_group(t) for t in surplus} == {"surplus"}
    c = budget.counts(trials)
    assert (c.finished, c.failed, c.surplus) == (4, 0, 2) and n_finished(study) == 4
    assert budget.next_step(study, 4) == "done"
