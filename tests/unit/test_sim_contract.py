"""The product and the simulator agree on the simulator's environment, without importing each other."""

from __future__ import annotations

import pytest

from sparkctl.profiles import Simulator, load_profile
from sparkctl_sim.knobs import KNOBS, knob_env


def test_every_profile_setting_names_a_simulator_knob() -> None:
    known = {k.env for k in KNOBS}
    assert set(Simulator.ENV.values()) <= known


@pytest.mark.parametrize("faults", [[], ["bad-json"]])
def test_rendered_environment_is_what_the_simulator_reads(faults: list[str]) -> None:
    sim = load_profile("lab").simulator
    assert sim is not None
    sim = sim.model_copy(update={"faults": faults})
    settings = sim.model_dump()
    if not faults:
        settings.pop("faults")
    assert sim.environment() == knob_env(settings)
