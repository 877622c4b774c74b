"""The machine a measurement ran on, and the process's peak memory: what `replay bench`
and `replay mrc --json` record beside their timings."""

from __future__ import annotations

import os
import platform
import resource


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine_description() -> str:
    """Processor, cores this process may use and physical memory, e.g. `x86_64, 2
    cores, 23 GiB`."""
    cores = usable_cores()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.processor() or platform.machine()}, {cores} cores, {mem_gib:.0f} GiB"


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


__all__ = ["machine_description", "peak_rss_bytes", "usable_cores"]
