"""Real-data and bring-your-own loaders: shakespeare, bbc_news, conll2003, ag_news, jsonl, and the shared
text helpers (strict reading, sentence splitting, stratified sampling, hub fallback)."""

from __future__ import annotations

import importlib.machinery
import json
import re
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

import uedp.data.shakespeare as shakespeare
from uedp.data.corpus import Corpus
from uedp.data.loaders import load_corpus
from uedp.data.text import (
    normalize_whitespace,
    read_text,
    sample_stratified,
    split_sentences,
)
from uedp.errors import ConfigError, CorpusError


def rows_of(corpus: Corpus) -> list[dict]:
    return corpus.table.to_pylist()


def texts_of(corpus: Corpus, user: str) -> list[str]:
    return corpus.user_rows(user).column("text").to_pylist()


# -- text helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mr. Smith paid $3.5m. Dr. Jones did not! Did he? Yes.",
         ["Mr. Smith paid $3.5m.", "Dr. Jones did not!", "Did he?", "Yes."]),
        ('He said "Stop." Then he left. "Go!" she cried.',
         ['He said "Stop."', "Then he left.", '"Go!" she cried.']),
        ("The U.S. Federal Reserve met on Jan. 5 in No. 10 Downing St. with J. K. Rowling, e.g. twice.",
         ["The U.S. Federal Reserve met on Jan. 5 in No. 10 Downing St. with J. K. Rowling, e.g. twice."]),
        ("Awake! what, ho, Brabantio! thieves! Look to your house.",
         ["Awake! what, ho, Brabantio! thieves!", "Look to your house."]),
        ("'I have already chose my officer.' And what was he?",
         ["'I have already chose my officer.'", "And what was he?"]),
        ("Wait... What? Shares rose 3.2% (to 10.5p). 2005 was good. More than I. Come here.",
         ["Wait...", "What?", "Shares rose 3.2% (to 10.5p).", "2005 was good.", "More than I.",
          "Come here."]),
        ("First para\nwraps here.\n\nSecond para", ["First para wraps here.", "Second para"]),
        ("Winners:\n- Best actor - X \n - Best play - Y", ["Winners:", "Best actor - X", "Best play - Y"]),
        ("I said no. Then I left.", ["I said no.", "Then I left."]),
        (" \n\t\n ", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_normalize_whitespace() -> None:
    assert normalize_whitespace("  a\u00a0\tb\n\nc\u200b d  ") == "a b c d"


def test_read_text_is_strict(tmp_path: Path) -> None:
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbfhello\n")
    assert read_text(bom) == "hello\n"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nfine\nbad \xa3 byte\n")
    with pytest.raises(CorpusError, match=r"bad\.txt line 3: not valid UTF-8 \(byte 0xa3"):
        read_text(bad)
    with pytest.raises(CorpusError, match=r"missing\.txt: no such file"):
        read_text(tmp_path / "missing.txt")
    with pytest.raises(CorpusError, match="is a directory"):
        read_text(tmp_path)


def test_sample_stratified_is_proportional_deterministic_and_ordered() -> None:
    groups = {"a": list(range(100)), "b": list(range(100, 150)), "c": list(range(150, 160))}
    picked = sample_stratified(groups, 32, seed=1)
    assert len(picked) == 32 and picked == sorted(picked)  # the full list's order
    counts = Counter("a" if x < 100 else "b" if x < 150 else "c" for x in picked)
    assert abs(counts["a"] - 20) <= 1 and abs(counts["b"] - 10) <= 1 and abs(counts["c"] - 2) <= 1
    assert sample_stratified(groups, 32, seed=1) == picked
    assert sample_stratified(groups, 32, seed=2) != picked
    assert sample_stratified(groups, None, seed=1) == list(range(160))
    assert sample_stratified(groups, 500, seed=1) == list(range(160))


# -- shakespeare ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def othello() -> Corpus:
    return load_corpus("shakespeare", plays=["othello"])


def test_shakespeare_users_are_play_roles(othello: Corpus) -> None:
    users = othello.users()
    assert len(users) == 23 and all(u.startswith("othello/") for u in users)
    assert {"othello/IAGO", "othello/OTHELLO", "othello/DESDEMONA", "othello/RODERIGO"} <= set(users)
    assert othello.label_names is None and not othello.has_gold
    assert othello.table.column("label").null_count == othello.num_sentences
    assert othello.table.column("gold").null_count == othello.num_sentences
    assert othello.meta["too_few_sentences"] == 5 and othello.meta["dropped_users"] == 0


def test_shakespeare_sentences_join_verse_lines(othello: Corpus) -> None:
    iago = texts_of(othello, "othello/IAGO")
    assert len(iago) == 510
    assert iago[0] == "'Sblood, but you will not hear me: If ever I did dream of such a matter, Abhor me."
    assert iago[1] == "Despise me, if I do not."
    assert any(s.endswith("For daws to peck at: I am not what I am.") for s in iago)
    assert texts_of(othello, "othello/RODERIGO")[0] == (
        "Tush! never tell me; I take it much unkindly That thou, Iago, who hast had my purse "
        "As if the strings were thine, shouldst know of this."
    )


def test_shakespeare_skips_stage_directions_and_headings() -> None:
    corpus = load_corpus("shakespeare", plays=["othello", "edward-iii", "twelfth-night"], min_sentences=1)
    texts = corpus.table.column("text").to_pylist()
    assert not [t for t in texts if re.search(r"[_*#\[\]\\]|^Enter |^Exeunt|^ACT ", t)]
    assert all(t == t.strip() and "  " not in t for t in texts)


def test_shakespeare_role_names_are_repaired() -> None:
    users = set(load_corpus("shakespeare", plays=["richard-iii", "romeo-and-juliet"]).users())
    assert "richard-iii/Ghost of Prince Edward" in users and "richard-iii/of Prince Edward" not in users
    assert [u for u in users if u.lower() == "romeo-and-juliet/nurse"] == ["romeo-and-juliet/Nurse"]


def test_shakespeare_min_sentences_and_max_users(othello: Corpus) -> None:
    big = load_corpus("shakespeare", plays=["othello"], min_sentences=100)
    counts = Counter(big.table.column("user").to_pylist())
    assert min(counts.values()) >= 100 and set(counts) < set(othello.users())
    small = load_corpus("shakespeare", plays=["othello"], max_users=5, seed=4)
    assert small.num_users == 5 and set(small.users()) <= set(othello.users())
    assert load_corpus("shakespeare", plays=["othello"], max_users=5, seed=4).users() == small.users()
    with pytest.raises(ConfigError, match="unknown play.*'othelo'"):
        load_corpus("shakespeare", plays=["othelo"])
    with pytest.raises(ConfigError, match="max_users"):
        load_corpus("shakespeare", plays=["othello"], max_users=0)


def test_shakespeare_drops_roles_without_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    play = tmp_path / "tiny.md"
    play.write_text(
        "# Tiny\n\n## ACT I\n\n_Enter A and B_\n\n**A**  \nHello there, friend.  \nHow do you do?\n\n"
        "**MUTE**  \n_\\[Aside]_\n\n**B**  \n_\\[To A]_  \nWell. Thank you.\n\n_Exeunt_\n"
    )
    monkeypatch.setattr(shakespeare, "available_plays", lambda: {"tiny": play})
    corpus = load_corpus("shakespeare", min_sentences=1)
    assert corpus.users() == ["tiny/A", "tiny/B"]
    assert texts_of(corpus, "tiny/A") == ["Hello there, friend.", "How do you do?"]
    assert texts_of(corpus, "tiny/B") == ["Well.", "Thank you."]
    assert corpus.meta["dropped_users"] == 1


# -- bbc_news -------------------------------------------------------------------------------------------

BBC_CLASSES = ["business", "entertainment", "politics", "sports", "tech"]


@pytest.fixture(scope="module")
def bbc() -> Corpus:
    return load_corpus("bbc_news")


def test_bbc_news_full_corpus(bbc: Corpus) -> None:
    assert bbc.label_names == BBC_CLASSES and not bbc.has_gold
    assert bbc.num_users == 2225 and bbc.meta["dropped_users"] == 0
    per_class = Counter(u.split("/")[0] for u in bbc.users())
    assert per_class == {"business": 510, "entertainment": 386, "politics": 417, "sports": 511, "tech": 401}
    rows = rows_of(bbc)
    assert all(r["label"] == BBC_CLASSES.index(r["user"].split("/")[0]) for r in rows)
    assert 40_000 < len(rows) < 48_000
    first = texts_of(bbc, "business/001")
    assert first[0] == "Ad sales boost Time Warner profit"  # the title is a sentence
    assert first[1].startswith("Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn")
    # sports/199.txt holds a Latin-1 pound sign: decoded, not dropped
    assert any("a \u00a315.8m signing from Parma" in t for t in texts_of(bbc, "sports/199"))


def test_bbc_news_max_users_is_stratified_and_deterministic() -> None:
    sample = load_corpus("bbc_news", max_users=25, seed=2)
    assert sample.num_users == 25
    per_class = Counter(u.split("/")[0] for u in sample.users())
    sizes = {"business": 510, "entertainment": 386, "politics": 417, "sports": 511, "tech": 401}
    for cls, size in sizes.items():
        assert abs(per_class[cls] - 25 * size / 2225) <= 1, per_class
    assert load_corpus("bbc_news", max_users=25, seed=2).users() == sample.users()
    assert load_corpus("bbc_news", max_users=25, seed=3).users() != sample.users()


# -- conll2003 ------------------------------------------------------------------------------------------

CONLL_TRAIN = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

-DOCSTART- -X- -X- O

New NNP B-NP I-LOC
York NNP I-NP I-LOC
and CC O O
Los NNP B-NP I-LOC
Angeles NNP I-NP I-LOC
Paris NNP I-NP B-LOC
Rome NNP I-NP I-LOC
Smith NNP I-NP I-PER
"""
# IOB2, no -DOCSTART- before the first sentence, tab separated, CRLF line ends
CONLL_DEV = "Jan\tB-PER\r\nvan\tI-PER\r\nEck\tI-PER\r\nmet\tO\r\nUN\tB-ORG\r\nstaff\tO\r\n\r\n" \
            "-DOCSTART-\tO\r\n\r\nWorld\tB-MISC\r\nCup\tI-MISC\r\n"
CONLL_TEST = "-DOCSTART- -X- -X- O\n\nSoccer NN B-NP O\n"


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.fixture()
def conll_dir(tmp_path: Path) -> Path:
    write(tmp_path / "train.txt", CONLL_TRAIN)
    write(tmp_path / "dev.txt", CONLL_DEV)
    write(tmp_path / "test.txt", CONLL_TEST)
    return tmp_path


def gold_texts(row: dict) -> list[tuple[str, str]]:
    return [(row["text"][g["start"]:g["end"]], g["category"]) for g in row["gold"]]


def test_conll_documents_sentences_and_gold(conll_dir: Path) -> None:
    corpus = load_corpus("conll2003", path=conll_dir)
    assert corpus.has_gold and corpus.label_names is None
    assert corpus.users() == ["test/doc0", "train/doc0", "train/doc2", "valid/doc0", "valid/doc1"]
    assert corpus.meta["dropped_users"] == 1  # train/doc1 has no sentence
    rows = rows_of(corpus)
    assert {(r["user"], r["split"]) for r in rows} == {
        ("test/doc0", "test"), ("train/doc0", "train"), ("train/doc2", "train"),
        ("valid/doc0", "valid"), ("valid/doc1", "valid"),
    }
    by_text = {r["text"]: gold_texts(r) for r in rows}
    assert by_text == {
        "EU rejects German call .": [("EU", "ORG"), ("German", "MISC")],
        "Peter Blackburn": [("Peter Blackburn", "PERSON")],
        "New York and Los Angeles Paris Rome Smith": [("New York", "LOC"), ("Los Angeles", "LOC"),
                                                      ("Paris Rome", "LOC"), ("Smith", "PERSON")],
        "Jan van Eck met UN staff": [("Jan van Eck", "PERSON"), ("UN", "ORG")],
        "World Cup": [("World Cup", "MISC")],
        "Soccer": [],
    }


def test_conll_gold_spans_match_tagged_tokens(conll_dir: Path) -> None:
    """Every gold span covers whole tokens whose tags are exactly one entity of the span's category."""
    cat = {"PER": "PERSON", "LOC": "LOC", "ORG": "ORG", "MISC": "MISC"}
    expected: dict[str, list[tuple[str, str]]] = {}
    for text in (CONLL_TRAIN, CONLL_DEV, CONLL_TEST):
        for block in re.split(r"\r?\n\r?\n", text):
            toks = [ln.split() for ln in block.splitlines() if ln.strip() and not ln.startswith("-DOCSTART-")]
            if not toks:
                continue
            entities: list[list] = []
            prev = "O"
            for t in toks:
                tag = t[-1]
                if tag != "O" and (tag[0] == "B" or prev[2:] != tag[2:]):
                    entities.append([[t[0]], cat[tag[2:]]])
                elif tag != "O":
                    entities[-1][0].append(t[0])
                prev = tag
            expected[" ".join(t[0] for t in toks)] = [(" ".join(w), c) for w, c in entities]
    rows = rows_of(load_corpus("conll2003", path=conll_dir))
    assert {r["text"]: gold_texts(r) for r in rows} == expected
    for r in rows:
        for g in r["gold"]:
            assert (g["start"] == 0 or r["text"][g["start"] - 1] == " ") and \
                   (g["end"] == len(r["text"]) or r["text"][g["end"]] == " ")


def test_conll_single_file(tmp_path: Path) -> None:
    named = load_corpus("conll2003", path=write(tmp_path / "eng.testb", CONLL_TRAIN))
    assert set(named.table.column("split").to_pylist()) == {"test"}
    assert named.users() == ["test/doc0", "test/doc2"]
    anonymous = load_corpus("conll2003", path=write(tmp_path / "mine.conll", CONLL_TRAIN), seed=0,
                            split_fractions=(0.0, 0.0, 1.0))
    assert anonymous.users() == ["all/doc0", "all/doc2"]
    assert set(anonymous.table.column("split").to_pylist()) == {"test"}


def test_conll_max_users(conll_dir: Path) -> None:
    corpus = load_corpus("conll2003", path=conll_dir, max_users=3, seed=0)
    assert corpus.num_users + corpus.meta["dropped_users"] == 3
    assert set(corpus.users()) <= {"test/doc0", "train/doc0", "train/doc2", "valid/doc0", "valid/doc1"}


# a train.txt and the error it gets (test_bad_input_is_refused_naming_file_and_line)
CONLL_BAD_INPUT: list[tuple[str | bytes, str]] = [
    ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects\n", r"train\.txt line 4: too few columns"),
    ("EU NNP B-NP I-ORG\n\nGerman JJ B-NP B-NP\n", r"train\.txt line 3: invalid NER tag 'B-NP'"),
    ("EU NNP B-NP E-ORG\n", r"train\.txt line 1: invalid NER tag 'E-ORG'"),
    ("-DOCSTART- -X- -X- O\n\n\n", r"corpus is empty"),
    ("", r"corpus is empty"),
    (b"-DOCSTART- O\n\nM\xfcller B-PER\n", r"train\.txt line 3: not valid UTF-8"),
]


def test_conll_bad_files(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nowhere: no such file or directory"):
        load_corpus("conll2003", path=tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"empty: no CoNLL file found.*train\.txt"):
        load_corpus("conll2003", path=tmp_path / "empty")


def test_conll_and_ag_news_need_a_path_offline() -> None:
    with pytest.raises(CorpusError, match=r"conll2003: no local 'path'.*HF_HUB_OFFLINE=1.*valid\.txt"):
        load_corpus("conll2003")
    with pytest.raises(CorpusError, match=r"ag_news: no local 'path'.*HF_HUB_OFFLINE.*train\.csv"):
        load_corpus("ag_news")


class _Seq(list):
    """A list of rows with `.features`, as a Hugging Face Dataset split."""

    def __init__(self, rows: list[dict], features: dict) -> None:
        super().__init__(rows)
        self.features = features


def _fake_datasets(monkeypatch: pytest.MonkeyPatch, data: dict) -> list[str]:
    calls: list[str] = []
    module = types.ModuleType("datasets")
    module.__spec__ = importlib.machinery.ModuleSpec("datasets", None)

    def load_dataset(name: str) -> dict:
        calls.append(name)
        return data

    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    return calls


def test_hub_fallback_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
    tags = types.SimpleNamespace(feature=types.SimpleNamespace(names=names))
    sent = {"tokens": ["Ann", "Lee", "visited", "Oslo"], "ner_tags": [1, 2, 0, 5]}
    calls = _fake_datasets(monkeypatch, {
        "train": _Seq([sent] * 20, {"ner_tags": tags}),
        "validation": _Seq([sent], {"ner_tags": tags}),
        "test": _Seq([sent], {"ner_tags": tags}),
    })
    corpus = load_corpus("conll2003")
    assert calls == ["conll2003"]
    assert corpus.users() == ["test/doc0", "train/doc0", "train/doc1", "valid/doc0"]
    assert corpus.num_sentences == 22
    assert gold_texts(rows_of(corpus)[0]) == [("Ann Lee", "PERSON"), ("Oslo", "LOC")]
    calls = _fake_datasets(monkeypatch, {"train": [{"text": "Oil up. Stocks fall.", "label": 2}] * 3,
                                         "test": [{"text": "Goal!", "label": 1}]})
    corpus = load_corpus("ag_news", articles_per_user=2)
    assert calls == ["ag_news"]
    assert corpus.users() == ["test/user000000", "train/user000000", "train/user000001"]
    assert texts_of(corpus, "train/user000001") == ["Oil up.", "Stocks fall."]
    assert corpus.table.column("label").to_pylist().count(2) == 6


# -- ag_news --------------------------------------------------------------------------------------------

AG_TRAIN = (
    '"3","Wall St. Bears Claw Back (Reuters)","Reuters - Short-sellers, Wall Street\'s dwindling\\band '
    'of ultra-cynics, are seeing green again. It #39;s &lt;b&gt;good&lt;/b&gt;."\n'
    '"1","Two-line\ntitle","First sentence. Second one!"\n'
    "\n"
    '"2","Goal","Win."\n'
    '4,Chips,"Intel Corp. said Mr. Otellini, 54, will speak."\n'
    '"2"," "," "\n'
)
AG_TEST = 'Class Index,Title,Description\n"1","Peace talks","Talks resume on Monday."\n'


@pytest.fixture()
def ag_dir(tmp_path: Path) -> Path:
    write(tmp_path / "train.csv", AG_TRAIN)
    write(tmp_path / "test.csv", AG_TEST)
    return tmp_path


def test_ag_news_users_labels_and_sentences(ag_dir: Path) -> None:
    corpus = load_corpus("ag_news", path=ag_dir, articles_per_user=2)
    assert corpus.label_names == ["World", "Sports", "Business", "Sci/Tech"] and not corpus.has_gold
    assert corpus.users() == ["test/user000000", "train/user000000", "train/user000001"]
    assert corpus.meta["dropped_users"] == 1  # train/user000002 holds one empty article
    assert corpus.meta["articles"] == 6
    rows = rows_of(corpus)
    got = [(r["user"], r["split"], r["label"], r["text"]) for r in rows]
    assert got == [
        ("test/user000000", "test", 0, "Peace talks"),
        ("test/user000000", "test", 0, "Talks resume on Monday."),
        ("train/user000000", "train", 2, "Wall St. Bears Claw Back (Reuters)"),
        ("train/user000000", "train", 2,
         "Reuters - Short-sellers, Wall Street's dwindling band of ultra-cynics, are seeing green again."),
        ("train/user000000", "train", 2, "It 's <b>good</b>."),
        ("train/user000000", "train", 0, "Two-line title"),
        ("train/user000000", "train", 0, "First sentence."),
        ("train/user000000", "train", 0, "Second one!"),
        ("train/user000001", "train", 1, "Goal"),
        ("train/user000001", "train", 1, "Win."),
        ("train/user000001", "train", 3, "Chips"),
        ("train/user000001", "train", 3, "Intel Corp. said Mr. Otellini, 54, will speak."),
    ]
    one = load_corpus("ag_news", path=ag_dir / "train.csv", articles_per_user=1)
    assert one.users() == [f"train/user{k:06d}" for k in range(4)]
    assert one.meta["dropped_users"] == 1
    sample = load_corpus("ag_news", path=ag_dir, articles_per_user=1, max_users=2, seed=0)
    assert sample.num_users + sample.meta["dropped_users"] == 2


# a train.csv and the error it gets
AG_NEWS_BAD_INPUT: list[tuple[str | bytes, str]] = [
    ('"1","a","b"\n"2","multi\nline","b"\n"3","only two"\n', r"train\.csv line 4: expected 3 columns.*got 2"),
    ('"1","a","b","c"\n', r"train\.csv line 1: expected 3 columns.*got 4"),
    ('"5","a","b"\n', r"train\.csv line 1: field 'class' must be 1, 2, 3 or 4, got '5'"),
    ('"1","a","b"\n"World","a","b"\n', r"train\.csv line 2: field 'class'"),
    ('"1","a","b"\n"1","a"x,"b"\n', r"train\.csv line 2: malformed CSV"),
    ('"1","a","b"\n"1","a","unterminated\n\n', r"train\.csv line 2: malformed CSV"),
    ("", "corpus is empty"),
    ("\n\n", "corpus is empty"),
    (b'"1","a","b"\n"2","caf\xe9","b"\n', r"train\.csv line 2: not valid UTF-8"),
]


@pytest.mark.parametrize(
    ("loader", "name", "content", "message"),
    [("conll2003", "train.txt", *case) for case in CONLL_BAD_INPUT]
    + [("ag_news", "train.csv", *case) for case in AG_NEWS_BAD_INPUT],
)
def test_bad_input_is_refused_naming_file_and_line(
    tmp_path: Path, loader: str, name: str, content: str | bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    with pytest.raises(CorpusError, match=message):
        load_corpus(loader, path=tmp_path)


def test_ag_news_bad_files_and_options(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus("ag_news", path=tmp_path / "nope.csv")
    write(tmp_path / "train.csv", '"1","a","b"\n')
    with pytest.raises(ConfigError, match="articles_per_user"):
        load_corpus("ag_news", path=tmp_path, articles_per_user=0)


# -- jsonl ----------------------------------------------------------------------------------------------


def write_jsonl(path: Path, records: list[object | str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return write(path, "\n".join(lines) + "\n")


def test_jsonl_happy_path(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "data.jsonl", [
        {"user": "alice", "text": "I met Bob in Paris. He was late!", "label": "travel", "split": "train"},
        "",
        {"user": "bob", "text": "Dr. Who called.", "label": "work", "split": "test"},
        "   ",
        {"user": "alice", "text": "Back home.", "label": "home", "split": None},
        {"user": "carol", "text": "  \n ", "label": "home"},
    ])
    corpus = load_corpus("jsonl", path=path, task="classification", split_fractions=(0, 1, 0))
    assert corpus.label_names == ["home", "travel", "work"]
    assert corpus.users() == ["alice", "bob"] and corpus.meta["dropped_users"] == 1
    got = [(r["user"], r["text"], corpus.label_names[r["label"]], r["split"]) for r in rows_of(corpus)]
    assert got == [
        ("alice", "I met Bob in Paris.", "travel", "train"),
        ("alice", "He was late!", "travel", "train"),
        ("alice", "Back home.", "home", "valid"),
        ("bob", "Dr. Who called.", "work", "test"),
    ]
    whole = load_corpus("jsonl", path=path, sentence_split=False)
    assert texts_of(whole, "alice") == ["I met Bob in Paris. He was late!", "Back home."]


def test_jsonl_labels_optional_for_lm_and_integer_labels_sort_numerically(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"user": "u", "text": "A.", "label": 10}, {"user": "u", "text": "B.", "label": 2},
        {"user": "v", "text": "C."},
    ])
    corpus = load_corpus("jsonl", path=path)
    assert corpus.label_names == ["2", "10"]
    assert corpus.table.column("label").to_pylist() == [1, 0, None]
    with pytest.raises(CorpusError, match="no label"):
        corpus.require_labels()
    assert load_corpus("jsonl", path=write_jsonl(tmp_path / "n.jsonl", [{"user": "u", "text": "A."}])) \
        .label_names is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"user": "u", "text": "x"', r"line 2: invalid JSON"),
        ('["u", "x"]', r"line 2: expected a JSON object, got list"),
        ('"just a string"', r"line 2: expected a JSON object, got str"),
        ('{"text": "x"}', r"line 2: field 'user' must be a non-empty string or an integer, got None"),
        ('{"user": 7.5, "text": "x"}', r"line 2: field 'user' must be a non-empty string or an integer, got 7.5"),
        ('{"user": true, "text": "x"}', r"line 2: field 'user' must be a non-empty string or an integer"),
        ('{"user": " ", "text": "x"}', r"line 2: field 'user' must be a non-empty string"),
        ('{"user": "u"}', r"line 2: field 'text' must be a string, got None"),
        ('{"user": "u", "text": ["x"]}', r"line 2: field 'text' must be a string"),
        ('{"user": "u", "text": "x", "split": "dev"}', r"line 2: field 'split' must be one of .*'dev'"),
        ('{"user": "u", "text": "x", "label": true}', r"line 2: field 'label' must be a string or an"),
        ('{"user": "u", "text": "x", "label": 1.5}', r"line 2: field 'label' must be a string or an"),
        ('{"user": "u", "text": "x", "lable": "a"}', r"line 2: unknown field\(s\) 'lable'"),
    ],
)
def test_jsonl_malformed_line(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path / "bad.jsonl", '{"user": "ok", "text": "Fine."}\n' + line + "\n")
    with pytest.raises(CorpusError, match=re.escape(str(path)) + " " + message):
        load_corpus("jsonl", path=path)


def test_jsonl_numeric_user_ids_are_their_decimal_strings_and_mixed_forms_are_refused(tmp_path: Path) -> None:
    """Exported data often has numeric ids: 42 is the user "42"; a file writing one id both ways is ambiguous."""
    path = write_jsonl(tmp_path / "ids.jsonl", [{"user": 42, "text": "A walk."}, {"user": 7, "text": "Rain."},
                                               {"user": 42, "text": "Tea."}, {"user": "ann", "text": "Hi."}])
    corpus = load_corpus("jsonl", path=path, sentence_split=False)
    assert sorted(corpus.users()) == ["42", "7", "ann"]
    assert corpus.table.column("user").to_pylist().count("42") == 2
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"user": 42, "text": "A."}, {"user": "b", "text": "B."},
                                                   {"user": "42", "text": "C."}])
    with pytest.raises(CorpusError, match=re.escape(f"{mixed} lines 1 and 3: user 42 is written both as a number "
                                                    'and as a string ("42")')):
        load_corpus("jsonl", path=mixed)


