"""What the server of a run uses, in either data mode (`federation.data`).

- "corpus" (simulations, and real nodes that read partition-id rows): `prepare(cfg)` materializes and
  annotates the corpus and builds the tokenizer; the population is the corpus's users; the test split is
  the evaluation set.
- "owners": the server opens no private text. The tokenizer is the public one (uedp.pipeline.run_tokenizer
  without a corpus) and is shipped to the nodes; the population N is `federation.num_nodes`, the number of
  invited owners (public); the label set is `task.labels`; the evaluation set is `federation.eval_data`
  (public or server-owned), or none; the paper's data-derived Z weights do not exist (config refuses
  privacy.paper_z).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uedp.config import DataSource, RunConfig
from uedp.models.base import UedpModel
from uedp.owners import eval_data, model_shape, tokenizer_payload
from uedp.pipeline import EncodedSentences, load_split, new_model, prepare, run_tokenizer
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
        """The run tokenizer's digest (a checkpoint's model is built only with its own: uedp.pipeline.new_model)."""
        return tokenizer_digest(self.tokenizer)

    def new_model(self, cfg: RunConfig, *, seed: int | None = None) -> UedpModel:
        return new_model(cfg, self, seed=seed)


def server_data(cfg: RunConfig) -> ServerData:
    if cfg.owners:
        tokenizer, info = run_tokenizer(cfg, None)
        shape = model_shape(cfg, tokenizer)
        return ServerData(DataSource.OWNERS, cfg.federation.num_nodes, shape.vocab_size, shape.pad_id, shape.num_labels,
                          tokenizer, info, eval_data(cfg, tokenizer))
    manifest = prepare(cfg)
    test = load_split(cfg, "test", limit=cfg.federation.eval_sentences)
    return ServerData(DataSource.CORPUS, len(manifest.users), manifest.vocab_size, manifest.pad_id, manifest.num_labels,
                      manifest.text_tokenizer(), manifest.tokenizer_info, test,
                      manifest.num_entities, manifest.num_extended)
