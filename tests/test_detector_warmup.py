"""A node loads its entity detector once per process, before the handler of the first message it handles:
`uedp.entities.plain.load_detector` builds and runs the detector once (cached), `detect` reuses it, and the
example ClientApp's lifespan calls it, so the probe (answered by the client mod) already warms the process."""

from __future__ import annotations

import pytest
from flwr.app import Context, Message, RecordDict

from runtime.local_grid import set_local_task_identity
from tests.installed import ROOT
from uedp.entities import detectors, plain, spacy_ner
from uedp.errors import ConfigError
from uedp.protocol import has_probe_marker, probe_content


@pytest.fixture
def fresh_cache():
    plain.load_detector.cache_clear()
    yield
    plain.load_detector.cache_clear()


def test_load_detector_builds_once_and_detect_reuses_it(fresh_cache, monkeypatch):
    built = []
    create = detectors.DETECTORS.create
    monkeypatch.setattr(plain.DETECTORS, "create", lambda name, **kw: built.append(name) or create(name, **kw))
    det = plain.load_detector("rules")
    assert plain.load_detector("rules") is det and built == ["rules"]
    found = plain.detect(["Write to ana@example.com today."], detector="rules")
    assert built == ["rules"]  # no second detector
    assert [e.category for e in found[0]] == ["EMAIL"]


def test_load_detector_loads_spacy_before_the_first_detect(fresh_cache, monkeypatch):
    loads = []
    load = spacy_ner._load
    monkeypatch.setattr(spacy_ner, "_load", lambda name: loads.append(name) or load(name))
    plain.load_detector("balanced")
    assert loads == [spacy_ner.resolve_model()[0]]  # the warm-up ran the NER: the model is loaded now


def test_gold_and_unknown_detectors_are_refused(fresh_cache):
    with pytest.raises(ConfigError, match="gold"):
        plain.load_detector("gold")
    with pytest.raises(ConfigError, match="no-such-detector"):
        plain.load_detector("no-such-detector")


def test_the_example_apps_probe_warms_the_detector(fresh_cache, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "uedp-hf-app"))
    from uedp_hf_app.client_app import app

    set_local_task_identity()
    probe = Message(probe_content(), dst_node_id=5, message_type="train")
    context = Context(run_id=1, node_id=5, node_config={}, state=RecordDict(), run_config={"detector": "rules"})
    assert plain.load_detector.cache_info().currsize == 0
    assert has_probe_marker(app(probe, context))
    assert plain.load_detector.cache_info().currsize == 1
    app(probe, context)
    assert plain.load_detector.cache_info().misses == 1  # once per process
