"""A rescaled generation's settings: only the commands topic, its partitions and checkpoint change; outputs keep theirs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from app.rescale.generation import Generation, first, overlay, successor
from app.settings import Settings, checkpoint_uri
from app.validator.murmur2 import partition_for
from app.validator.outputs import output_partition

pytestmark = pytest.mark.unit


def _base() -> Settings:
    return Settings(topic_commands="cmds", partitions=4, var_dir="/tmp/x-var")  # type: ignore[arg-type]


def test_generation_0_is_the_settings_and_changes_nothing() -> None:
    s = _base()
    g0 = first(s)
    assert (g0.number, g0.topic, g0.partitions, g0.checkpoint) == (0, "cmds", 4, checkpoint_uri(s))
    assert overlay(s, g0) is s


def test_a_later_generation_moves_only_the_commands_topic_and_keeps_every_derived_name() -> None:
    s = _base()
    g2 = successor(s, successor(s, first(s), 6), 2)
    o = overlay(s, g2)
    assert (o.topic_commands, o.partitions, o.output_partitions) == ("cmds.g2", 2, 4)
    assert checkpoint_uri(o) == f"{checkpoint_uri(s)}/generations/g2"
    assert (o.parked_topic, o.rules_topic, o.parked_log_topic, o.generations_topic) == \
        (s.parked_topic, s.rules_topic, s.parked_log_topic, s.generations_topic) == \
        ("cmds-parked", "cmds-rules", "cmds-parked-log", "cmds-generations")
    assert o.topic_commands_source == "cmds" and o.starting_offsets == "earliest"
    assert overlay(o, g2) == o  # applying it to settings already overlaid changes nothing


def test_a_generation_record_round_trips() -> None:
    g = Generation(3, "cmds.g3", 12, "/c/generations/g3", True, "2026-01-01T00:00:00+00:00", "ops@host")
    assert Generation.parse(g.dumps()) == g


@given(st.binary(min_size=1, max_size=20), st.integers(1, 20), st.integers(1, 20))
def test_outputs_of_a_rescaled_generation_go_where_their_key_hashes_among_the_output_partitions(
        key: bytes, commands: int, outputs: int) -> None:
    s = _base().model_copy(update={"partitions": commands, "output_partitions": outputs})
    source = partition_for(key, commands)
    want = source if commands == outputs else partition_for(key, outputs)
    assert output_partition(s, key, source) == want
    assert output_partition(s, None, source) == (source if commands == outputs else source % outputs)
    assert output_partition(_base(), key, 3) == 3  # unrescaled: the source partition, as before


def test_only_a_generation_record_signed_as_one_counts() -> None:
    """A generation names the topic the API writes to: one produced without Arbiter's record key, or signed as a
    command (a user could have had the API sign that), is ignored."""
    from app.rescale.chain import GenerationChain
    from app.rescale.generation import KEY
    from app.signing import GENERATION_DOMAIN, signer_for
    from app.validator.topic_io import Record

    s = _base().model_copy(update={"auth_secret": SecretStr("a-secret-of-at-least-thirty-two-bytes!!")})
    value = successor(s, first(s), 6).dumps()
    at = ("cmds-generations", 0, 3)

    def counts(settings: Settings, record: Record) -> bool:
        return GenerationChain(settings, first(settings)).add(record) is not None

    assert counts(s, Record(*at, KEY, value, tuple(signer_for(s, GENERATION_DOMAIN).headers(KEY, value))))
    assert not counts(s, Record(*at, KEY, value))  # unsigned
    other = s.model_copy(update={"auth_secret": SecretStr("another-secret-of-thirty-two-bytes!!")})
    forged = signer_for(other, GENERATION_DOMAIN).headers(KEY, value)
    assert not counts(s, Record(*at, KEY, value, tuple(forged)))  # signed with another key
    tampered = successor(s, first(s), 7).dumps()
    assert not counts(s, Record(*at, KEY, tampered, tuple(signer_for(s, GENERATION_DOMAIN).headers(KEY, value))))
    open_ = s.model_copy(update={"allow_unsigned_commands": True})
    assert not counts(open_, Record(*at, KEY, value))  # unsigned producers allowed: for commands, never here


def test_rescale_status_needs_no_partitions_and_a_rescale_names_what_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    """`arbiter rescale --status`, as the rescale page and every MISROUTED message print it, parses; a rescale
    without --partitions exits 2 naming it; --help shows --wait's default."""
    from app.cli import build_parser, main

    args = build_parser().parse_args(["rescale", "--status"])
    assert args.status and args.partitions is None
    with pytest.raises(SystemExit) as exit_:
        main(["rescale"])
    assert exit_.value.code == 2 and "--partitions is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rescale", "--help"])
    assert "(default: 300)" in capsys.readouterr().out
