"""hostmem.py: the memory this process may take, read from its own cgroup (v1 and v2, faked as folders, as the
meters' tests fake /proc) as a working set, the tightest limit up the tree; and one worker per host acting on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core import hostmem, watchdog

MB = 2**20
NO_LIMIT_V1 = "9223372036854771712"


def machine(root: Path, avail_mb: int = 60_000, total_mb: int = 64_000) -> None:
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(f"MemTotal: {total_mb * 1024} kB\nMemAvailable: {avail_mb * 1024} kB\n")


def write(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text + "\n")


def v1(root: Path, own: str, mount_root: str = "/") -> Path:
    """A cgroup v1 machine (the memory controller on its own mount) whose process sits in `own`."""
    machine(root)
    (root / "proc/self/cgroup").write_text(f"5:cpu,cpuacct:/\n4:memory:{own}\n0::/\n")
    (root / "proc/self/mountinfo").write_text(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        f"35 31 0:32 {mount_root} /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    top = root / "sys/fs/cgroup/memory"
    write(top, memory_limit_in_bytes=NO_LIMIT_V1, memory_usage_in_bytes=str(50_000 * MB),
          memory_stat=f"total_inactive_file {30_000 * MB}")  # the root: the whole machine, page cache included
    return top


def v2(root: Path, own: str) -> Path:
    machine(root)
    (root / "proc/self/cgroup").write_text(f"0::{own}\n")
    (root / "proc/self/mountinfo").write_text("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n")
    top = root / "sys/fs/cgroup"
    write(top, memory_stat="inactive_file 0")  # (the root cgroup has no memory.max)
    return top


def test_v1_the_pods_own_limit_as_a_working_set_not_the_roots_usage(tmp_path: Path) -> None:
    """A pod limited to 2 GB that read 1.2 GB of data from disk: its page cache is not memory it lacks."""
    top = v1(tmp_path, "/kubepods/burstable/pod1/c1")
    pod = top / "kubepods/burstable/pod1"
    write(pod, memory_limit_in_bytes=str(2048 * MB), memory_usage_in_bytes=str(1800 * MB),
          memory_stat=f"inactive_file 0\ntotal_inactive_file {1200 * MB}")
    write(pod / "c1", memory_limit_in_bytes=NO_LIMIT_V1, memory_usage_in_bytes=str(1700 * MB),
          memory_stat=f"total_inactive_file {1200 * MB}")
    level = hostmem.tightest(tmp_path)
    assert level is not None and level.path == pod
    assert (level.limit_mb, level.used_mb, level.room_mb) == (2048, 600, 1448)
    assert hostmem.available_mb(tmp_path) == (1448, 2048)
    assert "kubepods/burstable/pod1 (limit 2048 MB)" in hostmem.where(tmp_path)


def test_v2_the_tightest_limit_up_the_tree_counts(tmp_path: Path) -> None:
    """A Slurm job's limit (4 GB) above its step's (6 GB, looser): the job's leaves the least room."""
    top = v2(tmp_path, "/system.slice/slurmstepd.scope/job_7/step_0")
    job = top / "system.slice/slurmstepd.scope/job_7"
    write(top / "system.slice", memory_max="max", memory_current=str(9000 * MB), memory_stat="inactive_file 0")
    write(top / "system.slice/slurmstepd.scope", memory_max="max", memory_current=str(3900 * MB),
          memory_stat="inactive_file 0")
    write(job, memory_max=str(4096 * MB), memory_current=str(3900 * MB), memory_stat=f"inactive_file {100 * MB}")
    write(job / "step_0", memory_max=str(6144 * MB), memory_current=str(3800 * MB),
          memory_stat=f"inactive_file {100 * MB}")
    level = hostmem.tightest(tmp_path)
    assert level is not None and level.path == job and level.room_mb == 4096 - 3800
    assert hostmem.available_mb(tmp_path) == (296, 4096)


def test_a_container_without_a_cgroup_namespace_reads_its_own_mount(tmp_path: Path) -> None:
    """Docker on v1 without cgroupns: /proc/self/cgroup names the host's path, the mount shows the container's
    cgroup at its top (mountinfo's root field)."""
    top = v1(tmp_path, "/docker/abc123", mount_root="/docker/abc123")
    write(top, memory_limit_in_bytes=str(1024 * MB), memory_usage_in_bytes=str(500 * MB),
          memory_stat=f"total_inactive_file {400 * MB}")
    assert hostmem.available_mb(tmp_path) == (924, 1024)


def test_no_limit_anywhere_is_the_machines_memory(tmp_path: Path) -> None:
    v1(tmp_path, "/user.slice")
    write(tmp_path / "sys/fs/cgroup/memory/user.slice", memory_limit_in_bytes=NO_LIMIT_V1,
          memory_usage_in_bytes=str(100 * MB), memory_stat="total_inactive_file 0")
    assert hostmem.tightest(tmp_path) is None
    assert hostmem.available_mb(tmp_path) == (60_000, 64_000) and hostmem.where(tmp_path) == "the machine"
    assert hostmem.available_mb(tmp_path / "nowhere") is None  # not Linux: nothing to read


def test_the_guard_does_not_call_page_cache_out_of_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod above, the trial grown by 500 MB: 1448 MB left is plenty (the 256 MB margin); the same pod whose
    usage is its own (no page cache) is short, and the guard says so naming the cgroup."""
    top = v1(tmp_path, "/kubepods/pod1")
    pod = top / "kubepods/pod1"
    write(pod, memory_limit_in_bytes=str(2048 * MB), memory_usage_in_bytes=str(1900 * MB),
          memory_stat=f"total_inactive_file {1500 * MB}")
    monkeypatch.setattr(hostmem, "rss_mb", lambda proc=None: 900.0)
    guard = watchdog.MemoryGuard(root=tmp_path)
    assert guard.exceeded(start_rss_mb=400.0) is None
    write(pod, memory_stat="total_inactive_file 0")
    assert guard.exceeded(start_rss_mb=400.0) == (
        f"host memory: 148 MB left available in cgroup {pod} (limit 2048 MB) (under the 256 MB safety margin) after "
        "the trial grew by 500 MB")


def test_one_worker_per_host_acts_on_memory_running_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers' trials both grew while the pod ran short: one is stopped (oom), the other goes on; once the first
    trial's claim is let go, the next may act."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    top = v1(tmp_path / "fs", "/kubepods/pod2")
    write(top / "kubepods/pod2", memory_limit_in_bytes=str(2048 * MB), memory_usage_in_bytes=str(1950 * MB),
          memory_stat="total_inactive_file 0")
    monkeypatch.setattr(hostmem, "rss_mb", lambda proc=None: 900.0)
    guard = watchdog.MemoryGuard(root=tmp_path / "fs")
    first, second = (watchdog.Watch(memory=guard) for _ in range(2))  # (their rules only: no handlers installed)
    t1, t2 = (watchdog._Trial(0.0, None, None, 100.0) for _ in range(2))
    why = first._why(t1)
    assert why is not None and why[0] == "oom"
    assert second._why(t2) is None  # the first worker acts: this one trains on
    assert t1.claim is not None
    t1.claim.release()
    why = second._why(t2)
    assert why is not None and why[0] == "oom"
