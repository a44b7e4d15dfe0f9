"""Real separate Flower processes on loopback (runtime/federation.py): a SuperLink, SuperNodes and
`flwr run`, insecure and over TLS with SuperNode authentication (only registered nodes join), and with
faults (a client that raises, one that hangs past the round time-out, a SuperNode killed mid-run: the
fault-injecting study app, studies/fault_app.py, submitted in place of the project's). Every process started
is stopped by process id afterwards."""

from __future__ import annotations

import contextlib
import csv
import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from runtime.federation import executable, federation
from runtime.tls import make_certificates
from studies.fault_app import FAULT_APP
from tests.helpers import operator_rows


def test_flower_executables_are_installed_beside_this_interpreter():
    """flwr is a dependency: its executables are found (next to sys.executable first, where the venv puts them,
    then on PATH) or this fails; the tests below are never skipped for want of them, and a missing one is an
    installation error that says where it was looked for."""
    for tool in ("flower-superlink", "flower-supernode", "flwr"):
        found = Path(executable(tool))
        assert found.name == tool and found.is_file(), found
    with pytest.raises(FileNotFoundError, match=r"no-such-flower-tool not found next to .* or on PATH; install flwr"):
        executable("no-such-flower-tool")


TINY = {
    "dataset.options": json.dumps({"num_users": 6, "min_sentences": 20, "max_sentences": 25}),
    "tokenizer.vocab_size": 300, "model.options": json.dumps({"emb_dim": 16, "hidden_dim": 16}),
    "privacy.q_u": 1.0, "privacy.delta": 1e-3, "privacy.target_epsilon": 6.0,
    "federation.eval_every": 2, "federation.wait_timeout": 90.0, "federation.round_timeout": 90.0,
}


def _overrides(out: Path, nodes: int, **extra) -> dict:
    return {**TINY, "privacy.m_max": nodes, "federation.num_nodes": nodes, "federation.rounds": 2,
            "federation.out_dir": str(out), **extra}


def _events(out: Path) -> list[dict]:
    """Every line of the run's operator log but its note (rounds and events such as the start)."""
    lines = (out / "operator.jsonl").read_text().splitlines()[1:]
    return [json.loads(x) for x in lines if x.strip()]


def _rounds(out: Path) -> list[dict[str, float]]:
    """Each round's counts, from the run's operator log (operator.jsonl: never the ServerApp's output)."""
    return operator_rows(out)


def _assert_all_stopped(fed) -> None:
    assert fed.procs, "nothing was started"
    assert fed.alive() == [], f"processes left running: {fed.alive()}"


@pytest.mark.e2e
def test_three_supernodes_two_rounds(tmp_path):
    """Corpus mode on real processes under SuperNode authentication: the place map is the nodes' registered
    keys (runtime.federation), and the run is private; the ServerApp's output holds no count of replies."""
    out = tmp_path / "run"
    with federation(3, tmp_path / "home", auth=True) as fed:
        rc = fed.run(_overrides(out, 3), timeout=400)
    _assert_all_stopped(fed)
    log = (tmp_path / "home" / "logs" / "flwr-run.log").read_text()
    assert rc == 0, log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["population"] == 3 and summary["private"]
    assert "replies=" not in log and "'missing'" not in log  # the counts are the operator log's
    assert "uedp (uedp): z=" in log  # the wrapper's set-up line reaches `flwr run`'s output
    assert 0 < summary["eps_uedp"] <= 6.0 and summary["final"]["perplexity"] < summary["initial"]["perplexity"] * 2
    rounds = _rounds(out)
    assert [r["sampled"] for r in rounds] == [3.0, 3.0]  # q_u = 1: all three real nodes, every round
    assert [r["replies"] for r in rounds] == [3.0, 3.0]


