"""Resume fails closed (server/resume.py): lost or inconsistent state is refused, never guessed around."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.local_grid import run_local
from server.checkpoint import CHECKPOINT, load_checkpoint, save_checkpoint
from server.resume import LEDGER, METRICS, ResumeError, resume_state
from tests.helpers import tiny_config
from uedp.privacy.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A private run of 3 rounds with a checkpoint every round: ledger, checkpoint and metrics of round 3."""
    out = tmp_path_factory.mktemp("run")
    run_local(tiny_config(out, federation={"rounds": 3, "checkpoint_every": 1}))
    return out


def _copy(src: Path, dst: Path, *, skip: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for name in (LEDGER, CHECKPOINT, METRICS, "metrics.csv", "config.json"):
        if name not in skip and (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    return dst


def _resume(out: Path, rounds: int = 5):
    return run_local(tiny_config(out, federation={"rounds": rounds, "checkpoint_every": 1, "resume": True}))


def _untouched(out: Path, before: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name in before} == before
    assert not (out / "summary.json").exists()


def _state(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.name in (LEDGER, CHECKPOINT, METRICS)}


@pytest.mark.parametrize("skip, what", [((LEDGER,), "checkpoint.pt, metrics.jsonl"),
                                        ((LEDGER, METRICS, "metrics.csv"), "checkpoint.pt"),
                                        ((LEDGER, CHECKPOINT), "metrics.jsonl")])
def test_a_missing_ledger_beside_a_checkpoint_or_metrics_is_refused(finished, tmp_path, skip, what):
    """The issue's reproduction: checkpoint present, ledger.json gone. Resuming from the checkpoint's own
    ledger copy would forget the rounds charged after it, and an empty ledger would restart at round 1."""
    out = _copy(finished, tmp_path / "run", skip=skip)
    before = _state(out)
    with pytest.raises(ResumeError, match=f"ledger.json is missing but {what}"):
        _resume(out)
    _untouched(out, before)


def test_a_checkpoint_with_rounds_the_ledger_lacks_is_refused(finished, tmp_path):
    """An older ledger.json (2 rounds) beside the checkpoint of round 3."""
    out = _copy(finished, tmp_path / "run", skip=(METRICS, "metrics.csv"))
    ledger = Ledger.load(out / LEDGER)
    Ledger(delta=ledger.delta, num_users=ledger.num_users, records=ledger.records[:2]).save(out / LEDGER)
    before = _state(out)
    with pytest.raises(ResumeError, match=r"checkpoint \(round 3\) records round\(s\) \[3\]"):
        _resume(out)
    _untouched(out, before)


def test_a_checkpoint_recording_a_round_differently_is_refused(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    ckpt = load_checkpoint(out)
    copy = Ledger.from_dict(ckpt.ledger)
    altered = [replace(r, q_u=0.1) if r.round == 1 else r for r in copy.records]
    other = Ledger(delta=copy.delta, num_users=copy.num_users, records=altered).to_dict()
    save_checkpoint(out, replace(ckpt, ledger=other))
    with pytest.raises(ResumeError, match=r"records round\(s\) \[1\].*differently"):
        resume_state(out, delta=copy.delta, num_users=copy.num_users)


def test_metrics_beyond_the_ledger_are_refused(finished, tmp_path):
    out = _copy(finished, tmp_path / "run", skip=(CHECKPOINT,))
    ledger = Ledger.load(out / LEDGER)
    Ledger(delta=ledger.delta, num_users=ledger.num_users, records=ledger.records[:1]).save(out / LEDGER)
    with pytest.raises(ResumeError, match="metrics.jsonl shows round 3 but ledger.json ends at round 1"):
        resume_state(out, delta=ledger.delta, num_users=ledger.num_users)


def test_a_checkpoint_z_other_than_the_ledgers_is_refused(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    ckpt = load_checkpoint(out)
    save_checkpoint(out, replace(ckpt, extra={"z": ckpt.extra["z"] * 1.5}))
    ledger = Ledger.load(out / LEDGER)
    with pytest.raises(ResumeError, match="z ="):
        resume_state(out, delta=ledger.delta, num_users=ledger.num_users)


def test_a_run_with_another_z_than_the_saved_one_is_refused(finished, tmp_path):
    """z has one holder, the run's strategy: a resumed run whose z (injected here) is not the one the
    checkpoint and the ledger recorded is refused before it runs a round."""
    from server.setup import Components

    out = _copy(finished, tmp_path / "run")
    before = _state(out)
    z = Ledger.load(out / LEDGER).records[-1].z
    with pytest.raises(ResumeError, match="is not this run's z"):
        run_local(tiny_config(out, federation={"rounds": 5, "checkpoint_every": 1, "resume": True}),
                  components=Components(noise_multiplier=z * 1.5))
    _untouched(out, before)


def test_consistent_state_resumes_with_the_ledgers_z(finished, tmp_path):
    """The sound path: the run continues after the ledger's last round, with the z the ledger recorded
    (not recalibrated), and an empty folder is a fresh start."""
    out = _copy(finished, tmp_path / "run")
    z = Ledger.load(out / LEDGER).records[-1].z
    s = _resume(out, rounds=4)
    rounds = Ledger.load(out / LEDGER).records
    assert [r.round for r in rounds] == [1, 2, 3, 4] and s["rounds"] == 4
    assert rounds[-1].z == z == s["noise_multiplier"]
    fresh = resume_state(tmp_path / "empty", delta=1e-3, num_users=8)
    assert fresh.next_round == 1 and fresh.checkpoint is None and fresh.z is None


def test_the_entry_point_exits_with_status_2_on_a_refused_resume(finished, tmp_path):
    out = _copy(finished, tmp_path / "run", skip=(LEDGER,))
    cfg = tiny_config(out, federation={"rounds": 5, "resume": True})
    overrides = [f"{k}={json.dumps(v) if isinstance(v, str) and k.endswith('options') else v}"
                 for k, v in cfg.to_flat().items() if not k.startswith("federation.out_dir")]
    dataset = json.loads(cfg.dataset.options)
    model = json.loads(cfg.model.options)
    overrides = [o for o in overrides if not o.startswith(("dataset.options", "model.options"))]
    overrides += [f"++dataset.options.{k}={v}" for k, v in dataset.items()]
    overrides += [f"++model.options.{k}={v}" for k, v in model.items()]
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "runner=local", *overrides,
                           f"federation.out_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ledger.json is missing" in proc.stderr
    assert json.loads((out / "error.json").read_text())["bad_input"]
