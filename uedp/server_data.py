"""What the server of a run uses, in either data mode (`federation.data`).

- "corpus" (simulations, and real nodes that read partition-id rows): the prepared run's manifest
  (uedp.pipeline.prepare materializes and annotates the corpus and builds the tokenizer); the population is the
  corpus's users; the test split is the evaluation set (`corpus_server_data`).
- "owners": the server opens no private text. The tokenizer is the public one (uedp.pipeline.run_tokenizer
  without a corpus) and is shipped to the nodes; the population N is `federation.num_nodes`, the number of
  invited owners (public); the label set is `task.labels`; the evaluation set is `federation.eval_data`
  (public or server-owned), or none; the paper's data-derived Z weights do not exist (config refuses
  privacy.paper_z) (`owners_server_data`).

uedp.pipeline.server_data reads the run configuration once and hands its values to these two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uedp.config import DataSource
from uedp.models.base import UedpModel
from uedp.models.build import ModelSpec
from uedp.owners import OwnerTask, eval_data, model_shape, tokenizer_payload
from uedp.prepare.corpus import read_split
from uedp.prepare.encoding import EncodedSentences, encode_rows
from uedp.prepare.manifest import Manifest
from uedp.tokenization import PRIVATE_SPLIT_WARNING, TextTokenizer, tokenizer_digest


@dataclass(frozen=True)
class ServerData:
    source: DataSource
    population: int
    vocab_size: int
    pad_id: int
    num_labels: int | None
    tokenizer: TextTokenizer
    tokenizer_info: dict[str, Any] | None  # what the tokenizer was trained on (summary.json's `tokenizer`)
    test: EncodedSentences | None  # the central evaluation set (None: no evaluation)
    num_entities: int = 0  # W_e, W_s of privacy.paper_z (corpus mode only)
    num_extended: int = 0

    @property
    def tokenizer_warning(self) -> str | None:
        """Why the run's tokenizer voids the guarantee (trained on the private split), or None."""
        return PRIVATE_SPLIT_WARNING if (self.tokenizer_info or {}).get("source") == "private_split" else None

    def shipped(self) -> dict[str, Any] | None:
        """What each training message carries besides instructions and model: the tokenizer, in owners mode."""
        return tokenizer_payload(self.tokenizer) if self.source is DataSource.OWNERS else None

    @property
    def tokenizer_digest(self) -> str:
        """The run tokenizer's digest (a checkpoint's model is built only with its own: uedp.models.build)."""
        return tokenizer_digest(self.tokenizer)

    def new_model(self, model: ModelSpec, *, seed: int | None = None) -> UedpModel:
        """The run's `model` (uedp.pipeline.model_spec) sized by this data; `seed` seeds its weights."""
        return model.build(self, seed=seed)


def owners_server_data(tokenizer: TextTokenizer, tokenizer_info: dict[str, Any], task: OwnerTask, *,
                       population: int, eval_path: str) -> ServerData:
    """Owners mode: the public `tokenizer`, the `population` of invited owners (federation.num_nodes) and the
    evaluation file `eval_path` (federation.eval_data; "": no evaluation), read for `task`."""
    shape = model_shape(tokenizer, task)
    return ServerData(DataSource.OWNERS, population, shape.vocab_size, shape.pad_id, shape.num_labels,
                      tokenizer, tokenizer_info, eval_data(eval_path, tokenizer, task))


def corpus_server_data(manifest: Manifest, *, task: str, max_len: int, eval_sentences: int | None) -> ServerData:
    """Corpus mode: the prepared run `manifest`, evaluated on its participants' test split (at most
    `eval_sentences` of it, federation.eval_sentences; None: all) encoded for `task` at `max_len`."""
    tokenizer = manifest.text_tokenizer()
    rows = read_split(manifest.corpus_dir, manifest.users, "test", limit=eval_sentences)
    test = encode_rows(tokenizer, rows, task=task, max_len=max_len)
    return ServerData(DataSource.CORPUS, len(manifest.users), manifest.vocab_size, manifest.pad_id, manifest.num_labels,
                      tokenizer, manifest.tokenizer_info, test, manifest.num_entities, manifest.num_extended)

