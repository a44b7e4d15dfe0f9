"""The path of one round through the project's code, measured: which modules a round enters, how often its calls
cross from one module to another, and how many times a node reads each piece of the round's data.

`trace_round(cfg, round=2)` runs `cfg` in process (runtime/local_grid.py: the strategy, the ClientApp and its
mods, as a Flower run has them, without Ray or gRPC) with a profile hook on round `round` only: from the
strategy's `configure_train` of that round to the next one's (or the end of the run), which includes the round's
aggregation, release, ledger, checkpoint and central evaluation. Each Python call into a project file (not the
tests, not the installed packages) is one call; a call made while a node's ClientApp handles a message is on
the node side, any other on the server side. A switch is a call into another module than the project call
before it on the same side: how often the round climbs from one module to another.

The reads of the round's data on a node are counted from the calls that read them: the instructions parsed
(`RoundInstructions.from_record`) and the global arrays decoded (`decode_array` of the mod, which also decodes
the train function's new model) per training message. docs/architecture.md, "One round's data, module by
module", cites the table `python -m experiments.round_path` writes.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from uedp.config import RunConfig
from uedp.markdown import table

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("server", "node")


@dataclass
class Side:
    """One side's calls in the round: per module, the calls and the switches into it."""

    calls: collections.Counter = field(default_factory=collections.Counter)
    switches: collections.Counter = field(default_factory=collections.Counter)
    functions: collections.Counter = field(default_factory=collections.Counter)  # (module, qualname)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def total_switches(self) -> int:
        return sum(self.switches.values())


@dataclass
class RoundTrace:
    """A traced round: each side's calls, and the training messages the nodes handled."""

    round: int
    sides: dict[str, Side]
    messages: int

    @property
    def modules(self) -> set[str]:
        return set().union(*(set(s.calls) for s in self.sides.values()))

    def node_reads(self, module: str, function: str) -> int:
        """Calls of `function` of `module` on the node side."""
        return self.sides["node"].functions[(module, function)]

    def per_message(self, module: str, function: str) -> float:
        return self.node_reads(module, function) / max(self.messages, 1)


class _Tracer:
    """The profile hook: project calls of the traced round, by side."""

    def __init__(self) -> None:
        self.node_depth = 0  # > 0 inside a node's ClientApp
        self.sides = {side: Side() for side in SIDES}
        self.last: dict[str, str | None] = dict.fromkeys(SIDES)
        self.messages = 0
        self._names: dict[CodeType, str | None] = {}

    def module(self, code: CodeType) -> str | None:
        name = self._names.get(code, "")
        if name == "":
            path = os.path.abspath(code.co_filename)
            inside = path.endswith(".py") and path != os.path.abspath(__file__) and path.startswith(
                str(ROOT) + os.sep) and not any(
                part in path for part in (os.sep + ".venv" + os.sep, os.sep + "tests" + os.sep, "site-packages"))
            name = os.path.relpath(path, ROOT) if inside else None
            self._names[code] = name
        return name

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if code.co_name == "__call__" and code.co_filename.endswith(os.path.join("flwr", "clientapp", "client_app.py")):
            self.node_depth += 1 if event == "call" else -1
            self.messages += event == "call"
            return
        if event != "call":
            return
        module = self.module(code)
        if module is None:
            return
        side = "node" if self.node_depth > 0 else "server"
        record = self.sides[side]
        record.calls[module] += 1
        record.functions[(module, code.co_qualname)] += 1
        if self.last[side] not in (None, module):
            record.switches[module] += 1
        self.last[side] = module