def test_jsonl_bad_files(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"missing\.jsonl: no such file"):
        load_corpus("jsonl", path=tmp_path / "missing.jsonl")
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"user": "a", "text": "ok"}\n\n{"user": "b", "text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"latin1\.jsonl line 3: not valid UTF-8"):
        load_corpus("jsonl", path=bad)
    for name, content in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n\t\n")):
        with pytest.raises(CorpusError, match=name.replace(".", r"\.") + ": the file has no record"):
            load_corpus("jsonl", path=write(tmp_path / name, content))
    only_empty = write_jsonl(tmp_path / "void.jsonl", [{"user": "a", "text": " "}])
    with pytest.raises(CorpusError, match=r"void\.jsonl: the corpus is empty"):
        load_corpus("jsonl", path=only_empty)


def test_jsonl_classification_needs_every_label(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"user": "a", "text": "One.", "label": "x"}, "", {"user": "b", "text": "Two."},
        {"user": "c", "text": "Three."},
    ])
    with pytest.raises(CorpusError, match=r"c\.jsonl line 3: field 'label' is missing.*classification"):
        load_corpus("jsonl", path=path, task="classification")
    with pytest.raises(ConfigError, match="task must be one of"):
        load_corpus("jsonl", path=path, task="ner")
    with pytest.raises(ConfigError, match="no option"):
        load_corpus("jsonl", path=path, taks="lm")


