"""The validator's projection mode (``validator_codegen``) becomes the session options Spark reads, unless the
user's own ``spark_conf`` names them."""

from __future__ import annotations

import pytest

from app.settings import Settings
from app.validator.codegen import FACTORY_MODE, WHOLE_STAGE, codegen_conf

pytestmark = pytest.mark.unit


def test_interpreted_by_default() -> None:
    assert Settings().validator_codegen == "interpreted"
    assert codegen_conf(Settings()) == {FACTORY_MODE: "NO_CODEGEN", WHOLE_STAGE: "false"}


def test_compiled_leaves_spark_defaults() -> None:
    assert codegen_conf(Settings(validator_codegen="compiled")) == {}


def test_spark_conf_wins_key_by_key() -> None:
    s = Settings(spark_conf={FACTORY_MODE: "FALLBACK"})
    assert codegen_conf(s) == {WHOLE_STAGE: "false"}

