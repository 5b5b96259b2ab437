"""What the idle and identity checks read: SGLang's /v1/loads (every entry, as R4's client checks
them), the Prometheus gauges where it is missing, and a /server_info that differs from the profile."""

from __future__ import annotations

import pytest

from sparkctl.qa import idle


def test_loads_are_read_in_sglangs_shape_and_summed_over_every_entry() -> None:
    doc = {
        "dp_rank_count": 2,
        "loads": [
            {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0},
            {"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 1},
        ],
    }
    assert idle.parse_loads(doc) == (2, 1)
    assert idle.parse_loads({"num_running_reqs": 0, "num_waiting_reqs": 0}) == (0, 0)
    with pytest.raises(ValueError):
        idle.parse_loads({"loads": [{"dp_rank": 0}]})


def test_the_prometheus_gauges_stand_in_for_loads() -> None:
    text = "\n".join(
        [
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0',
            'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 0.0',
            "sglang:num_requests_total 40",
        ]
    )
    assert idle.parse_metrics(text) == (3, 0)
    with pytest.raises(ValueError):
        idle.parse_metrics("sglang:num_requests_total 40\n")


def test_a_server_that_differs_from_the_profile_is_refused_naming_each_field() -> None:
    info = {"tp_size": 4, "max_running_requests": 16}
    with pytest.raises(idle.BusyError) as err:
        idle.check_identity(info, lambda i: ["max_running_requests=16, rendered 8"], ["tp_size"])
    assert "max_running_requests=16, rendered 8" in err.value.message and err.value.exit_code == 1
    assert err.value.details == ["max_running_requests=16, rendered 8"]
    assert idle.check_identity(info, lambda i: [], ["tp_size", "ep_size"]) == {"tp_size": 4, "ep_size": None}