def _labelled(text: str, *entities: tuple[str, str]) -> dict:
    """A JSONL record whose entities are given by surface string (first occurrence) and category."""
    return {"user": "u", "text": text,
            "entities": [[text.index(s), text.index(s) + len(s), c] for s, c in entities]}


def _surfaces(corpus: Corpus) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(r["text"], [(r["text"][g["start"]:g["end"]], g["category"]) for g in r["gold"]])
            for r in corpus.table.to_pylist()]


def test_jsonl_gold_entities_follow_their_sentences(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "g.jsonl", [
        _labelled("I met  Bob Smith in Paris. Then we flew to New\u00a0York!",
                  ("Bob Smith", "PERSON"), ("Paris", "GPE"), ("New\u00a0York", "GPE")),
        {"user": "v", "text": "Nothing to see here.", "entities": []},
    ])
    split = load_corpus("jsonl", path=path)
    assert split.has_gold
    assert sorted(_surfaces(split)) == [
        ("I met Bob Smith in Paris.", [("Bob Smith", "PERSON"), ("Paris", "GPE")]),
        ("Nothing to see here.", []),
        ("Then we flew to New York!", [("New York", "GPE")]),
    ]
    whole = load_corpus("jsonl", path=path, sentence_split=False)
    assert _surfaces(whole)[0] == ("I met Bob Smith in Paris. Then we flew to New York!",
                                   [("Bob Smith", "PERSON"), ("Paris", "GPE"), ("New York", "GPE")])
    plain = load_corpus("jsonl", path=write_jsonl(tmp_path / "p.jsonl", [{"user": "u", "text": "Hi Bob."}]))
    assert not plain.has_gold and plain.table.column("gold").to_pylist() == [None]