@pytest.mark.e2e
def test_a_lora_round_through_real_supernodes(tmp_path):
    """One UeDP round of a Hugging Face checkpoint (a tiny Llama-style one) with LoRA through real SuperNodes:
    each node loads the public base from the directory itself, checks its digest against the one each message
    carries, and sends only its adapters; the release is the adapter (docs/own-model.md)."""
    from tests.tiny_checkpoints import tiny_checkpoint

    base = tiny_checkpoint(tmp_path / "llama", "llama")
    out = tmp_path / "run"
    with federation(2, tmp_path / "home") as fed:
        rc = fed.run(_overrides(out, 2, **{"model.name": "hf", "model.options": json.dumps({"path": str(base)}),
                                           "model.lora.r": 4, "federation.rounds": 1, "federation.eval_every": 1}),
                     timeout=400)
    _assert_all_stopped(fed)
    assert rc == 0, (tmp_path / "home" / "logs" / "flwr-run.log").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["base_model"]["lora"]["r"] == 4 and summary["trainable_share"] < 0.1
    # without --auth: places by node order, the explicit opt-in runtime.federation sets, and the run says so
    assert not summary["private"] and "places by node order" in summary["warning"]
    assert _rounds(out)[0]["replies"] == 2.0  # both nodes trained on their own copy of the base
    assert (out / "hf_adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.e2e
def test_owners_keep_their_files_and_only_registered_nodes_join(tmp_path):
    """Three data owners, each with its own JSONL file in its own directory (and its own cache directory:
    its own disk), the server with none, over TLS with SuperNode authentication (--auth): the registered
    nodes run a private run to the end, also after a SuperLink restart (registrations are kept in its
    --database file), while a SuperNode without a key and one with a valid but never registered key are
    refused, exit, and are never counted. The server's disk ends up holding the public tokenizer only. Then
    the same owners run DP-BART (strategy=dp_bart) with a saved public rewriter: rewrites only reach the
    server (_dp_bart_owners; one test, so the federation and the owners' prepared data are set up once)."""
    import sqlite3
    import subprocess
    import time

    from runtime.federation import Owners
    from runtime.tls import make_node_keys
    from uedp.owner_files import write_owner_files

    out = tmp_path / "run"
    home = tmp_path / "home"
    small = {"min_sentences": 20, "max_sentences": 25}
    write_owner_files(tmp_path / "owners", dataset="synthetic", options={"num_users": 3, **small})
    evaluation = write_owner_files(tmp_path / "eval", dataset="synthetic", splits=("test",),
                                   options={"num_users": 1, "seed": 7, **small})[0]
    owners = Owners.from_dir(tmp_path / "owners", tmp_path)
    overrides = {**_overrides(out, 3), **owners.overrides(), "entities.detector": "rules",
                 "federation.eval_data": str(evaluation)}
    with federation(3, home, auth=True, node_config=owners.node_config(), env=owners.env()) as fed:
        # the SuperLink speaks TLS with a certificate valid for 127.0.0.1 under our CA
        ctx = ssl.create_default_context(cafile=str(fed.certs.ca))
        with socket.create_connection(("127.0.0.1", fed.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:  # (start() waited until it listens)
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert "--enable-supernode-auth" in fed._link_argv and len(fed.keys) == 3
        assert all(k.private.stat().st_mode & 0o777 == 0o600 for k in fed.keys.values())
        # two uninvited owners: no key (self-registration is refused), and a valid key nobody registered
        stranger = make_node_keys(tmp_path / "stranger", ["stranger"])[0]
        fed.start_node(3, name="intruder-nokey", extra_args=["--max-retries", "1"])
        fed.start_node(4, name="intruder-key", key=stranger, extra_args=["--max-retries", "1"])
        refused = {"intruder-nokey": "[code: 2001]", "intruder-key": "[code: 2004] Failed to activate SuperNode"}
        for name, why in refused.items():
            try:
                rc = fed.procs[name].wait(timeout=90)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} was not refused: {(home / 'logs' / f'{name}.log').read_text()[-2000:]}")
            assert rc != 0 and why in (home / "logs" / f"{name}.log").read_text()
        # the registrations survive a restart of the SuperLink (same --database), and the nodes reconnect
        fed.restart_superlink()  # SIGKILL, then the same argv
        t0 = time.monotonic()
        rc = fed.run(overrides, timeout=400)
        run_s = time.monotonic() - t0
        run_log = (home / "logs" / "flwr-run.log").read_text()  # (each run writes its own)
        # the same owners, nodes and SuperLink, now under local DP (strategy=dp_bart): see _dp_bart_owners
        dp_bart = _dp_bart_owners(fed, owners, evaluation, tmp_path) if rc == 0 else None
    _assert_all_stopped(fed)
    assert rc == 0, run_log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["population"] == 3 and summary["private"]
    assert summary["tokenizer"]["source"] == "public" and "perplexity" in summary["final"]
    assert "starting when every invited owner is connected" in run_log  # one line, whoever came
    started = [r for r in _events(out) if r.get("event") == "start"]
    assert started[-1]["connected"] == 3  # the SuperLink's node list held the three invited nodes only
    rounds = _rounds(out)
    assert [r["sampled"] for r in rounds] == [3.0, 3.0] and [r["replies"] for r in rounds] == [3.0, 3.0]
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:  # Flower 1.42's LinkState schema
        assert db.execute("SELECT COUNT(*) FROM node").fetchone()[0] == 3
    config = (home / "config.toml").read_text()
    assert "insecure" not in config and "root-certificates" in config
    # each owner prepared only its own file, on its own disk; the server holds no private text at all
    server = {p.relative_to(owners.server_cache).parts[0] for p in owners.server_cache.rglob("*") if p.is_file()}
    assert server == {"tokenizers"}
    for f in owners.files:
        cached = [p.name for p in (f.parent / "cache" / "owners").glob("data-*.pt")]
        annotated = list((f.parent / "cache" / "annotations").glob("*.parquet"))
        assert len(cached) == 1 and len(annotated) == 1, f
    print(f"auth run after restart: {run_s:.1f} s")
    dp_bart()  # its checks, once every process is stopped


DOCUMENTS = 5  # rewrite.max_documents of the DP-BART owners' run: each owner rewrites at most this many sentences


def _tiny_rewriter(directory: Path) -> str:
    """A tiny clv rewriter trained on the synthetic generator's public text (no owner's text), saved; its digest."""
    from uedp.data.synthetic import public_texts
    from uedp.rewriting.model import RewriterConfig
    from uedp.rewriting.rewrite import rewriter_digest
    from uedp.rewriting.training import train_rewriter

    config = RewriterConfig(kind="bart", d_model=32, layers=1, heads=2, ffn=64, vocab_size=500, dropout=0.0,
                            mask_prob=0.0, batch_size=32, steps=40, eval_every=40, valid_sentences=20)
    sentences = public_texts()[:120]
    rewriter = train_rewriter(sentences, config, valid=sentences[:20], public="synthetic public text (test)",
                              progress=False)
    rewriter.save(directory)
    return rewriter_digest(rewriter)


def _dp_bart_owners(fed, owners, evaluation: Path, tmp_path: Path):
    """strategy=dp_bart with the owners' own files: each node rewrites its own file with a saved public rewriter
    (rewrite.rewriter = PATH: a tiny one trained here, so no node trains the full BART), the server receiving
    rewrites only. Returns the checks, run once the processes are stopped: the server's record names the
    rewriter by its digest, each owner's rewrites stay cached on its own disk and are none of its sentences,
    and the server's disk (its cache and the run's files) holds none of the owners' sentences."""
    from uedp.data.jsonl import load_jsonl

    digest = _tiny_rewriter(tmp_path / "rewriter")
    out = tmp_path / "dp_bart"
    labels = sorted({json.loads(line)["label"] for f in owners.files for line in f.read_text().splitlines()})
    rc = fed.run({**_overrides(out, len(owners.files)), **owners.overrides(), "strategy.name": "dp_bart",
                  "task.name": "classification", "task.labels": ",".join(labels), "entities.detector": "rules",
                  "rewrite.rewriter": str(tmp_path / "rewriter"), "rewrite.epsilon": 500.0,
                  "rewrite.label_epsilon": 2.0, "rewrite.max_documents": DOCUMENTS, "rewrite.epochs": 1,
                  "federation.eval_data": str(evaluation)}, timeout=400)
    log = (fed.home / "logs" / "flwr-run.log").read_text()

    def check() -> None:
        assert rc == 0, log[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["strategy"] == "dp_bart" and summary["private"] and summary["eps_local_document"] == 500.0
        local = json.loads((out / "local_dp.json").read_text())
        assert local["rewriter_digest"] == digest and local["rewriter_path"] == str(tmp_path / "rewriter")
        assert local["public_text"] == "synthetic public text (test)" and local["documents_per_user"] == DOCUMENTS
        with (out / "metrics.csv").open() as f:
            query = next(r for r in csv.DictReader(f) if r["round"] == "0")
        assert (query["replies"], query["documents"]) == ("3", str(3 * DOCUMENTS))
        originals: set[str] = set()
        for f in owners.files:
            mine = set(load_jsonl(path=f).table.column("text").to_pylist())  # its documents: one per sentence
            originals |= mine
            cached = list((f.parent / "cache" / "rewrites").glob("*.json"))
            assert len(cached) == 1, f
            sent = json.loads(cached[0].read_text())["texts"]
            assert len(sent) == DOCUMENTS and not set(sent) & mine
        server_files = [p for d in (owners.server_cache, out) for p in d.rglob("*") if p.is_file()]
        assert {p.relative_to(owners.server_cache).parts[0] for p in server_files
                if owners.server_cache in p.parents} == {"tokenizers"}  # the public tokenizer only
        texts = "\n".join(p.read_bytes().decode("utf-8", "ignore") for p in server_files)
        leaked = [s for s in originals if len(s) > 20 and s in texts]
        assert leaked == [], leaked[:3]

    return check


@pytest.mark.e2e
def test_faults_raise_hang_and_killed_supernode(tmp_path):
    """Node 0 raises, node 1 hangs past the round time-out (the fault app's mod, node config `fault`), node 3 is
    SIGKILLed after round 1. Every round ends, each failure is counted, training goes on, and the ledger charges
    every round exactly once."""
    out = tmp_path / "run"
    faults = {0: {"fault": "raise"}, 1: {"fault": "hang:75"}}
    killed: list[int] = []
    with federation(4, tmp_path / "home", node_config=faults, client_app=FAULT_APP) as fed:
        def on_round(r: int) -> None:
            if r == 1 and not killed:
                fed.kill("supernode-3")
                killed.append(r)

        rc = fed.run(_overrides(out, 4, **{"federation.rounds": 2, "federation.round_timeout": 30.0,
                                          "federation.eval_every": 2}), timeout=500, on_round=on_round)
    _assert_all_stopped(fed)
    assert killed == [1]
    assert rc == 0, (tmp_path / "home" / "logs" / "flwr-run.log").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and "places by node order" in summary["warning"]  # no --auth: labelled
    rounds = _rounds(out)
    assert len(rounds) == 2
    for r in rounds:  # every sampled user is accounted for: a reply, an error reply, or missing
        assert r["replies"] + r["failed"] + r["missing"] == r["sampled"]
    assert all(r["failed"] >= 1 for r in rounds)  # node 0 raises every round
    assert rounds[0]["missing"] >= 1  # node 1 hangs past the time-out
    # ... and node 3 was killed: it never answers again (missing at first; once the SuperLink marks the node
    # offline, an error reply)
    assert all(r["failed"] + r["missing"] == 3 for r in rounds[1:])
    assert all(r["replies"] == 1 for r in rounds[1:])  # training goes on with the healthy node 2
    ledger = json.loads((out / "ledger.json").read_text())
    charged = [rec["round"] for rec in ledger["rounds"]]
    assert charged == [1, 2]
    assert summary["eps_uedp"] <= 6.0 + 1e-6


def test_certificates_have_loopback_san_and_private_keys(tmp_path):
    import ipaddress

    from cryptography import x509

    certs = make_certificates(tmp_path / "c", hosts=("127.0.0.1", "localhost"))
    cert = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.issuer == ca.subject and cert.issuer != cert.subject
    cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    assert certs.key.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match="at least one host"):
        make_certificates(tmp_path / "d", hosts=())


def test_node_keys_are_openssh_ecdsa_flower_accepts(tmp_path, capsys):
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

    from runtime.tls import make_node_keys

    keys = make_node_keys(tmp_path / "k", ["owner-0", "owner-1"])
    for k in keys:
        priv = load_ssh_private_key(k.private.read_bytes(), None)  # what flower-supernode loads
        pub = load_ssh_public_key(k.public.read_bytes())  # what flwr supernode register loads
        assert isinstance(priv, ec.EllipticCurvePrivateKey) and priv.curve.name == "secp384r1"
        assert priv.public_key().public_numbers() == pub.public_numbers()
        assert k.private.stat().st_mode & 0o777 == 0o600
        assert k.public.read_text().startswith("ecdsa-sha2-nistp384 ")
    assert keys[0].public.read_bytes() != keys[1].public.read_bytes()
    with pytest.raises(ValueError, match="key names"):
        make_node_keys(tmp_path / "k", ["../x"])
    # the CLI: `keys OUT NAME...`, and the certificate form `OUT HOST...` as before
    def tls(*args: str) -> str:  # the command, as docs/deployment.md runs it
        proc = subprocess.run([sys.executable, "-m", "experiments.tls", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parents[1], check=True)
        return proc.stdout

    out = tls("keys", str(tmp_path / "cli"), "a", "b")
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["a.key", "a.pub", "b.key", "b.pub"]
    tls(str(tmp_path / "certs"), "127.0.0.1")
    assert (tmp_path / "certs" / "server.pem").is_file() and "a.key" in out


@pytest.mark.e2e
def test_server_killed_mid_run_and_resumed(tmp_path):
    """SIGKILL the SuperLink (and the ServerApp process it runs) after round 2 of 4, start it again and
    submit the run with federation.resume: it continues from the last checkpoint with the same ledger, no
    round is charged twice, and no model newer than the ledger ever existed on disk."""
    from uedp.flower.checkpoint import load_checkpoint

    out = tmp_path / "run"
    cfg = _overrides(out, 3, **{"federation.rounds": 4, "federation.checkpoint_every": 1})
    state: dict[str, int] = {}
    with federation(3, tmp_path / "home") as fed:
        def on_round(r: int) -> None:
            if r == 2 and "killed" not in state:
                fed.kill("superlink")  # the whole process group: SuperLink and ServerApp
                state["killed"] = r

        rc = fed.run(cfg, timeout=300, on_round=on_round)
        assert state.get("killed") == 2 and rc != 0
        charged = [rec["round"] for rec in json.loads((out / "ledger.json").read_text())["rounds"]]
        ckpt = load_checkpoint(out)
        assert charged == list(range(1, len(charged) + 1)) and len(charged) >= 2
        assert ckpt is not None and ckpt.round <= charged[-1]  # the model on disk is accounted for
        assert not (out / "summary.json").exists()

        fed.restart_superlink()
        rc = fed.run({**cfg, "federation.resume": True}, timeout=400)
    _assert_all_stopped(fed)
    assert rc == 0, (tmp_path / "home" / "logs" / "flwr-run.log").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 4
    final = [rec["round"] for rec in json.loads((out / "ledger.json").read_text())["rounds"]]
    assert final == [1, 2, 3, 4]  # every round charged exactly once, across the crash
    assert "resuming after round" in (tmp_path / "home" / "logs" / "flwr-run.log").read_text()


@pytest.mark.e2e
def _process_report(pid: int, pids: list[int]) -> str:
    """The command's status, its threads and live descendants, and which reported processes are alive."""
    try:
        me = psutil.Process(pid)
        kids = [f"{c.pid} {c.name()} {c.status()}" for c in me.children(recursive=True)]
        head = f"command {pid} {me.status()} threads={me.num_threads()} children={kids}"
    except psutil.NoSuchProcess:
        head = f"command {pid} gone (something else holds its stdout pipe)"
    live = [p for p in pids if psutil.pid_exists(p)]
    return f"{head}; reported processes alive: {live}"


def test_interrupted_command_stops_every_process(tmp_path):
    """SIGTERM to `python -m experiments.federation` while the run is under way: every SuperLink and
    SuperNode process it printed is gone afterwards (stopped by process id, not left to the OS)."""
    import re
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.federation", "--nodes", "2", "--out", str(tmp_path / "fed"),
         "-c", f"dataset.options={json.dumps(TINY['dataset.options'])}", "-c", "federation.rounds=50"],
        cwd=Path(__file__).parents[1], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    pids: list[int] = []
    for line in proc.stdout:
        if line.startswith("SuperLink on"):
            pids = [int(p) for p in re.findall(r"=(\d+)", line)]
            break
    assert len(pids) == 3, "the command did not report its processes"
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # seen once under load: say what still ran, then clean up
        state = _process_report(proc.pid, pids)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.communicate()
        pytest.fail(f"the command did not exit within 60 s of SIGTERM: {state}")

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # a zombie has exited
        except psutil.NoSuchProcess:
            return False

    assert not [p for p in pids if alive(p)], "processes left running after SIGTERM"
    assert proc.returncode != 0  # interrupted, not a normal end
