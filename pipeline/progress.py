"""Progress while the job runs: a log line per stage and Spark task counts for long stages.

Each stage logs ``[2/6] aggregate the trace by key and minute`` when it starts and
``[2/6] done in 3.1 s: ...`` when it ends. While a stage runs, a ticker thread asks Spark's
status tracker every few seconds and logs the active Spark stages' task counts
(``  spark stage 4: 5/8 tasks``), so a long read over a big trace visibly moves. The stage
name is also the Spark job description, so the Spark UI (when enabled) shows the same words.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext

log = logging.getLogger("leveret.pipeline")


class Progress:
    """Numbered stage log lines, with a task ticker while each stage runs."""

    def __init__(self, sc: SparkContext | None, stages: int, interval: float = 5.0) -> None:
        self.sc = sc
        self.stages = stages
        self.interval = interval
        self.current = 0
        self.timings: dict[str, float] = {}
        self._ticking = threading.Lock()  # held by the one ticker (stages may overlap)
        self._numbering = threading.Lock()

    @contextmanager
    def stage(self, name: str) -> Iterator[list[str]]:
        """Run one stage; append text to the yielded list to log it with the stage's end."""
        with self._numbering:
            self.current += 1
            tag = f"[{self.current}/{self.stages}]"
        log.info("%s %s", tag, name)
        if self.sc is not None:
            self.sc.setJobDescription(name)
        done: list[str] = []
        stop = threading.Event()
        ticker = None
        # Stages that run at the same time (the job counts and routes at once) share one
        # ticker: it lists every active Spark stage anyway.
        if self.sc is not None and self.interval > 0 and self._ticking.acquire(blocking=False):
            ticker = threading.Thread(
                target=self._tick, args=(stop,), name="leveret-progress", daemon=True
            )
            ticker.start()
        started = time.perf_counter()
        try:
            yield done
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
                self._ticking.release()
            elapsed = time.perf_counter() - started
            self.timings[name] = elapsed
            detail = f": {'; '.join(done)}" if done else ""
            log.info("%s done in %.1f s%s", tag, elapsed, detail)
            if self.sc is not None:
                self.sc.setJobDescription(None)  # type: ignore[arg-type]

    def _tick(self, stop: threading.Event) -> None:
        assert self.sc is not None
        tracker = self.sc.statusTracker()
        last = ""
        while not stop.wait(self.interval):
            try:
                parts = []
                for stage_id in sorted(tracker.getActiveStageIds()):
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        parts.append(
                            f"spark stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} "
                            f"tasks ({info.numActiveTasks} running)"
                        )
            except Exception as exc:  # noqa: BLE001 - progress must never fail the job
                log.debug("progress ticker: %s", exc)
                return
            line = "; ".join(parts)
            if line and line != last:
                log.info("    %s", line)
                last = line
