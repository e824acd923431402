"""Several devices per trial: real processes, real gloo, on the CPU (2 ranks, 1 torch thread each)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

import autotune
from autotune import config
from autotune.core.errors import ConfigError
from autotune.study import workers
from autotune.study.runner import open_study
from autotune.training.distributed import devices as distributed
from autotune.training.distributed.devices import RankFailed, ShardedBatches
from tests.support import tiny, user

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="this torch build has no gloo")


def ranks_log(log_dir: Path) -> dict[int, list[tuple[int, int, int, int, str, int]]]:
    """What fit_ranks logged: per rank, (pid, epoch, step, samples, model classes, world size) per step."""
    out = {}
    for path in sorted(log_dir.glob("rank*.txt")):
        rows = [line.split() for line in path.read_text().splitlines()]
        out[int(path.stem[4:])] = [(int(p), int(e), int(s), int(n), k, int(w)) for p, e, s, n, k, w in rows]
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pids: set[int], within_s: float = 10.0) -> bool:
    """Every process has exited (reaped or a zombie of the forkserver, which reaps it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) and not _zombie(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- each rank's share of the data


def test_sharded_batches_split_every_global_batch() -> None:
    n, bs = 23, 8  # global batches of 8, 8, 7
    shards = [ShardedBatches(n, bs, r, 2, seed=5, shuffle=True, drop_last=False) for r in range(2)]
    epochs = [[list(s) for s in shards] for _ in range(2)]
    for per_rank in epochs:
        assert [len(b) for b in per_rank[0]] == [4, 4, 3] and [len(b) for b in per_rank[1]] == [4, 4, 4]
        steps = [a + b for a, b in zip(*per_rank)]
        assert [len(s) for s in steps] == [8, 8, 7]  # the ranks of one step make the global batch
        assert sorted(i for s in steps for i in s) == list(range(n))  # disjoint, every sample once an epoch
    assert epochs[0][0] != epochs[1][0]  # reshuffled each epoch, alike on every rank
    assert len(shards[0]) == len(shards[1]) == 3
    # a last global batch smaller than the world would leave a rank without a sample: dropped on every rank
    odd = [list(ShardedBatches(17, 8, r, 2, seed=0, shuffle=False, drop_last=False)) for r in range(2)]
    assert [len(b) for b in odd[0]] == [len(b) for b in odd[1]] == [4, 4]
    three = [ShardedBatches(10, 5, r, 3, seed=0, shuffle=False, drop_last=True) for r in range(3)]
    assert [list(s) for s in three] == [[[0], [5]], [[1, 2], [6, 7]], [[3, 4], [8, 9]]]


# ---------------------------------------------------------------- trials on two ranks


def test_two_ranks_train_digits_like_one(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, train={"epochs": 3, "batch_size": 64, "lr": 3e-3, "device": "cpu"})
    one = autotune.train(cfg, params={"devices": 1})
    two = autotune.train(cfg, params={"devices": 2})
    assert two.device.startswith("2 x cpu") and not one.device.startswith("2 x")
    assert one.val_accuracy > 0.85 and abs(two.val_accuracy - one.val_accuracy) <= 0.05
    n_train = len(autotune.training.data.registry.load(cfg.data, cfg.source).y_train)
    for r in (one, two):  # samples/s counts every rank's samples: each epoch is the whole training split
        assert [round(h.samples_per_s * h.epoch_time_s) for h in r.history] == [n_train] * 3
    assert abs(two.history[-1].train_loss - one.history[-1].train_loss) < 0.2  # the mean over both ranks' samples
    assert isinstance(two.model, torch.nn.Module) and two.model_params == one.model_params  # rank 0's model
    # peak memory: the highest rank's so far (Group.max over gloo), in every epoch's record, never falling
    peaks = [h.peak_memory_mb for h in two.history]
    assert all(p is not None for p in peaks) and peaks == sorted(peaks) and two.peak_memory_mb == peaks[-1]


def test_user_fit_on_two_ranks(tmp_path: Path) -> None:
    """A user's fit with devices 2: DDP around its model, half of every global batch per rank, ctx.model plain."""
    cfg = user(tmp_path, "fit_ranks", train={"epochs": 2, "devices": 2, "user.log_dir": str(tmp_path)})
    r = autotune.train(cfg)
    assert r.val_accuracy > 0.9 and r.epochs_run == 2
    log = ranks_log(tmp_path)
    assert set(log) == {0, 1} and {row[0] for row in log[0]}.isdisjoint({row[0] for row in log[1]})
    for rows in log.values():
        assert {row[4] for row in rows} == {"DistributedDataParallel/MLP"} and {row[5] for row in rows} == {2}
        per_epoch = [sum(row[3] for row in rows if row[1] == e) for e in (1, 2)]
        assert per_epoch == [300, 300]  # 600 samples, batch 64 split 32 + 32 (the last, 24, as 12 + 12)
    assert [round(h.samples_per_s * h.epoch_time_s) for h in r.history] == [600, 600]
    assert gone({row[0] for rows in log.values() for row in rows})
    # the same through a DataLoader (a map-style Dataset), with accumulation (all-reduce only where it ends)
    (tmp_path / "rank0.txt").unlink()
    (tmp_path / "rank1.txt").unlink()
    r = autotune.train(cfg, params={"user.dataset": True, "grad_accum_steps": 2})
    assert r.val_accuracy > 0.85 and r.not_applied.get("data_on_device", "").startswith("the data is a Dataset")
    assert [sum(row[3] for row in ranks_log(tmp_path)[k] if row[1] == 1) for k in (0, 1)] == [300, 300]


@pytest.mark.slow
def test_compiled_ddp_trial(tmp_path: Path) -> None:
    """torch.compile around the DDP wrapper on both ranks (minutes on a small CPU: inductor's C++ builds)."""
    cfg = user(tmp_path, "fit_ranks", train={"epochs": 2, "devices": 2, "compile": True,
                                             "user.log_dir": str(tmp_path)})
    r = autotune.train(cfg)
    assert r.val_accuracy > 0.85 and r.compile_time_s > 0
    assert {row[4] for rows in ranks_log(tmp_path).values() for row in rows} == {"OptimizedModule/MLP"}


@pytest.mark.parametrize(("sections", "state", "reason", "epoch"), [
    ({"pruning": {"pruner": "threshold", "pruner_args": {"lower": 1.01}}}, "PRUNED", "pruned", 1),
    ({"pruning": {"slow": {"max_trial_seconds": 1e-4}}}, "PRUNED", "slow", 1),
    ({"pruning": {"slow": {"hang_seconds": 0.01}}, "train": {"batch_size": 8}}, "PRUNED", "hang", 0),
    ({"train": {"early_stopping": {"patience": 1, "min_delta": 100.0}}}, "COMPLETE", "early_stopped", 2),
], ids=["threshold-pruner", "max_trial_seconds", "hang_seconds", "early-stopping"])
def test_both_ranks_stop_at_the_same_step(tmp_path: Path, sections: dict[str, Any], state: str, reason: str,
                                          epoch: int) -> None:
    train = {"epochs": 4, "devices": 2, "user.log_dir": str(tmp_path), **sections.pop("train", {})}
    cfg = user(tmp_path, "fit_ranks", objectives=["val_accuracy"], study={"n_trials": 1}, train=train, **sections)
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == state and t.user_attrs["stop_reason"] == reason
    assert t.user_attrs["stop_epoch"] == epoch
    log = ranks_log(tmp_path)
    last = {rank: rows[-1][1:3] for rank, rows in log.items()}
    assert last[0] == last[1]  # the same epoch and step on both ranks
    if reason == "hang" and epoch == 0:  # the hang limit is checked together every 64 steps: both ranks stopped
        assert last[0] == (1, 63)  # inside the 64th step's ctx.backward, before fit_ranks logged it
    else:
        assert last[0] == (epoch, epoch * 10)  # 600 samples, global batch 64: 10 steps an epoch
    assert len(t.user_attrs.get("history", [])) == max(epoch, 0)
    assert gone({row[0] for rows in log.values() for row in rows})


def test_a_peers_lost_connection_waits_for_the_death_that_caused_it() -> None:
    """The survivor's "connection closed" can arrive before the dead rank is reaped; the launcher then still names
    the dead rank, not the survivor's consequence (CI once saw the consequence when ranks were killed at once)."""
    from tests import rank_targets

    with pytest.raises(RankFailed, match=r"^rank 1 of 2 \(pid \d+\) was killed by SIGKILL in epoch 1; the other"):
        distributed.launch(rank_targets.consequence_before_cause, None, 2, torch.device("cpu"))


@pytest.mark.parametrize(("crash", "error"), [
    ("sigkill", r"^RankFailed: rank 1 of 2 \(pid \d+\) was killed by SIGKILL in epoch 2; the other rank"),
    ("raise", r"^ValueError: bad shard on rank 1 \(at user_fits\.py:\d+ in fit_ranks, rank 1 of 2\)$"),
])
def test_a_rank_that_dies_fails_the_trial_and_the_study_goes_on(tmp_path: Path, crash: str, error: str) -> None:
    space = {"user.crash": {"type": "categorical", "choices": ["none", "raise", "sigkill"]}}
    cfg = user(tmp_path, "fit_ranks", space=space, study={"n_trials": 2},
               train={"epochs": 3, "devices": 2, "user.log_dir": str(tmp_path)})
    study = open_study(cfg)
    study.enqueue_trial({"user.crash": crash})
    study.enqueue_trial({"user.crash": "none"})
    res = autotune.run(cfg)
    failed, ok = res.study.trials
    assert failed.state.name == "FAIL" and ok.state.name == "COMPLETE"
    import re

    assert re.search(error, failed.user_attrs["error"]), failed.user_attrs["error"]
    assert failed.user_attrs["stop_reason"] == "error"
    assert (failed.datetime_complete - failed.datetime_start).total_seconds() < 30  # no collective waited it out
    assert ok.values[0] > 0.9
    assert gone({row[0] for rows in ranks_log(tmp_path).values() for row in rows})


def test_out_of_memory_on_the_ranks_retries_at_half_the_global_batch(tmp_path: Path) -> None:
    """Each rank's share of 128 is 64, over the fit's limit of 32: both ranks raise, the trial retries at 64."""
    cfg = user(tmp_path, "fit_oom_above_32", pruning={"oom": "retry_smaller_batch"}, study={"n_trials": 1},
               train={"batch_size": 128, "devices": 2})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "COMPLETE" and t.user_attrs["oom_retried"] and t.user_attrs["batch_size_used"] == 64
    assert t.values[0] > 0.8


def test_searched_devices_in_one_study(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, objectives=["val_accuracy", "samples_per_s"], study={"n_trials": 2, "sampler": "grid"},
               space={"devices": {"type": "categorical", "choices": [1, 2]}}, train={"device": "cpu", "lr": 1e-2})
    res = autotune.run(cfg)
    done = sorted(((t.params["devices"], t) for t in res.study.trials if t.state.name == "COMPLETE"),
                  key=lambda p: p[0])
    assert [d for d, _ in done] == [1, 2]
    for _, t in done:
        assert t.values[0] > 0.5 and t.values[1] > 0
        assert [h["epoch"] for h in t.user_attrs["history"]] == [1, 2]
    assert abs(done[0][1].values[0] - done[1][1].values[0]) < 0.1


def test_a_function_other_processes_cannot_import_is_a_clear_error(tmp_path: Path) -> None:
    cfg = user(tmp_path, train={"devices": 2})
    with pytest.raises(RankFailed, match=r"devices 2 trains in new processes, so the training function must be "
                                         r"importable by name"):
        autotune.train(cfg, fit=lambda ctx: None)


# ---------------------------------------------- what the machine can give (bad configs: tests/configs/devices_*)


def test_devices_on_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import fake_gpus as _fake_gpus

    _fake_gpus(monkeypatch, "0,1")
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    ok = tiny(tmp_path, train={"device": "cuda", "devices": 2})
    distributed.check(ok)
    with pytest.raises(ConfigError, match=r"train\.devices: devices 3 but 2 CUDA GPU\(s\) visible"):
        distributed.check(tiny(tmp_path, train={"device": "cuda", "devices": 3}))
    with pytest.raises(ConfigError, match=r"train\.device: cuda:1 picks one GPU; with devices 2 use device cuda"):
        distributed.check(tiny(tmp_path, train={"device": "cuda:1", "devices": 2}))


def _journal(tmp_path: Path, **train: Any) -> config.RunConfig:
    return tiny(tmp_path, study={"storage": f"journal:///{tmp_path}/j.log"}, train=train)


def test_workers_times_devices_never_exceeds_what_is_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import fake_gpus as _fake_gpus

    _fake_gpus(monkeypatch, "3,4,5,6,7")
    cfg = _journal(tmp_path, device="cuda", devices=2)
    assert [s.gpu for s in workers.slots_for(cfg, None, None)] == ["3,4", "5,6"]  # two workers; GPU 7 stays idle
    assert workers.slots_for(cfg, None, None)[1].env()["CUDA_VISIBLE_DEVICES"] == "5,6"
    with pytest.raises(ConfigError, match=r"--workers: 3 workers x devices 2 need 6 GPUs but 5 visible"):
        workers.slots_for(cfg, 3, None)
    # asked for: two workers' trials on the same pair of GPUs
    assert [s.gpu for s in workers.slots_for(cfg, 2, ["0", "1", "0", "1"])] == ["3,4", "3,4"]
    with pytest.raises(ConfigError, match=r"--gpus: 2 workers x devices 2 need 4 GPU indices, got 2"):
        workers.slots_for(cfg, 2, ["0", "1"])
    with pytest.raises(ConfigError, match=r"--gpus: worker 0's trials would put two ranks on GPU 0"):
        workers.slots_for(cfg, 1, ["0", "0"])
    searched = tiny(tmp_path, study={"storage": f"journal:///{tmp_path}/j.log"}, train={"device": "cuda"},
                    space={"devices": {"type": "categorical", "choices": [1, 4]}})
    assert [s.gpu for s in workers.slots_for(searched, None, None)] == ["3,4,5,6"]  # the largest a trial may take


def test_workers_times_devices_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "cpu_cores", lambda: 4)
    cfg = _journal(tmp_path, device="cpu", devices=2)
    slots = workers.slots_for(cfg, 2, None)
    assert [s.threads for s in slots] == [2, 2]  # a worker's threads, split again over its trial's 2 ranks
    with pytest.raises(ConfigError, match=r"--workers: 3 workers x devices 2 = 6 processes but 4 CPU core\(s\)"):
        workers.slots_for(cfg, 3, None)


