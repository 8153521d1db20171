"""Changing a bottleneck's rate during a run (Network.set_rate): which shapers can. The
change itself is exercised on the wire by tests/test_careful_resume.py's stale state."""
from __future__ import annotations

import pytest

from links.shapers import Shaper, registry
from machine.errors import UserError


def test_tbf_and_htb_can_change_their_rate():
    assert {k for k, c in registry().items() if c.set_rate is not Shaper.set_rate} >= {"tbf", "htb"}


def test_a_shaper_that_cannot_says_which_can():
    with pytest.raises(UserError, match="cannot change its rate during a run; choose one that can: .*tbf"):
        registry()["delayline"]().set_rate(None, None, 1e6)
