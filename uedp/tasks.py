"""Tasks: what a model's logits are scored against. `next_word` (language modelling) and `classification`.

Contract:
- Losses are per sentence (`per_sentence_loss(model, batch) -> Tensor[B]`), so the UeDP client can weight
  each sentence x by omega(x) with `weighted_loss`. For next_word a sentence's loss is the mean token
  cross-entropy over its predicted tokens (every token after [BOS], [EOS] included; padding never counts);
  `NextWordTask.sentence_nll` also gives how many tokens each sentence predicts. For classification it is the
  cross-entropy of the sentence's label.
- `weighted_loss(l, w) = sum(w * l) / sum(w)`, and 0 (still differentiable, zero gradient) when sum(w) = 0.
  The mechanism's estimator divides the noisy sum of clipped updates by a public constant Z
  (docs/mechanism.md step 8). A weighted mean instead of a weighted sum in the client only rescales each update's step,
  which the server learning rate absorbs; privacy is unaffected because the clipping bound beta applies to
  the update whatever loss produced it.
- `evaluate(model, batches)` computes metrics over the whole set, never as averages of per-batch values:
  perplexity = exp(total NLL / total predicted tokens); error rate and macro-F1 from one confusion matrix
  accumulated over every batch. Macro-F1 averages per-class F1 = 2TP / (2TP + FP + FN) over the classes that
  occur in the true or predicted labels (scikit-learn's default; a class with no TP, FP, FN is skipped).
- Perplexity is per token of the model's tokenizer: only comparable between runs with the same tokenizer.
- Every forward of a task (training and evaluation) runs under the model's autocast (uedp.models.precision: a
  model option `dtype` other than float32), and every loss is computed on float32 logits.

The registry (`TASKS`): each task carries its name, how its sentences are framed (`mode`), its headline
`metric` (the key of `evaluate`'s result that summaries and progress lines report: perplexity for next_word,
error for classification) and its aliases. `get_task(name)` refuses an unknown name with a ConfigError naming
the config field; a new task is one call, `register_task(MyTask())`. This module imports torch only inside
functions, so that the config can check a task name without loading torch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from uedp.errors import ConfigError

if TYPE_CHECKING:  # `model` below is a uedp.models.base.UedpModel (which imports this module's names)
    import numpy as np
    import torch

    from uedp.tokenization import Batch

NEXT_WORD = "next_word"
CLASSIFICATION = "classification"
MODES = ("lm", "cls")


class Task(Protocol):
    name: str
    mode: str  # how sentences are framed: "lm" ([BOS] .. [EOS]) or "cls" ([CLS] .. [SEP])
    metric: str  # the headline metric: the key of evaluate()'s result that summaries report (lower is better)
    aliases: tuple[str, ...]  # other names get_task accepts for it

    def per_sentence_loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor: ...

    def evaluate(self, model: torch.nn.Module, batches: Iterable[Batch]) -> dict[str, float]: ...


def _device(model: torch.nn.Module) -> torch.device:
    import torch

    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """`model(batch)` under the model's autocast (uedp.models.precision: nothing for a float32 model), as float32
    logits (a no-op for float32 ones): the losses are always computed in float32."""
    from uedp.models.precision import autocast

    with autocast(model):
        logits = model(batch)
    return logits.float()


class NextWordTask:
    name = NEXT_WORD
    mode = "lm"
    metric = "perplexity"
    aliases = ("lm",)

    @staticmethod
    def token_nll(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(NLL of each target token `[B, T-1]`, 1 where it is a predicted token and 0 on padding `[B, T-1]`):
        position t is the NLL of token t+1 given tokens 0..t (padding positions hold a value; the mask drops it).
        The cross-entropy runs on the whole `[B*T, V]` logits (a view, no copy of the vocabulary-sized tensor);
        the last position, which predicts nothing, gets target ignore_index (NLL 0, no gradient) and is dropped."""
        import torch
        import torch.nn.functional as F

        logits = _logits(model, batch)
        ids = batch.input_ids
        targets = torch.full_like(ids, -100)  # F.cross_entropy's ignore_index
        targets[:, :-1] = ids[:, 1:]
        mask = batch.attention_mask[:, 1:].to(logits.dtype)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
        return nll.view(ids.shape)[:, :-1], mask

    @staticmethod
    def sentence_nll(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed NLL per sentence `[B]`, predicted-token count per sentence `[B]`)."""
        nll, mask = NextWordTask.token_nll(model, batch)
        return (nll * mask).sum(dim=1), mask.sum(dim=1)

    def per_sentence_loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        nll, count = self.sentence_nll(model, batch)
        return nll / count.clamp(min=1)

    def evaluate(self, model: torch.nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        total_nll, total_tokens, sentences = 0.0, 0, 0
        with _eval_mode(model):
            for batch in batches:
                nll, count = self.sentence_nll(model, batch.to(_device(model)))
                total_nll += float(nll.double().sum())
                total_tokens += int(count.sum())
                sentences += len(batch)
        if total_tokens == 0:
            raise ValueError("evaluate(next_word): no token to predict (empty evaluation set)")
        mean = total_nll / total_tokens
        # a diverged model (e.g. destroyed by the noise) has loss > 709: its perplexity is inf, not an error
        perplexity = math.exp(mean) if mean < 709.0 else math.inf
        return {"loss": mean, "perplexity": perplexity, "tokens": total_tokens, "sentences": sentences}


class ClassificationTask:
    name = CLASSIFICATION
    mode = "cls"
    metric = "error"  # error rate, 1 - accuracy
    aliases = ("cls",)

    @staticmethod
    def _labels(batch: Batch) -> torch.Tensor:
        if batch.labels is None:
            raise ValueError("classification batch has no labels")
        return batch.labels

    def per_sentence_loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(_logits(model, batch), self._labels(batch), reduction="none")

    def evaluate(self, model: torch.nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        import numpy as np
        import torch.nn.functional as F

        num_labels = model.num_labels
        if num_labels is None:
            raise ConfigError(f"model {model.family!r} is not a classifier (num_labels is None)")
        confusion = np.zeros((num_labels, num_labels), dtype=np.int64)
        total_loss = 0.0
        with _eval_mode(model):
            for batch in batches:
                batch = batch.to(_device(model))
                logits = _logits(model, batch)
                labels = self._labels(batch)
                total_loss += float(F.cross_entropy(logits, labels, reduction="sum").double())
                confusion += confusion_matrix(logits.argmax(dim=-1), labels, num_labels)
        n = int(confusion.sum())
        if n == 0:
            raise ValueError("evaluate(classification): empty evaluation set")
        return {"loss": total_loss / n, **classification_metrics(confusion), "sentences": n}


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """model.eval() and no_grad inside; the previous training mode is restored after."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


