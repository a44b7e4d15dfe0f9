"""Resume fails closed (uedp/flower/resume.py): lost or inconsistent state is refused, never guessed around."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.flower.checkpoint import CHECKPOINT, load_checkpoint, save_checkpoint
from uedp.flower.resume import CHECKPOINT_HEAD, LEDGER, METRICS, ROW_HASH, ResumeError, resume_state
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
    """The reported failure: checkpoint present, ledger.json gone. Resuming from the checkpoint's own
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
    save_checkpoint(out, replace(ckpt, extra={**ckpt.extra, "z": ckpt.extra["z"] * 1.5}))
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


def _entry_point(cfg, out: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """experiments.run on `cfg` (as a user would run it), in `out`."""
    overrides = [f"{k}={json.dumps(v) if isinstance(v, str) and k.endswith('options') else 'null' if v is None else v}"
                 for k, v in cfg.to_flat().items() if not k.startswith("federation.out_dir")]
    dataset = json.loads(cfg.dataset.options)
    model = json.loads(cfg.model.options)
    overrides = [o for o in overrides if not o.startswith(("dataset.options", "model.options"))]
    overrides += [f"++dataset.options.{k}={v}" for k, v in dataset.items()]
    overrides += [f"++model.options.{k}={v}" for k, v in model.items()]
    return subprocess.run([sys.executable, "-m", "experiments.run", "runner=local", *overrides,
                           f"federation.out_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_entry_point_exits_with_status_2_on_a_refused_resume(finished, tmp_path):
    out = _copy(finished, tmp_path / "run", skip=(LEDGER,))
    proc = _entry_point(tiny_config(out, federation={"rounds": 5, "resume": True}), out, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ledger.json is missing" in proc.stderr
    assert json.loads((out / "error.json").read_text())["bad_input"]


# -- the ledger's hash chain at resume -----------------------------------------------------------------------
def _run(out: Path, rounds: int, *, every: int, resume: bool) -> dict:
    return run_local(tiny_config(out, federation={"rounds": rounds, "checkpoint_every": every, "resume": resume}))


def _ledger_json(out: Path) -> dict:
    return json.loads((out / LEDGER).read_text())


def test_the_vanished_round_reproduction_is_refused_naming_round_3(tmp_path):
    """The reported failure: 2 rounds (checkpoint at 2), resumed to 4, the round-2 checkpoint put back
    (the state after a crash following round 4), round 3 deleted from ledger.json, resumed to 6. Before the
    chain this printed "resuming after round 4" and exited 0 with rounds [1, 2, 4, 5, 6]; now the entry point
    exits 2 naming round 3 and nothing is written."""
    out = tmp_path / "run"
    _run(out, 2, every=2, resume=False)
    ckpt2 = (out / CHECKPOINT).read_bytes()
    _run(out, 4, every=2, resume=True)
    assert [r.round for r in Ledger.load(out / LEDGER).records] == [1, 2, 3, 4]
    (out / CHECKPOINT).write_bytes(ckpt2)
    data = _ledger_json(out)
    del data["rounds"][2]
    (out / LEDGER).write_text(json.dumps(data))
    (out / "summary.json").unlink()
    before = _state(out)
    proc = _entry_point(tiny_config(out, federation={"rounds": 6, "checkpoint_every": 2, "resume": True}), out,
                        tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "round 4 cannot follow round 2: round 3 is missing" in proc.stderr
    assert "resuming after" not in proc.stdout + proc.stderr
    _untouched(out, before)


@pytest.fixture(scope="module")
def four_rounds(tmp_path_factory) -> Path:
    """4 rounds, a checkpoint at round 2 and 4, and a copy of the folder after round 2 in ../after2."""
    root = tmp_path_factory.mktemp("chain")
    out = root / "run"
    _run(out, 2, every=2, resume=False)
    _copy(out, root / "after2")
    _run(out, 4, every=2, resume=True)
    return out


def _refused(out: Path, match: str, like: Path) -> None:
    """resume_state(out) refuses with `match` and changes nothing (delta and N: those of the run `like`)."""
    ledger = Ledger.load(like / LEDGER)
    before = _state(out)
    with pytest.raises(ResumeError, match=match):
        resume_state(out, delta=ledger.delta, num_users=ledger.num_users)
    _untouched(out, before)


def test_every_metrics_row_and_checkpoint_carry_the_chain_head(four_rounds):
    ledger = Ledger.load(four_rounds / LEDGER)
    rows = [json.loads(line) for line in (four_rounds / METRICS).read_text().splitlines()]
    assert [(r["round"], r[ROW_HASH]) for r in rows] == [(t, ledger.head_at(t).hash) for t in (1, 2, 3, 4)]
    ckpt = load_checkpoint(four_rounds)
    assert ckpt.round == 4 and ckpt.extra[CHECKPOINT_HEAD] == ledger.head.to_dict()
    assert all(r.noise == "secure" for r in ledger.records)  # the default noise of a private run, recorded


def test_a_re_chained_edit_of_round_3_is_refused_by_the_metrics_rows(four_rounds, tmp_path):
    """z and sigma of round 3 changed and the whole file re-chained consistently (the chain is unkeyed):
    metrics.jsonl's heads are the second copy that refuses it, naming round 3."""
    out = _copy(four_rounds, tmp_path / "run")
    ledger = Ledger.load(out / LEDGER)
    edited = [replace(r, z=r.z * 2) if r.round == 3 else r for r in ledger.records]
    Ledger(delta=ledger.delta, num_users=ledger.num_users, records=edited).save(out / LEDGER)
    _refused(out, r"metrics.jsonl line 3 \(round 3\): its ledger_hash is not ledger.json's hash after round 3",
             four_rounds)


def test_an_older_ledger_restored_over_a_newer_run_is_refused(four_rounds, tmp_path):
    out = _copy(four_rounds, tmp_path / "run")
    (out / LEDGER).write_bytes((four_rounds.parent / "after2" / LEDGER).read_bytes())
    _refused(out, "metrics.jsonl shows round 4 but ledger.json ends at round 2", four_rounds)
    # ... and with the metrics restored too, the newer checkpoint (round 4) refuses it
    (out / METRICS).write_bytes((four_rounds.parent / "after2" / METRICS).read_bytes())
    _refused(out, r"checkpoint \(round 4\) records round\(s\) \[3, 4\]", four_rounds)


def test_the_last_rounds_deleted_are_refused(four_rounds, tmp_path):
    out = _copy(four_rounds, tmp_path / "run", skip=(CHECKPOINT,))
    data = _ledger_json(out)
    data["rounds"] = data["rounds"][:3]
    (out / LEDGER).write_text(json.dumps(data))
    _refused(out, r"head is round 4 but its records end at round 3: round\(s\) 4..4 were deleted", four_rounds)
    data["head"] = {"round": 3, "hash": data["rounds"][-1]["hash"]}  # the head fixed by hand as well
    (out / LEDGER).write_text(json.dumps(data))
    _refused(out, "metrics.jsonl shows round 4 but ledger.json ends at round 3", four_rounds)


def test_a_checkpoint_without_or_with_another_head_is_refused(four_rounds, tmp_path):
    out = _copy(four_rounds, tmp_path / "run")
    ckpt = load_checkpoint(out)
    save_checkpoint(out, replace(ckpt, extra={"z": ckpt.extra["z"]}))
    _refused(out, r"the checkpoint \(round 4\): checkpoint.pt extra: the ledger head must be", four_rounds)
    other = Ledger.load(out / LEDGER).head_at(3).to_dict()
    save_checkpoint(out, replace(ckpt, extra={**ckpt.extra, CHECKPOINT_HEAD: other}))
    _refused(out, r"the checkpoint's ledger head \(round 3\) is not ledger.json's head after round 4", four_rounds)


def test_a_metrics_row_without_its_head_is_refused(four_rounds, tmp_path):
    out = _copy(four_rounds, tmp_path / "run")
    rows = [json.loads(line) for line in (out / METRICS).read_text().splitlines()]
    del rows[1][ROW_HASH]
    (out / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    _refused(out, r"metrics.jsonl line 2 \(round 2\) carries no ledger_hash", four_rounds)


def test_a_swapped_or_edited_saved_round_is_refused_on_resume(four_rounds, tmp_path):
    out = _copy(four_rounds, tmp_path / "run")
    data = _ledger_json(out)
    data["rounds"][1], data["rounds"][2] = data["rounds"][2], data["rounds"][1]
    (out / LEDGER).write_text(json.dumps(data))
    _refused(out, "round 3 cannot follow round 1", four_rounds)
    data = _ledger_json(four_rounds)
    data["rounds"][2]["beta"] = data["rounds"][2]["beta"] * 2
    data["rounds"][2]["sigma"] = data["rounds"][2]["sigma"] * 2
    (out / LEDGER).write_text(json.dumps(data))
    _refused(out, "round 3's hash does not match its record: round 3 was edited", four_rounds)
