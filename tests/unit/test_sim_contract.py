"""The product and the simulator agree on the simulator's environment, without importing each other."""

from __future__ import annotations

import pytest

from sparkctl.profiles import Simulator, load_profile
from sparkctl_sim.knobs import KNOBS, knob_env, load_knobs


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


def test_the_lab_kit_environment_is_what_the_simulator_checks() -> None:
    """The variables render gives a kit profile's rank load as the simulator's kit knobs, and the
    profile's own PYTHONPATH holds every adapter the simulated launcher will look for."""
    profile = load_profile("lab")
    assert profile.simulator is not None and profile.kit is not None
    kit = profile.kit
    assert set(Simulator.KIT_ENV.values()) <= {k.env for k in KNOBS}
    knobs = load_knobs(profile.simulator.kit_environment(kit))
    assert (knobs.kit_dir, knobs.kit_manifest, knobs.kit_target) == (
        kit.mount,
        kit.manifest,
        kit.overlay_target,
    )
    assert knobs.kit_adapters == tuple(kit.adapters)
    pythonpath = profile.env["PYTHONPATH"].split(":")
    assert all(f"{kit.mount}/{adapter}" in pythonpath for adapter in kit.adapters)
