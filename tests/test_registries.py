"""One vocabulary per concept: datasets, tasks and public corpora are registries that
refuse an unknown name, naming it. A loader registers its facts with it (gold by construction, public
corpus, task option) in one call, and one registered without them is refused there; a toy loader and a toy
public corpus, registered here and removed after, run through the pipeline and a one-round run."""

from __future__ import annotations

import inspect

import pytest

from runtime.local_grid import run_local
from tests.helpers import tiny_config
from uedp.config import RunConfig
from uedp.data.corpus import Corpus, CorpusBuilder, GoldSpan
from uedp.data.loaders import LOADERS, DatasetFacts, dataset_facts, dataset_names, load_corpus
from uedp.entities.annotations import annotate, annotate_cached, resolve_detector
from uedp.errors import ConfigError
from uedp.pipeline import prepare
from uedp.public_corpora import (
    PublicSource,
    public_corpus_names,
    public_source,
    register_public_corpus,
    unregister_public_corpus,
)
from uedp.tasks import CLASSIFICATION, NEXT_WORD, NextWordTask, get_task, register_task, task_names
from uedp.tokenization import public_corpus, resolve_public_corpus

TOY = "toy_registry"
TOY_PUBLIC = "toy_public"
_PEOPLE = ("Ann Lee", "Bob Roy", "Cid Moe", "Dee Fox", "Eve Kim", "Fay Orr", "Gus Ray", "Hal Ito")
_CITIES = ("Paris", "Oslo", "Lima", "Rome")


def _sentence(person: str, city: str, day: int) -> tuple[str, list[GoldSpan]]:
    text = f"{person} flew to {city} on day {day} and wrote home."
    start = len(person) + len(" flew to ")
    return text, [GoldSpan(0, len(person), "PERSON"), GoldSpan(start, start + len(city), "GPE")]


def load_toy(*, num_users: int = 6, sentences: int = 14, seed: int = 0) -> Corpus:
    """Users who write about the entities the generator inserted: gold spans exact by construction."""
    builder = CorpusBuilder(TOY, has_gold=True)
    for u in range(num_users):
        user = f"user{u}"
        builder.add_user(user)
        for i in range(sentences):
            text, gold = _sentence(_PEOPLE[(u + i) % len(_PEOPLE)], _CITIES[(u * 3 + i) % len(_CITIES)], i)
            builder.add(user, text, gold=gold)
    return builder.build(seed=seed)


def _toy_public_texts() -> list[str]:  # other entities than the users', the same kind of text
    return [f"{p.split()[1]} {p.split()[0]} flew to Quito on day {d} and wrote home." for p in _PEOPLE
            for d in range(30)]


@pytest.fixture
def toy():
    """The toy loader (with its facts) and its public corpus, registered for one test and removed after."""
    register_public_corpus(PublicSource(TOY_PUBLIC, package="pytest", load=_toy_public_texts,
                                        describe=lambda: "toy public text (tests/test_registries.py)"))
    LOADERS.register(TOY, facts=DatasetFacts(gold_by_construction=True, public_corpus=TOY_PUBLIC))(load_toy)
    try:
        yield
    finally:
        LOADERS.unregister(TOY)
        unregister_public_corpus(TOY_PUBLIC)
    assert TOY not in dataset_names() and TOY_PUBLIC not in public_corpus_names()


def test_a_toy_loader_registered_with_its_facts_runs_through_the_pipeline(toy, tmp_path):
    cfg = tiny_config(tmp_path, dataset={"name": TOY, "options": {"num_users": 6}},
                      federation={"rounds": 1, "eval_every": 1})
    assert cfg.detector() == "gold"  # its facts: spans exact by construction
    assert resolve_public_corpus(cfg.tokenizer.public_corpus, TOY) == TOY_PUBLIC  # its facts: public corpus
    manifest = prepare(cfg)
    assert len(manifest.users) == 6 and manifest.num_entities > 0
    assert manifest.tokenizer_info["corpus"] == "toy public text (tests/test_registries.py)"
    summary = run_local(cfg)
    assert summary["rounds"] == 1 and summary["detector"] == "gold"
    assert summary["metric"] == get_task(NEXT_WORD).metric == "perplexity"
    assert summary["metric"] in summary["final"]
    assert summary["tokenizer"]["corpus"] == manifest.tokenizer_info["corpus"]