@pytest.mark.slow
def test_the_worker_dying_takes_its_ranks_along(tmp_path: Path) -> None:
    """A trial's ranks never outlive the process that runs the trial (a killed worker leaves no orphans). Slow: a
    fresh interpreter starts its own forkserver (10-20 s on a loaded 2-core machine)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport torch\ntorch.set_num_threads(1)\n"
        "import autotune\nfrom tests.support import user\nfrom pathlib import Path\n"
        "if __name__ == '__main__':\n"
        "    p = Path(sys.argv[2])\n"
        "    autotune.train(user(p, 'fit_ranks', train={'epochs': 1000, 'devices': 2, 'user.log_dir': str(p)}))\n")
    from tests.support import ROOT

    proc = subprocess.Popen([sys.executable, str(script), str(ROOT), str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while len(ranks_log(tmp_path)) < 2 or any(len(rows) < 20 for rows in ranks_log(tmp_path).values()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        pids = {rows[0][0] for rows in ranks_log(tmp_path).values()}
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert gone(pids), "a rank outlived its worker"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_searched_devices_larger_than_the_batch_are_unsupported_trials(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, study={"n_trials": 1}, train={"device": "cpu", "batch_size": 1, "epochs": 1},
               space={"devices": {"type": "categorical", "choices": [2]}})
    t = autotune.run(cfg).study.trials[0]
    assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["stop_reason"] == "unsupported"
    assert "batch_size 1 cannot be split over devices 2" in t.user_attrs["stop_detail"]
