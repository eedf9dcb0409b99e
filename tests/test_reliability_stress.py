"""Many processes, one store, faults injected all along: every result right, the store clean after.

``--stress-processes`` workers (started by fork, spawn and forkserver in turn, from
a parent that used the store first) each compile and call ``--stress-compiles``
graphs drawn at random from a handful, checking every value against PyTensor's
Python mode, while this process injects faults into the store they share:
evictions down to random sizes, damaged rewrite and graph records (a flipped bit,
a truncation, another entry's record swapped in), and writers killed (SIGKILL) at
a random checkpoint of a write. Then one more process compiles every graph, and
one no worker compiled (so that it writes, as any later process would), and
``numba-cache verify`` must find nothing wrong. The figures are printed (``-s``).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from pathlib import Path

import pytest
import reliability as rel
from reliability import Checkpoint, assert_correct, verify_problems

from numba_cache.store import CorruptEntry, record
from numba_cache.store.checkpoints import NAMES as CHECKPOINTS

GRAPHS = list(rel.EXPRESSIONS)
UNSEEN = "scale2"
#: What a worker may be told while faults are injected: a damaged record it met.
EXPECTED_WARNING = "ignoring the unreadable cache entry"
DAMAGES = [rel.flip_bit_in_payload, rel.flip_bit_in_summary, rel.truncate_half, rel.swap_in]


class FaultInjector:
    """Injects one fault at a time into the store at `root`, and counts them."""

    def __init__(self, root: Path, directory: Path, chooser: random.Random, max_victims: int):
        self.root = root
        self.directory = directory
        self.chooser = chooser
        self.max_victims = max_victims
        self.store = rel.open_store(root)
        self.counts: Counter = Counter()
        self.victims: list[tuple] = []  # writers to kill at a checkpoint, and that checkpoint

    def inject(self) -> None:
        self.kill_paused_writers()
        fault = self.chooser.choices(["evict", "damage", "victim"], weights=[5, 4, 1])[0]
        if fault == "victim" and self.counts["writers started"] < self.max_victims:
            self.start_a_victim()
        elif fault == "damage":
            self.damage_a_record()
        else:
            self.evict()

    def finish(self) -> None:
        while self.victims:
            self.kill_paused_writers()
            time.sleep(0.02)

    def evict(self) -> None:
        total = self.store.stats()["bytes"]
        evicted = self.store.evict_to(self.chooser.randrange(total // 2 + 1), timeout=5)
        self.counts["eviction passes"] += 1
        self.counts["entries evicted"] += len(evicted)

    def records(self, kinds: tuple[str, ...]) -> dict[Path, str]:
        """The records on disk of these kinds, each with its kind; damaged ones left out."""
        found = {}
        for path in self.root.glob("*/??/*.nbk"):
            with contextlib.suppress(OSError, CorruptEntry):
                entry = record.decode(path.read_bytes(), path.parent.parent.name, path.stem)
                if entry.kind in kinds:
                    found[path] = entry.kind
        return found

    def damage_a_record(self) -> None:
        # Op records are left alone: a process whose graph kernel loads never reads them,
        # so a damaged one could outlive the run, which verify would rightly report.
        records = self.records(("rewrite", "graph"))
        if not records:
            return
        path = self.chooser.choice(sorted(records))
        damage = self.chooser.choice(DAMAGES)
        others = [other for other, kind in records.items() if kind == records[path]]
        others.remove(path)
        if damage is rel.swap_in and not others:
            return
        with contextlib.suppress(FileNotFoundError):  # evicted or replaced meanwhile
            damage(path, self.chooser.choice(others) if others else path)
            self.counts["records damaged"] += 1

    def start_a_victim(self) -> None:
        """Remove a graph record and start a process compiling every graph, to be killed
        at a random checkpoint of its first write."""
        graphs = sorted(self.records(("graph",)))
        if graphs:
            path = self.chooser.choice(graphs)
            self.store.remove(path.parent.parent.name, path.stem)
        checkpoint = Checkpoint(self.directory, self.chooser.choice(CHECKPOINTS),
                                f"victim{self.counts['writers started']}")
        self.counts["writers started"] += 1
        self.victims.append((rel.start(GRAPHS, checkpoint.env), checkpoint))

    def kill_paused_writers(self) -> None:
        for victim, checkpoint in list(self.victims):
            if checkpoint.reached_file.exists():
                rel.kill(victim)
                self.counts["writers killed"] += 1
            elif victim.poll() is not None:  # the workers had put back all it needed
                assert_correct(rel.finish(victim))
            else:
                continue
            self.victims.remove((victim, checkpoint))


@pytest.mark.stress
@pytest.mark.slow
def test_many_processes_with_faults_injected_get_every_result_right(
    request, private_store, tmp_path
):
    processes = request.config.getoption("--stress-processes")
    compiles = request.config.getoption("--stress-compiles")
    chooser = random.Random(f"stress {processes} x {compiles}")
    started = time.monotonic()
    crowd = rel.start([str(processes), str(compiles), *GRAPHS], command="crowd")
    injector = FaultInjector(private_store, tmp_path, chooser, max_victims=max(2, processes // 2))
    while crowd.poll() is None:
        injector.inject()
        time.sleep(0.02)
    injector.finish()
    outcome = rel.finish(crowd)
    last = rel.run([*GRAPHS, UNSEEN])
    problems = verify_problems()

    reports = outcome["reports"]
    wrong = [name for report in reports for name in report["wrong"]]
    unexpected = [w for report in reports for w in report["warnings"] if EXPECTED_WARNING not in w]
    counters = rel.open_store(private_store).stats()["counters"]
    figures = {
        "processes": processes,
        "compiles": sum(report["compiles"] for report in reports) + len(GRAPHS) + 1,
        "start methods": Counter(rel.START_METHODS[n % 3] for n in range(processes)),
        "faults": dict(injector.counts),
        "corrupt records detected": counters.get("corrupt", 0),
        "graph compiles (misses)": counters.get("graph.miss", 0),
        "failures": {"crashed processes": sum(code != 0 for code in outcome["exitcodes"]),
                     "wrong results": len(wrong), "unexpected warnings": len(unexpected),
                     "verify problems": len(problems)},
        "seconds": round(time.monotonic() - started, 1),
    }
    print(f"\nstress run: {figures}")
    assert outcome["exitcodes"] == [0] * processes and len(reports) == processes, outcome
    assert wrong == [] and unexpected == [], (wrong, unexpected)
    assert_correct(last)
    assert problems == []