def test_a_loader_without_its_facts_is_refused_at_registration():
    def load_bare(*, seed: int = 0) -> Corpus:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="facts"):
        LOADERS.register("toy_bare")(load_bare)  # no facts: refused by the register call itself
    with pytest.raises(TypeError, match="DatasetFacts"):
        LOADERS.register("toy_bare", facts={"gold_by_construction": False, "public_corpus": "synthetic"})
    with pytest.raises(TypeError):
        DatasetFacts(gold_by_construction=False)  # every fact without a default must be given
    with pytest.raises(TypeError, match="gold_by_construction"):
        DatasetFacts(gold_by_construction="yes", public_corpus="synthetic")
    with pytest.raises(TypeError, match="public_corpus"):
        DatasetFacts(gold_by_construction=False, public_corpus="auto")
    assert "toy_bare" not in dataset_names()
    with pytest.raises(ValueError, match="registered twice"):
        LOADERS.register("synthetic", facts=dataset_facts("synthetic"))(load_bare)


def test_an_unknown_dataset_is_refused_naming_it():
    cfg = RunConfig.from_nested({"dataset": {"name": "wikipedia"}})
    for lookup in (lambda: dataset_facts("wikipedia"), lambda: load_corpus("wikipedia"), cfg.detector,
                   cfg.loader_options, lambda: resolve_public_corpus("auto", "wikipedia"),
                   lambda: resolve_detector(_named("wikipedia"))):
        with pytest.raises(ConfigError, match="unknown dataset 'wikipedia'; choose one of: .*synthetic"):
            lookup()
    assert RunConfig.from_nested({"dataset": {"name": "wikipedia"}, "entities": {"detector": "rules"}}).detector() \
        == "rules"  # a detector given explicitly needs no fact


def _named(name: str) -> Corpus:
    builder = CorpusBuilder(name)
    builder.add("u", "One sentence.")
    return builder.build()


def test_an_unknown_task_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="task.name: unknown task 'summarization'; choose one of: "
                                          "classification, next_word"):
        RunConfig.from_nested({"task": {"name": "summarization"}})
    with pytest.raises(ConfigError, match="unknown task 'summarization'"):
        get_task("summarization")
    with pytest.raises(ValueError, match="registered twice"):
        register_task(NextWordTask())
    assert task_names() == [CLASSIFICATION, NEXT_WORD]


def test_an_unknown_public_corpus_is_refused_with_the_known_names():
    with pytest.raises(ConfigError, match="unknown public corpus 'wikitext'; known: synthetic, shakespeare, "
                                          "bbc_news"):
        public_source("wikitext")
    with pytest.raises(ConfigError, match="tokenizer.public_corpus 'wikitext' is neither 'auto', one of "
                                          "synthetic, shakespeare, bbc_news, nor an existing text file"):
        public_corpus("wikitext")
    from uedp.pretraining import public_text

    with pytest.raises(ConfigError, match="'wikitext'"):
        public_text("wikitext", public_users=10)
    with pytest.raises(ValueError, match="registered twice"):
        register_public_corpus(public_source("synthetic"))
    with pytest.raises(ValueError, match="auto"):
        PublicSource("auto", package="x", load=list, describe=str)


def test_each_tasks_metric_and_aliases_come_from_the_registry():
    assert {name: get_task(name).metric for name in task_names()} == {NEXT_WORD: "perplexity",
                                                                      CLASSIFICATION: "error"}
    assert get_task("lm") is get_task(NEXT_WORD) and get_task("cls") is get_task(CLASSIFICATION)
    assert RunConfig.from_nested({"task": {"name": "lm"}}).task.name == NEXT_WORD  # an alias: its name
    import server.local_dp
    import server.setup

    for module in (server.setup, server.local_dp):  # the metric is read from the registry, not re-derived
        source = inspect.getsource(module)
        assert "get_task(" in source and '"perplexity" if' not in source


def test_every_registered_dataset_has_consistent_facts():
    import uedp.audit  # noqa: F401 - registers audit_synthetic

    for name in dataset_names():
        facts = dataset_facts(name)
        assert facts.public_corpus in public_corpus_names(), name
        assert facts.public_corpus != name or name == "synthetic", name  # never the private text itself
        assert set(facts.task_option or ()) <= set(task_names()), name
        assert facts.public_generator is None or public_source(facts.public_generator).seed is not None
    assert [n for n in dataset_names() if dataset_facts(n).gold_by_construction] == ["audit_synthetic", "synthetic"]
    assert dict(dataset_facts("jsonl").task_option) == {NEXT_WORD: "lm", CLASSIFICATION: "classification"}


def test_annotate_defaults_to_the_configs_detector(toy):
    for function in (annotate, annotate_cached):
        assert inspect.signature(function).parameters["detector"].default is None
    corpus = load_toy(num_users=2, sentences=3)
    assert resolve_detector(corpus) == RunConfig().entities.detector_for(TOY) == "gold"
    assert resolve_detector(corpus, "rules") == "rules"
    assert annotate(corpus, cache=False).equals(annotate(corpus, "gold", cache=False))
    assert RunConfig().entities.detector_for("jsonl") == RunConfig().entities.detector_for(None) == "balanced"
