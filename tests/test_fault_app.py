"""The fault-injecting study app (studies/fault_app.py) that the real-process fault test submits in place of the
project's ClientApp (runtime.federation: the staged copy's clientapp), checked in process."""

from __future__ import annotations

import importlib
import tomllib
from unittest import mock

import pytest
from flwr.app import Context, Message, RecordDict

from runtime.federation import Federation, stage_app_source
from runtime.local_grid import set_local_task_identity
from studies.fault_app import FAULT_APP
from tests.helpers import instructions, tiny_config, train_message
from uedp.errors import ConfigError
from uedp.models.base import get_weights
from uedp.pipeline import load_manifest, new_model, prepare
from uedp.protocol import has_probe_marker, probe_content


def _context(node: int, fault: str) -> Context:
    return Context(run_id=0, node_id=node, node_config={"partition-id": node, "fault": fault}, state=RecordDict(),
                   run_config={})


def _load(ref: str):
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


def test_the_fault_app_injects_node_config_faults_inside_uedp_mod(tmp_path, one_torch_thread):
    cfg = tiny_config(tmp_path)
    prepare(cfg)
    set_local_task_identity()
    app = _load(FAULT_APP)
    probe = Message(probe_content(), dst_node_id=1, message_type="train")
    probe.metadata.__dict__["_message_id"] = "probe"
    assert has_probe_marker(app(probe, _context(1, "raise")))  # the mod answers before any fault
    ins = instructions(round=1, mechanism="user_dp", q_e=0.5, q_s=0.5, k_cap=0, m_max=6, slot=-1, beta=0.5,
                       w_u=1.0, private=True, seed=7)
    msg = train_message(get_weights(new_model(cfg, load_manifest(cfg), seed=0)), *ins, node=1)
    msg.metadata.__dict__["_message_id"] = "m1"
    from studies import fault_app

    bound = fault_app.make_client_app(cfg, mods=[fault_app.uedp_mod, fault_app.fault_mod])  # this run's config
    reply = bound(msg, _context(1, "raise"))
    assert reply.has_error() and "RuntimeError" in reply.error.reason and "injected" not in reply.error.reason
    slept: list[float] = []
    with mock.patch("studies.fault_app.time.sleep", slept.append):
        hung = bound(msg, _context(1, "hang:75"))
    assert slept == [75.0] and set(hung.content.keys()) == {"update"}  # then it answers (past the time-out)
    assert set(bound(msg, _context(1, "")).content.keys()) == {"update"}


def test_staging_names_the_fault_app_in_the_copy_only(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    pyproject = ('[project]\nname = "x"\n\n[tool.flwr.app.components]\nserverapp = "server.app:app"\n'
                 'clientapp = "client.app:app"\n\n[tool.flwr.app.config]\nclientapp = "a config value"\n')
    (root / "pyproject.toml").write_text(pyproject)
    copy = stage_app_source(root, tmp_path / "copy", client_app=FAULT_APP)
    staged = tomllib.loads((copy / "pyproject.toml").read_text())
    assert staged["tool"]["flwr"]["app"]["components"] == {"serverapp": "server.app:app", "clientapp": FAULT_APP}
    assert staged["tool"]["flwr"]["app"]["config"] == {"clientapp": "a config value"}
    assert (root / "pyproject.toml").read_text() == pyproject
    plain = stage_app_source(root, tmp_path / "plain")
    assert (plain / "pyproject.toml").read_text() == pyproject
    with pytest.raises(ConfigError, match="module:attribute"):
        stage_app_source(root, tmp_path / "bad", client_app="not an app")
    with pytest.raises(ConfigError, match="stage_app"):
        Federation(nodes=1, home=tmp_path / "home", stage_app=False, client_app=FAULT_APP)
