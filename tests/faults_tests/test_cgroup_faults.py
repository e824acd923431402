"""Faults in what /proc says about this process's cgroup: a membership path with `..` (a cgroup namespace shows a
process outside its root as `/../..`; a hostile or broken /proc may say anything) must never lead the memory reading
outside the cgroup mount. Real folders laid out as /proc and /sys/fs/cgroup under a root, as the meters' tests do."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core import hostmem

MB = 2**20


def machine(root: Path, member: str) -> Path:
    """cgroup2 at /sys/fs/cgroup with a 4 GB limit on `/job`; folders outside the mount, one and two levels up, that
    look like cgroups with a 1 MB limit (what a path escaping the mount would read)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/meminfo").write_text(f"MemTotal: {64_000 * 1024} kB\nMemAvailable: {60_000 * 1024} kB\n")
    (root / "proc/self/cgroup").write_text(f"0::{member}\n")
    (root / "proc/self/mountinfo").write_text("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n")
    top = root / "sys/fs/cgroup"
    for d, limit in ((top, None), (top / "job", 4096 * MB), (root / "sys/fs/outside", MB), (root / "sys/outside", MB)):
        d.mkdir(parents=True, exist_ok=True)
        if limit is not None:
            (d / "memory.max").write_text(f"{limit}\n")
            (d / "memory.current").write_text(f"{limit // 2}\n")
        (d / "memory.stat").write_text("inactive_file 0\n")
    return top


@pytest.mark.parametrize("member", ["/../../outside", "/job/../../../outside", "/../outside", "/job/../../outside"])
def test_a_cgroup_path_that_escapes_the_mount_is_never_read(tmp_path: Path, member: str) -> None:
    """Today: joined unchecked, `/sys/fs/cgroup/../../outside` was read as this process's cgroup, and its 1 MB limit
    taken for the memory the trial may use. Now it is never read: the reading stays under the mount."""
    top = machine(tmp_path, member)
    found = hostmem.cgroup_dirs(tmp_path)  # (None here: the mount's top, where it falls back, has no limit file)
    dirs = found[1] if found is not None else []
    assert all(d == top or top in d.parents for d in dirs), dirs
    assert all(".." not in d.parts for d in dirs), dirs
    level = hostmem.tightest(tmp_path)
    assert level is None or level.limit_mb == 4096, level


def test_a_cgroup_path_with_dots_that_stays_inside_is_normalised(tmp_path: Path) -> None:
    top = machine(tmp_path, "/other/../job")
    level = hostmem.tightest(tmp_path)
    assert level is not None and level.path == top / "job" and level.limit_mb == 4096


def test_a_mount_root_matches_whole_path_components_only(tmp_path: Path) -> None:
    """A v1 mount whose top is `/job` and a process in `/jobless`: not `less` under the mount."""
    top = machine(tmp_path, "/jobless")
    (tmp_path / "proc/self/mountinfo").write_text("30 23 0:26 /job /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    (top / "less").mkdir()
    (top / "less/memory.max").write_text(f"{MB}\n")
    (top / "less/memory.current").write_text("0\n")
    found = hostmem.cgroup_dirs(tmp_path)
    assert found is None or top / "less" not in found[1]
