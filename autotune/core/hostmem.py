"""How much host memory this process may still take: the machine's, and its own cgroup's (v1 and v2).

The kernel's OOM killer acts on a cgroup's limit, so that is the memory a pod (Kubernetes), a Slurm job or a
systemd unit really has. Three things make a naive reading wrong, and each is handled here:
- the cgroup is the process's own (`/proc/self/cgroup`, found under its mount in `/proc/self/mountinfo`), not the
  hierarchy's root (which has no limit, and holds every process on the machine);
- usage is read as a working set, usage minus `inactive_file`: the page cache of files read once (a dataset) is
  counted in a cgroup's usage but is reclaimed before the OOM killer acts (the figure kubelet and cAdvisor use);
- the limit may sit on any level above the process's cgroup (a job's limit above its steps', a pod's above its
  containers'): each level's room is its limit minus its working set, and the tightest counts.

Every reading takes `root` (default "/"): a test builds a fake /proc and /sys/fs/cgroup under a folder, as the
meters' tests fake /proc.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core import locks

NO_LIMIT = 2**60  # v1 writes "no limit" as a huge number (9223372036854771712)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _stat_value(path: Path, key: str) -> int:
    """One counter of a cgroup's memory.stat (0 when absent)."""
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def meminfo_mb(key: str, root: Path = Path("/")) -> float | None:
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1]) / 1024
    return None


def rss_mb(proc: Path = Path("/proc/self")) -> float | None:
    """This process's resident memory (Linux; None elsewhere)."""
    statm = _read(proc / "statm")
    if not statm:
        return None
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# ---------------------------------------------------------------- the process's own cgroup


@dataclass(frozen=True)
class Mount:
    version: int  # 1 or 2
    point: Path  # where it is mounted (under `root`)
    root: str  # the cgroup path the mount shows at its top (not "/" inside some containers)