@pytest.mark.parametrize(
    ("entities", "message"),
    [
        ([[0, 99, "PERSON"]], r"line 2: entity \[0, 99, 'PERSON'\]: offsets out of range"),
        ([[3, 3, "PERSON"]], r"line 2: entity \[3, 3, 'PERSON'\]: offsets out of range"),
        ([[-1, 3, "PERSON"]], r"line 2: entity \[-1, 3, 'PERSON'\]: offsets out of range"),
        ([[0, 3, "PERS"]], r"line 2: entity \[0, 3, 'PERS'\]: unknown category 'PERS'; known: PERSON"),
        ([[0, 3, "person"]], r"line 2: .*unknown category 'person'"),
        ([[0, 9, "PERSON"], [4, 9, "PERSON"]], r"line 2: entities \[0, 9, 'PERSON'\] \('Ann Smith'\) and "
                                               r"\[4, 9, 'PERSON'\] \('Smith'\) overlap"),
        ([[0, 3]], r"line 2: entity \[0, 3\] must be \[start, end, CATEGORY\]"),
        ([["0", 3, "PERSON"]], r"line 2: .*must be \[start, end, CATEGORY\]"),
        ({"start": 0}, r"line 2: field 'entities' must be a list"),
        ([[0, 18, "PERSON"]], r"line 2: entity \[0, 18, 'PERSON'\] \('Ann Smith left. We'\) crosses a "
                              r"sentence boundary"),
    ],
)
def test_jsonl_bad_entities(tmp_path: Path, entities: object, message: str) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [{"user": "a", "text": "Fine.", "entities": []},
                                              {"user": "u", "text": "Ann Smith left. We stayed.",
                                               "entities": entities}])
    with pytest.raises(CorpusError, match=re.escape(str(path)) + " " + message):
        load_corpus("jsonl", path=path)


