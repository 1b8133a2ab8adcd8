"""A run's memory budget (TE_RUN_MEMORY) and the largest corpus file a run reads under it. Below the corpus reader
(core.data.corpus reads a file up to ``corpus_cap``) and the run's memory estimate (core.training.job_settings)."""
from __future__ import annotations

import os

from core.serve.fmt import binary_bytes
from core.serve.sizes import parse_size

DEFAULT_RUN_MEMORY = 2**30      # 1 GiB per run: up to MAX_RUNNING_JOBS of them on a class server's few GB
# The constants below are measured by bench/run_memory.py (bench/results/run-memory.md) on ten runs:
# a training process that has imported torch and our modules and trained the lecture's model a few steps on a
# small text, before its data and its model count
PROCESS_BYTES = 340 * 2**20
# the corpus inside the process, per character: the text and its two parts, the int64 token ids, and what
# learning and encoding them leaves behind
DATA_BYTES_PER_CHAR = 20


def memory_budget(value: str | None = None) -> int | None:
    """The memory one run may take, in bytes: ``value``, by default the environment's TE_RUN_MEMORY, else
    DEFAULT_RUN_MEMORY. None: no limit (TE_RUN_MEMORY=0). ValueError, saying so, when it is not a size."""
    value = os.environ.get("TE_RUN_MEMORY", "") if value is None else value
    if not str(value).strip():
        return DEFAULT_RUN_MEMORY
    try:
        budget = parse_size(value)
    except ValueError as e:
        raise ValueError(f"the server's TE_RUN_MEMORY setting is wrong: {e}") from None
    if 0 < budget < PROCESS_BYTES:  # most likely a unit left out: no run could ever start
        raise ValueError(f"the server's TE_RUN_MEMORY setting is wrong: {value!r} is {binary_bytes(budget)}, less than "
                         f"a training process takes before it trains ({binary_bytes(PROCESS_BYTES)}); write a unit, "
                         "e.g. 1G")
    return budget or None


def corpus_cap() -> tuple[int, str]:
    """(bytes, why in words): the largest corpus file a run reads, the text whose data alone (DATA_BYTES_PER_CHAR a
    character) would fill the memory a run may take beside its process: TE_RUN_MEMORY, or, where that sets no
    limit, the machine's memory. A file is read up to this cap and no further (a device like /dev/zero never
    ends). ValueError, saying so, when TE_RUN_MEMORY is not a size."""
    budget = memory_budget()
    where = f"the memory one run may take (TE_RUN_MEMORY, {binary_bytes(budget)})" if budget else None
    if budget is None:
        budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        where = f"this machine's memory ({binary_bytes(budget)})"
    cap = max(0, budget - PROCESS_BYTES) // DATA_BYTES_PER_CHAR
    return cap, (f"the most a run can hold in {where}: a training process keeps about {DATA_BYTES_PER_CHAR} bytes "
                 "a character")
