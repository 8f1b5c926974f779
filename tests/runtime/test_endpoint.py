"""Endpoint rules: which one fires, and bad settings."""

import pytest

from wenet_lite.runtime.endpoint import EndpointConfig, detect_endpoint

CFG = EndpointConfig(rule1_min_silence=2.0, rule2_min_silence=1.0, rule3_max_length=10.0)


@pytest.mark.parametrize(
    "decoded,silence,length,rule",
    [
        (False, 1.9, 5.0, 0),  # a pause before any speech, not yet long enough
        (False, 2.0, 5.0, 1),
        (True, 0.9, 5.0, 0),
        (True, 1.0, 5.0, 2),  # end of a sentence
        (False, 1.5, 5.0, 0),  # rule 2 needs something decoded
        (True, 0.0, 10.0, 3),  # too long, even mid-word
        (False, 0.0, 10.0, 3),
    ],
)
def test_rules(decoded: bool, silence: float, length: float, rule: int) -> None:
    assert detect_endpoint(CFG, decoded, silence, length) == rule


def test_disabled_never_fires() -> None:
    assert detect_endpoint(EndpointConfig(enabled=False), True, 100.0, 1000.0) == 0


def test_bad_settings_named() -> None:
    with pytest.raises(ValueError, match="rule2_min_silence"):
        EndpointConfig(rule2_min_silence=0)