def test_jsonl_a_line_without_entities_in_a_labelled_file_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [
        {"user": "a", "text": "Ann left.", "entities": [[0, 3, "PERSON"]]},
        {"user": "b", "text": "Bob stayed."},
    ])
    with pytest.raises(CorpusError, match=r"m\.jsonl line 2: field 'entities' is missing, but line 1 has it"):
        load_corpus("jsonl", path=path)


def test_jsonl_gold_spans_measure_a_detector(tmp_path: Path) -> None:
    """corpus_stats reports recall and precision per category against a user's own spans."""
    from uedp.categories import resolve_categories
    from uedp.entities.annotations import annotate
    from uedp.entities.stats import corpus_stats

    path = write_jsonl(tmp_path / "r.jsonl", [
        _labelled("Write to ann@example.com today.", ("ann@example.com", "EMAIL")),
        _labelled("Call me, it's about the wedding.", ("the wedding", "MISC")),  # rules find no MISC
    ])
    corpus = load_corpus("jsonl", path=path)
    stats = corpus_stats(corpus, annotate(corpus, "rules"), resolve_categories("all"), detector="rules")
    assert stats["per_category"]["EMAIL"]["recall"] == 1.0
    assert stats["per_category"]["MISC"]["recall"] == 0.0 and stats["recall"] == 0.5
