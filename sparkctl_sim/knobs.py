"""The simulator's own knobs: environment variables (faults, speeds, memory) that the lab profile's
``simulator:`` section maps onto, read once at start. The ``SPARKCTL_SIM_KIT_*`` ones come from the
profile's serving kit instead: with them the simulated rank runs the kit launcher's checks first
(``sparkctl_sim.kit``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkctl_sim.config import ArgError

FAULTS = (
    "wrong-arithmetic",
    "unstable-output",
    "bad-json",
    "no-tool-call",
    "lose-needle",
    "blind",
    "misread-code",
    "garbage-at-batch",
    "never-ready",
)


@dataclass(frozen=True)
class Knob:
    env: str
    default: str
    help: str


KNOBS: tuple[Knob, ...] = (
    Knob("SPARKCTL_SIM_BOOT_DELAY_S", "2", "seconds of simulated model loading after all ranks joined"),
    Knob("SPARKCTL_SIM_TOKEN_RATE", "50", "decode tokens per second per request"),
    Knob(
        "SPARKCTL_SIM_BATCH_SLOWDOWN",
        "0",
        "per-request rate = rate / (1 + slowdown × (running − 1)); 0 keeps every stream at the rate",
    ),
    Knob("SPARKCTL_SIM_TTFT_S", "0.05", "fixed time to first token, seconds"),
    Knob(
        "SPARKCTL_SIM_PREFILL_RATE",
        "20000",
        "prompt tokens per second added to the time to first token; one prefill runs at a time, "
        "so requests arriving together queue for it",
    ),
    Knob("SPARKCTL_SIM_HOLD_MIB", "0", "MiB of memory each rank allocates, touches and holds after joining"),
    Knob("SPARKCTL_SIM_FAULT", "", "comma-separated faults for negative tests: " + ", ".join(FAULTS)),
    Knob("SPARKCTL_SIM_HEARTBEAT_S", "1", "heartbeat interval between rank 0 and each worker"),
    # 15 s, not a few: on the lab's 2 cores, with three labs booting side by side, a rank 0 faulting in
    # its held memory fell silent for over 3 s and its worker left a group that was healthy.
    Knob("SPARKCTL_SIM_PEER_TIMEOUT_S", "15", "silence after which a peer counts as lost"),
    Knob("SPARKCTL_SIM_HEAD_LOSS_EXIT_S", "10", "a worker exits (status 1) this long after losing rank 0"),
    Knob("SPARKCTL_SIM_DEFAULT_MAX_TOKENS", "128", "completion budget when a request sets no max_tokens"),
    Knob(
        "SPARKCTL_SIM_KIT_DIR",
        "",
        "absolute path where the serving kit is mounted; set, the simulator runs the kit launcher's "
        "checks (simulated) and requires the kit's build products (adapter/librow_store.so as "
        "row-store-build.json records it, b12x/ as vendor/b12x-source-manifest.json lists it) before "
        "it may become ready, and prints the kit's readiness markers; unset, no kit checks",
    ),
    Knob(
        "SPARKCTL_SIM_KIT_MANIFEST",
        "patches/manifest.json",
        "the overlay manifest inside the kit ({rel: {before_sha256, after_sha256}}), relative to KIT_DIR",
    ),
    Knob(
        "SPARKCTL_SIM_KIT_TARGET",
        "/sgl-workspace/sglang",
        "absolute root where each overlay must sit: TARGET/<rel> with its after_sha256",
    ),
    Knob(
        "SPARKCTL_SIM_KIT_ADAPTERS",
        "",
        "comma list of kit directories (relative to KIT_DIR) that must be on PYTHONPATH",
    ),
)


# A profile's `simulator:` keys -> knob variables (any knob may also be named by its lower-case suffix,
# e.g. `ttft_s` -> SPARKCTL_SIM_TTFT_S).
PROFILE_KEYS = {
    "hold_mem_mib": "SPARKCTL_SIM_HOLD_MIB",
    "fault": "SPARKCTL_SIM_FAULT",
    "faults": "SPARKCTL_SIM_FAULT",
}


def knob_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """The environment that gives a rank these simulator settings (a profile's ``simulator:`` section).

    Raises ValueError naming an unknown key or a bad value, checked exactly as the rank would check it.
    """
    known = {k.env for k in KNOBS}
    env: dict[str, str] = {}
    for key, value in settings.items():
        name = PROFILE_KEYS.get(key) or "SPARKCTL_SIM_" + key.upper()
        if name not in known:
            choices = ", ".join(
                sorted({k.env[len("SPARKCTL_SIM_") :].lower() for k in KNOBS} | set(PROFILE_KEYS))
            )
            raise ValueError(f"simulator.{key}: unknown simulator setting; known: {choices}")
        if value is None:
            continue
        if isinstance(value, list | tuple | set | frozenset):
            text = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            raise ValueError(f"simulator.{key}: expected a number or text, got {value}")
        else:
            text = str(value)
        env[name] = text
    try:
        load_knobs(env)
    except ArgError as exc:
        raise ValueError(str(exc)) from None
    return env


@dataclass(frozen=True)
class Knobs:
    boot_delay_s: float = 2.0
    token_rate: float = 50.0
    batch_slowdown: float = 0.0
    ttft_s: float = 0.05
    prefill_rate: float = 20000.0
    hold_mib: int = 0
    faults: frozenset[str] = field(default_factory=frozenset)
    heartbeat_s: float = 1.0
    peer_timeout_s: float = 15.0
    head_loss_exit_s: float = 10.0
    default_max_tokens: int = 128
    kit_dir: str | None = None
    kit_manifest: str = "patches/manifest.json"
    kit_target: str = "/sgl-workspace/sglang"
    kit_adapters: tuple[str, ...] = ()

    def has(self, fault: str) -> bool:
        return fault in self.faults

    def as_dict(self) -> dict[str, Any]:
        return {
            "boot_delay_s": self.boot_delay_s,
            "token_rate": self.token_rate,
            "batch_slowdown": self.batch_slowdown,
            "ttft_s": self.ttft_s,
            "prefill_rate": self.prefill_rate,
            "hold_mib": self.hold_mib,
            "faults": sorted(self.faults),
            "heartbeat_s": self.heartbeat_s,
            "peer_timeout_s": self.peer_timeout_s,
            "head_loss_exit_s": self.head_loss_exit_s,
            "default_max_tokens": self.default_max_tokens,
            "kit_dir": self.kit_dir,
            "kit_manifest": self.kit_manifest,
            "kit_target": self.kit_target,
            "kit_adapters": list(self.kit_adapters),
        }


def _num(env: Mapping[str, str], name: str, default: str, kind: type, minimum: float) -> Any:
    raw = env.get(name, "").strip() or default
    try:
        value = kind(raw)
    except ValueError:
        raise ArgError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
    if value < minimum:
        raise ArgError(f"{name}={raw!r} must be >= {minimum}")
    return value


def _kit_path(name: str, raw: str, absolute: bool) -> str:
    """A kit path knob: absolute, or relative to the kit without ``..``."""
    raw = raw.strip()
    if absolute and not os.path.isabs(raw):
        raise ArgError(f"{name}={raw!r} must be an absolute path")
    if not absolute and (os.path.isabs(raw) or ".." in raw.split("/") or not raw.strip("/.")):
        raise ArgError(f"{name}={raw!r} must be a path inside the kit (relative, no '..')")
    return os.path.normpath(raw)


def load_knobs(env: Mapping[str, str] | None = None) -> Knobs:
    env = os.environ if env is None else env
    defaults = {k.env: k.default for k in KNOBS}
    faults = frozenset(f.strip() for f in env.get("SPARKCTL_SIM_FAULT", "").split(",") if f.strip())
    unknown = sorted(faults - set(FAULTS))
    if unknown:
        raise ArgError(
            f"SPARKCTL_SIM_FAULT: unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}"
        )
    rate = _num(env, "SPARKCTL_SIM_TOKEN_RATE", defaults["SPARKCTL_SIM_TOKEN_RATE"], float, 0.0)
    if rate <= 0:
        raise ArgError("SPARKCTL_SIM_TOKEN_RATE must be positive")
    kit_dir = env.get("SPARKCTL_SIM_KIT_DIR", "").strip() or None
    if kit_dir is not None:
        kit_dir = _kit_path("SPARKCTL_SIM_KIT_DIR", kit_dir, absolute=True)
    adapters = tuple(
        _kit_path("SPARKCTL_SIM_KIT_ADAPTERS", a, absolute=False)
        for a in env.get("SPARKCTL_SIM_KIT_ADAPTERS", "").split(",")
        if a.strip()
    )
    return Knobs(
        boot_delay_s=_num(env, "SPARKCTL_SIM_BOOT_DELAY_S", defaults["SPARKCTL_SIM_BOOT_DELAY_S"], float, 0),
        token_rate=rate,
        batch_slowdown=_num(
            env, "SPARKCTL_SIM_BATCH_SLOWDOWN", defaults["SPARKCTL_SIM_BATCH_SLOWDOWN"], float, 0
        ),
        ttft_s=_num(env, "SPARKCTL_SIM_TTFT_S", defaults["SPARKCTL_SIM_TTFT_S"], float, 0),
        prefill_rate=_num(env, "SPARKCTL_SIM_PREFILL_RATE", defaults["SPARKCTL_SIM_PREFILL_RATE"], float, 1),
        hold_mib=_num(env, "SPARKCTL_SIM_HOLD_MIB", defaults["SPARKCTL_SIM_HOLD_MIB"], int, 0),
        faults=faults,
        heartbeat_s=_num(env, "SPARKCTL_SIM_HEARTBEAT_S", defaults["SPARKCTL_SIM_HEARTBEAT_S"], float, 0.05),
        peer_timeout_s=_num(
            env, "SPARKCTL_SIM_PEER_TIMEOUT_S", defaults["SPARKCTL_SIM_PEER_TIMEOUT_S"], float, 0.1
        ),
        head_loss_exit_s=_num(
            env, "SPARKCTL_SIM_HEAD_LOSS_EXIT_S", defaults["SPARKCTL_SIM_HEAD_LOSS_EXIT_S"], float, 0
        ),
        default_max_tokens=_num(
            env, "SPARKCTL_SIM_DEFAULT_MAX_TOKENS", defaults["SPARKCTL_SIM_DEFAULT_MAX_TOKENS"], int, 1
        ),
        kit_dir=kit_dir,
        kit_manifest=_kit_path(
            "SPARKCTL_SIM_KIT_MANIFEST",
            env.get("SPARKCTL_SIM_KIT_MANIFEST", "").strip() or defaults["SPARKCTL_SIM_KIT_MANIFEST"],
            absolute=False,
        ),
        kit_target=_kit_path(
            "SPARKCTL_SIM_KIT_TARGET",
            env.get("SPARKCTL_SIM_KIT_TARGET", "").strip() or defaults["SPARKCTL_SIM_KIT_TARGET"],
            absolute=True,
        ),
        kit_adapters=adapters,
    )