def _mounts(root: Path) -> list[Mount]:
    """The cgroup2 mount and the v1 mounts of the memory controller, from /proc/self/mountinfo."""
    out = []
    for line in (_read(root / "proc/self/mountinfo") or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        point = root / fields[4].lstrip("/")
        if fstype == "cgroup2":
            out.append(Mount(2, point, fields[3]))
        elif fstype == "cgroup" and "memory" in options:
            out.append(Mount(1, point, fields[3]))
    return out


def _memberships(root: Path) -> dict[int, str]:
    """This process's cgroup path per hierarchy: {2: v2's path, 1: the v1 memory controller's}."""
    out: dict[int, str] = {}
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            out.setdefault(2, path)
        elif "memory" in controllers.split(","):
            out[1] = path
    return out


def cgroup_dirs(root: Path = Path("/")) -> tuple[int, list[Path]] | None:
    """(cgroup version, the memory cgroup directories from this process's own up to its mount's top), or None
    where there is none to read (not Linux, no cgroup mounted). The v1 memory controller, where it is mounted,
    is the one that limits (a hybrid machine has both); else v2's."""
    member = _memberships(root)
    for mount in sorted(_mounts(root), key=lambda m: m.version):
        path = member.get(mount.version)
        if path is None:
            continue
        own = _under(mount, path)
        if own is None or not own.is_dir():  # a container whose cgroup is mounted at its own top, without a cgroup
            own = mount.point  # namespace; or a path that is not under the mount (a namespace shows `/..` for one)
        dirs = [own, *[p for p in own.parents if p == mount.point or mount.point in p.parents]]
        limit_file = "memory.max" if mount.version == 2 else "memory.limit_in_bytes"
        if any((d / limit_file).exists() for d in dirs):
            return mount.version, dirs
    return None


def _parts(path: str) -> list[str] | None:
    """A cgroup path's components with `.` and `..` resolved; None when a `..` climbs above its top."""
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(part)
    return out


def _under(mount: Mount, path: str) -> Path | None:
    """The folder of cgroup `path` (from /proc/self/cgroup) under `mount`, or None where it is not below the mount's
    top: a `..` that climbs out, or a cgroup outside the mount's root (whole components: `/jobless` is not under
    `/job`). /proc's text is joined only once resolved, so a reading never leaves the mount."""
    parts, top = _parts(path), _parts(mount.root)
    if parts is None or top is None or parts[:len(top)] != top:
        return None
    return mount.point.joinpath(*parts[len(top):])


@dataclass(frozen=True)
class Level:
    """One cgroup level with a memory limit: its directory, the limit, and its working set (MB)."""

    path: Path
    limit_mb: float
    used_mb: float

    @property
    def room_mb(self) -> float:
        return self.limit_mb - self.used_mb


def _level(version: int, d: Path) -> Level | None:
    if version == 2:
        limit, usage, inactive = _read(d / "memory.max"), _read(d / "memory.current"), "inactive_file"
    else:  # (v1's total_ counters are the level's and its children's, as its usage is)
        limit, usage, inactive = _read(d / "memory.limit_in_bytes"), _read(d / "memory.usage_in_bytes"), \
            "total_inactive_file"
    if not (limit and usage and limit.isdigit() and usage.isdigit()) or int(limit) >= NO_LIMIT:
        return None  # "max" (v2), the huge "none" (v1), or unreadable
    working = max(0, int(usage) - _stat_value(d / "memory.stat", inactive))
    return Level(d, int(limit) / 2**20, working / 2**20)


def tightest(root: Path = Path("/")) -> Level | None:
    """The level of this process's cgroup tree that leaves it the least memory (None: no limit anywhere)."""
    found = cgroup_dirs(root)
    if found is None:
        return None
    version, dirs = found
    levels = [lv for lv in (_level(version, d) for d in dirs) if lv is not None]
    return min(levels, key=lambda lv: lv.room_mb) if levels else None


def available_mb(root: Path = Path("/")) -> tuple[float, float] | None:
    """(memory this process may still take, the total it may use): the machine's MemAvailable, or what the
    tightest cgroup limit above it leaves when less. None where neither can be read (not Linux)."""
    avail, total = meminfo_mb("MemAvailable", root), meminfo_mb("MemTotal", root)
    if avail is None or total is None:
        return None
    level = tightest(root)
    if level is not None:
        avail, total = min(avail, level.room_mb), min(total, level.limit_mb)
    return max(0.0, avail), total


def where(root: Path = Path("/")) -> str:
    """Which memory the figures above are: the machine's, or a cgroup's (for one-line messages)."""
    level = tightest(root)
    return "the machine" if level is None else f"cgroup {level.path} (limit {level.limit_mb:.0f} MB)"


MARGIN_MB = 256.0  # host memory kept free at least (or 5% of the memory this process may use, if more)

@dataclass(frozen=True)
class MemoryGuard:
    """When a trial's process takes too much host memory: over `max_rss_mb` (None: no cap of its own), or
    leaving less than the safety margin available (the machine's, or the tightest cgroup limit above this process,
    read as a working set: above) while the trial itself grew by more than that margin (memory running short
    because of others is not this trial's doing). Of several workers on one host that see memory run short, one
    acts at a time (`claim`): the others carry on while its trial ends and frees memory. `root`: the file
    system root the readings start from (None: "/"; tests give a fake one)."""

    max_rss_mb: float | None = None
    root: Any = None  # a pathlib.Path; None: "/"

    def _root(self) -> Any:
        from pathlib import Path

        return Path("/") if self.root is None else self.root

    def exceeded(self, start_rss_mb: float) -> str | None:
        rss = rss_mb(self._root() / "proc/self")
        if rss is None:
            return None
        if self.max_rss_mb is not None and rss > self.max_rss_mb:
            return f"host memory: the process holds {rss:.0f} MB, over pruning.max_host_memory_mb {self.max_rss_mb:g}"
        if rss - start_rss_mb <= MARGIN_MB:
            return None  # (the margin is never less: no need to read the machine's and the cgroups' memory)
        room = available_mb(self._root())
        if room is None:
            return None
        margin = max(MARGIN_MB, 0.05 * room[1])
        if room[0] < margin and rss - start_rss_mb > margin:
            return (f"host memory: {room[0]:.0f} MB left available in {where(self._root())} (under the "
                    f"{margin:.0f} MB safety margin) after the trial grew by {rss - start_rss_mb:.0f} MB")
        return None

    def claim(self) -> locks.Claim | None:
        """This host's turn to act on memory running short (None: another worker's trial is acting on it)."""
        level = tightest(self._root())
        return locks.try_claim(str(level.path) if level is not None else "host", "memory")



__all__ = ["MARGIN_MB", "Level", "MemoryGuard", "available_mb", "cgroup_dirs", "meminfo_mb", "rss_mb", "tightest",
           "where"]
