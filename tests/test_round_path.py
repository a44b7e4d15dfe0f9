"""One round's path through the code (studies/round_path.py): a node reads the round's data once and never the
run configuration; the tracer counts what it says it counts."""

from __future__ import annotations

import pytest

from studies.round_path import NODE_READS, render, round_config, trace_round


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return trace_round(round_config(tmp_path_factory.mktemp("round_path"), users=4, rounds=2), round=2)


def test_every_sampled_node_answers_one_training_message(trace):
    assert trace.messages == 4  # q_u 1: every node, every round
    assert trace.sides["node"].functions[("client/update.py", "ClientRound.__call__")] == 4
    assert trace.sides["server"].functions[("uedp/flower/strategy.py", "UserEntityDP.configure_train")] == 1


def test_a_node_reads_the_instructions_and_the_arrays_once(trace):
    """The mod parses the instructions and decodes the global arrays and hands both to the train function
    (uedp.flower.mod.received): one parse a message, and each array decoded twice (the global model's once, the
    new model's once)."""
    assert trace.per_message("uedp/protocol.py", "RoundInstructions.from_record") == 1
    # the server decodes each reply's update once (uedp.privacy.replies.intake): the model's arrays a message
    arrays = trace.sides["server"].functions[("uedp/privacy/replies.py", "decode_array")] / trace.messages
    assert arrays >= 2 and trace.per_message("uedp/privacy/replies.py", "decode_array") == 2 * arrays


def test_the_round_never_reads_the_run_configuration_on_a_node(trace):
    """The RunConfig stops at the ClientApp's edge: a node resolves its setup on its first message
    (client/app.py NodeSetup); a later round neither reads nor flattens the config, nor prepares data."""
    node = trace.sides["node"]
    assert not [m for m in node.calls if m in ("uedp/config.py", "uedp/pipeline.py") or m.startswith("uedp/prepare/")]
    assert trace.per_message("uedp/config.py", "RunConfig.to_flat") == 0


def test_the_table_names_every_module_and_read(trace):
    text = render(trace)
    assert "| node |" in text and "| server |" in text
    for label, _, _ in NODE_READS:
        assert label in text
    for module in trace.modules:
        assert f"`{module}`" in text
    assert all(not m.startswith("<") and m.endswith(".py") for m in trace.modules)
    assert not any(m.startswith("tests/") for m in trace.modules)


def test_the_traced_round_must_exist(tmp_path):
    with pytest.raises(ValueError, match="round must lie in 1..2"):
        trace_round(round_config(tmp_path, users=2, rounds=2), round=3)