TASKS: dict[str, Task] = {}  # name -> task (register_task)
_ALIASES: dict[str, str] = {}  # alias -> name


def register_task(task: Task) -> Task:
    """Add `task` to the registry: an object with `name`, `mode` (one of MODES), `metric` (a key of its
    evaluate() result), `aliases`, `per_sentence_loss(model, batch)` and `evaluate(model, batches)`. Its name
    and aliases must be new. Returns the task."""
    missing = [a for a in ("name", "mode", "metric", "aliases", "per_sentence_loss", "evaluate")
               if not hasattr(task, a)]
    if missing:
        raise TypeError(f"task {getattr(task, 'name', task)!r} lacks {', '.join(missing)}")
    if not isinstance(task.name, str) or not task.name or not isinstance(task.metric, str) or not task.metric:
        raise TypeError(f"task {task.name!r}: name and metric must be non-empty strings, got metric "
                        f"{task.metric!r}")
    if task.mode not in MODES:
        raise ValueError(f"task {task.name!r}: mode must be one of {', '.join(MODES)}, got {task.mode!r}")
    if isinstance(task.aliases, str) or not all(isinstance(a, str) and a for a in task.aliases):
        raise TypeError(f"task {task.name!r}: aliases must be a tuple of names, got {task.aliases!r}")
    names = [task.name, *task.aliases]
    taken = sorted({n for n in names if n in TASKS or n in _ALIASES or names.count(n) > 1})
    if taken:
        raise ValueError(f"task name(s) {', '.join(taken)} registered twice")
    TASKS[task.name] = task
    _ALIASES.update(dict.fromkeys(task.aliases, task.name))
    return task


register_task(NextWordTask())
register_task(ClassificationTask())


def task_names() -> list[str]:
    """The registered tasks' names (not their aliases), sorted."""
    return sorted(TASKS)


def get_task(name: str, *, field: str = "task.name") -> Task:
    """The task called `name` (or one of its aliases); an unknown name is a ConfigError naming `field`."""
    task = TASKS.get(_ALIASES.get(name, name)) if isinstance(name, str) else None
    if task is None:
        raise ConfigError(f"{field}: unknown task {name!r}; choose one of: {', '.join(task_names())}")
    return task


def per_sentence_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Loss of each sentence of `batch` `[B]`, under the model's own task."""
    return get_task(model.task).per_sentence_loss(model, batch)


def evaluate(model: torch.nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
    """Whole-set metrics under the model's task (see module docstring)."""
    return get_task(model.task).evaluate(model, batches)


def weighted_loss(per_sentence: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum(w * l) / sum(w); 0 with a zero gradient when sum(w) == 0. Weights must be finite and >= 0."""
    import torch

    if per_sentence.shape != weights.shape or per_sentence.dim() != 1:
        raise ValueError(f"weighted_loss: losses {tuple(per_sentence.shape)} and weights "
                         f"{tuple(weights.shape)} must be vectors of the same length")
    # checked where the weights are (the CPU, in local_train): no wait for the loss's device
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError(f"weighted_loss: weights must be finite and >= 0, got {weights.tolist()}")
    if not bool((weights.to(dtype=per_sentence.dtype) > 0).any()):
        return (per_sentence * 0.0).sum()
    w = weights.to(per_sentence)
    return (w * per_sentence).sum() / w.sum()


def confusion_matrix(preds: torch.Tensor, labels: torch.Tensor, num_labels: int) -> np.ndarray:
    """Counts `[true, predicted]`, `num_labels` x `num_labels`."""
    import torch

    idx = labels.detach().cpu().long() * num_labels + preds.detach().cpu().long()
    return torch.bincount(idx, minlength=num_labels * num_labels).view(num_labels, num_labels).numpy()


def classification_metrics(confusion: np.ndarray) -> dict[str, float]:
    """error, accuracy and macro-F1 (classes present in true or predicted labels) from a confusion matrix."""
    import numpy as np

    confusion = np.asarray(confusion, dtype=np.int64)
    n = int(confusion.sum())
    if n == 0:
        raise ValueError("classification_metrics: empty confusion matrix")
    tp = np.diag(confusion).astype(np.float64)
    fp = confusion.sum(axis=0) - tp
    fn = confusion.sum(axis=1) - tp
    present = (tp + fp + fn) > 0
    f1 = 2 * tp[present] / (2 * tp[present] + fp[present] + fn[present])
    accuracy = float(tp.sum()) / n
    return {"error": 1.0 - accuracy, "accuracy": accuracy, "macro_f1": float(f1.mean())}