@contextmanager
def _profiled(tracer: _Tracer, round: int) -> Iterator[None]:
    """Profile with `tracer` from the strategy's configure_train of round `round` to that of the next round (or
    the end): the hook is installed and removed by a wrapper of `UserEntityDP.configure_train`, so the run's set-up
    and imports before the round are not traced (profiling them would take most of the time)."""
    from uedp.flower.strategy import UserEntityDP

    original = UserEntityDP.configure_train
    calls = [0]

    def configure_train(self: UserEntityDP, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        sys.setprofile(tracer if calls[0] == round else None)
        return original(self, *args, **kwargs)

    UserEntityDP.configure_train = configure_train  # type: ignore[method-assign]
    try:
        yield
    finally:
        sys.setprofile(None)
        UserEntityDP.configure_train = original  # type: ignore[method-assign]


def trace_round(cfg: RunConfig, *, round: int = 2) -> RoundTrace:
    """Run `cfg` in process and trace round `round` (module docstring). The run writes its outputs to
    cfg.federation.out_dir as any run does."""
    from runtime.local_grid import run_local
    from uedp.pipeline import prepare

    if not 1 <= round <= cfg.federation.rounds:
        raise ValueError(f"round must lie in 1..{cfg.federation.rounds} (federation.rounds), got {round}")
    if not cfg.owners:
        prepare(cfg)  # the corpus, its entities and tokenizer, before the hook (cached: the run reads them back)
    tracer = _Tracer()
    with _profiled(tracer, round):
        run_local(cfg)
    return RoundTrace(round=round, sides=tracer.sides, messages=tracer.messages)


# The reads of the round's data a node makes, per training message: (label, module, function)
NODE_READS = (
    ("instructions parsed", "uedp/protocol.py", "RoundInstructions.from_record"),
    ("arrays decoded (the global and the new model's: 2 per array)", "uedp/privacy/replies.py", "decode_array"),
    ("run config read", "uedp/config.py", "RunConfig.from_flat"),
    ("run config flattened", "uedp/config.py", "RunConfig.to_flat"),
)


def round_config(out: Path, *, users: int = 8, rounds: int = 3) -> RunConfig:
    """The traced run: `users` users of the synthetic corpus, each a node sampled every round (q_u 1), a 16-dim
    LSTM, `rounds` rounds each evaluated and checkpointed, reproducible (privacy.seed 0: not private)."""
    return RunConfig.from_nested({
        "dataset": {"options": {"num_users": users, "min_sentences": 20, "max_sentences": 30}},
        "tokenizer": {"vocab_size": 300}, "task": {"max_len": 16},
        "model": {"options": {"emb_dim": 16, "hidden_dim": 16}},
        "privacy": {"q_u": 1.0, "q_e": 0.5, "q_s": 0.5, "m_max": users, "k_cap": 2, "beta": 0.5,
                    "noise_multiplier": 1.0, "target_epsilon": None, "delta": 1e-3, "seed": 0},
        "train": {"lr": 0.5, "batch_size": 8},
        "federation": {"rounds": rounds, "eval_every": 1, "checkpoint_every": 1, "out_dir": str(out)},
    })


def render(trace: RoundTrace) -> str:
    """The trace as markdown: totals per side, the node's reads per message, and each module's calls."""
    sides = [(name, side.total_calls, side.total_switches, len(side.calls)) for name, side in trace.sides.items()]
    sides.append(("both", sum(s[1] for s in sides), sum(s[2] for s in sides), len(trace.modules)))
    server, node = trace.sides["server"], trace.sides["node"]
    modules = sorted(trace.modules, key=lambda m: (-(server.calls[m] + node.calls[m]), m))
    return "\n\n".join([
        f"Round {trace.round}: {trace.messages} training messages answered by the nodes.",
        table(["side", "project calls", "module switches", "modules entered"],
              [(name, f"{calls:,}", f"{switches:,}", modules) for name, calls, switches, modules in sides]),
        table(["on a node, per training message", "calls"],
              [(f"{label} (`{module}` `{function}`)", f"{trace.per_message(module, function):g}")
               for label, module, function in NODE_READS]),
        table(["module", "server calls", "node calls", "switches into it"],
              [(f"`{m}`", f"{server.calls[m]:,}", f"{node.calls[m]:,}", f"{server.switches[m] + node.switches[m]:,}")
               for m in modules]),
    ]) + "\n"
