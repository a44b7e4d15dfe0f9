"""The overhead study's wall-clock round (studies/scaling.py `progress_seconds`): read from the progress lines a run
prints (server/metrics.py), so that code versions whose own round timers differ are compared on the same clock."""

from __future__ import annotations

import io
import time

from server.metrics import MetricsWriter
from studies.scaling import progress_seconds


def test_progress_seconds_is_the_median_gap_between_round_lines(tmp_path):
    stream = io.StringIO()
    writer = MetricsWriter(tmp_path, stream=stream)
    lines = []
    for rnd, elapsed in ((1, 8.4), (2, 14.5), (3, 18.3), (4, 23.6)):
        writer._t0 = time.monotonic() - elapsed  # the line's elapsed time, as a run would print it
        writer.progress(round=rnd, rounds=4, eps=("eps_uedp", 1.0), metric=None, extra="replies=3/3")
        lines.append(stream.getvalue().splitlines()[-1])
    log = tmp_path / "flwr-run.log"
    log.write_text("INFO: starting\n" + "\n".join(f"{x}\nINFO: between" for x in lines) + "\n")
    assert abs(progress_seconds(log) - 5.3) < 0.05  # gaps 6.1, 3.8, 5.3 (each printed to 0.1 s)
    assert progress_seconds(tmp_path / "missing.log") != progress_seconds(tmp_path / "missing.log")  # nan
