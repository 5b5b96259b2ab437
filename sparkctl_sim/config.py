"""Parse a real SGLang argv (plus ``--config FILE.yaml``); the simulator's own knobs are in ``knobs``.

Flags the simulator acts on are typed and checked the way SGLang checks them; every other flag is
kept as given (``--flag`` → ``True``, ``--flag v`` → ``v``, ``--flag a b c`` → ``[a, b, c]``) so that
``/server_info`` echoes the whole configuration under SGLang's field names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROG = "sparkctl-sim-rank"


class ArgError(Exception):
    """A bad command line or config file (exit status 2, like argparse)."""


# flag -> (field name, type). Types: int, float, str, bool (store_true).
_TYPED: dict[str, tuple[str, type]] = {
    "--model-path": ("model_path", str),
    "--tokenizer-path": ("tokenizer_path", str),
    "--served-model-name": ("served_model_name", str),
    "--tp-size": ("tp_size", int),
    "--ep-size": ("ep_size", int),
    "--dp-size": ("dp_size", int),
    "--pp-size": ("pp_size", int),
    "--attn-dp-size": ("attn_dp_size", int),
    "--nnodes": ("nnodes", int),
    "--node-rank": ("node_rank", int),
    "--dist-init-addr": ("dist_init_addr", str),
    "--dist-timeout": ("dist_timeout", int),
    "--host": ("host", str),
    "--port": ("port", int),
    "--context-length": ("context_length", int),
    "--max-running-requests": ("max_running_requests", int),
    "--max-total-tokens": ("max_total_tokens", int),
    "--chunked-prefill-size": ("chunked_prefill_size", int),
    "--max-prefill-tokens": ("max_prefill_tokens", int),
    "--mem-fraction-static": ("mem_fraction_static", float),
    "--speculative-algorithm": ("speculative_algorithm", str),
    "--speculative-dspark-block-size": ("speculative_dspark_block_size", int),
    "--speculative-num-draft-tokens": ("speculative_num_draft_tokens", int),
    "--moe-runner-backend": ("moe_runner_backend", str),
    "--speculative-moe-runner-backend": ("speculative_moe_runner_backend", str),
    "--attention-backend": ("attention_backend", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--api-key": ("api_key", str),
    "--admin-api-key": ("admin_api_key", str),
    "--random-seed": ("random_seed", int),
    "--watchdog-timeout": ("watchdog_timeout", float),
    "--enable-metrics": ("enable_metrics", bool),
    "--skip-server-warmup": ("skip_server_warmup", bool),
    "--trust-remote-code": ("trust_remote_code", bool),
    "--enable-multimodal": ("enable_multimodal", bool),
    "--config": ("config", str),
}

_ALIASES = {
    "--tensor-parallel-size": "--tp-size",
    "--tp": "--tp-size",
    "--expert-parallel-size": "--ep-size",
    "--ep": "--ep-size",
    "--data-parallel-size": "--dp-size",
    "--attention-data-parallel-size": "--attn-dp-size",
    "--nccl-init-addr": "--dist-init-addr",
}

# What SGLang resolves when a flag is absent (the V4.1 hooks where they differ from the generic default).
_DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "tokenizer_path": None,
    "served_model_name": None,
    "tp_size": 1,
    "ep_size": 1,
    "dp_size": 1,
    "pp_size": 1,
    "attn_dp_size": 1,
    "nnodes": 1,
    "node_rank": 0,
    "dist_init_addr": None,
    "dist_timeout": None,
    "host": "127.0.0.1",
    "port": 30000,
    "context_length": None,
    "max_running_requests": 256,
    "max_total_tokens": None,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "mem_fraction_static": 0.883,
    "speculative_algorithm": None,
    "speculative_dspark_block_size": None,
    "speculative_num_draft_tokens": None,
    "moe_runner_backend": "auto",
    "speculative_moe_runner_backend": None,
    "attention_backend": None,
    "kv_cache_dtype": "auto",
    "api_key": None,
    "admin_api_key": None,
    "random_seed": None,
    "watchdog_timeout": 300.0,
    "enable_metrics": False,
    "skip_server_warmup": False,
    "trust_remote_code": False,
    "enable_multimodal": False,
    "config": None,
}



def field_name(flag: str) -> str:
    """SGLang's field name for a flag: drop the dashes, ``-`` → ``_``."""
    return flag.lstrip("-").replace("-", "_")


def _coerce_generic(value: str) -> Any:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)", value):
        return float(value)
    return value


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def _convert(flag: str, kind: type, raw: str) -> Any:
    try:
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise ArgError(f"argument {flag}: invalid {kind.__name__} value: {raw!r}") from None
    return raw


def parse_tokens(tokens: list[str]) -> dict[str, Any]:
    """Parse ``--flag [values…]`` tokens into field -> value, later occurrences winning."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _is_flag(token):
            raise ArgError(f"unrecognized arguments: {token}")
        inline: str | None = None
        if "=" in token:
            token, inline = token.split("=", 1)
        flag = _ALIASES.get(token, token)
        values: list[str] = []
        if inline is not None:
            values.append(inline)
            i += 1
        else:
            i += 1
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
        typed = _TYPED.get(flag)
        if typed is None:
            name = field_name(flag)
            if not values:
                out[name] = True
            elif len(values) == 1:
                out[name] = _coerce_generic(values[0])
            else:
                out[name] = [_coerce_generic(v) for v in values]
            continue
        name, kind = typed
        if kind is bool:
            if values:
                raise ArgError(f"argument {flag}: ignored explicit argument {' '.join(values)!r}")
            out[name] = True
            continue
        if len(values) != 1:
            raise ArgError(f"argument {flag}: expected one argument")
        out[name] = _convert(flag, kind, values[0])
    return out


# ---------------------------------------------------------------------------------------------
# A small YAML subset for --config: `key: scalar`, `key: [a, b]`, `key:` followed by `- item` lines.


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _yaml_scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        if text[0] == "'":
            return inner.replace("''", "'")
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), inner)
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "~", ""):
        return None
    return _coerce_generic(text)


def _strip_comment(line: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def parse_simple_yaml(text: str, source: str = "config") -> dict[str, Any]:
    """Parse the flat YAML mapping SGLang's ``--config`` takes."""
    data: dict[str, Any] = {}
    pending: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        stripped = line.strip()
        if stripped.startswith("- ") or stripped == "-":
            if pending is None:
                raise ArgError(f"{source}:{number}: list item outside a key")
            current = data.get(pending)
            items = current if isinstance(current, list) else []
            items.append(_yaml_scalar(stripped[1:]))
            data[pending] = items
            continue
        if line[0] in " \t":
            raise ArgError(f"{source}:{number}: nested mappings are not supported in a --config file")
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ArgError(f"{source}:{number}: expected 'key: value'")
        key = key.strip().strip("'\"")
        value = value.strip()
        if not value:
            data[key] = None
            pending = key
            continue
        pending = None
        if value.startswith("[") and value.endswith("]"):
            inner = value[1:-1].strip()
            data[key] = [_yaml_scalar(v) for v in inner.split(",")] if inner else []
        else:
            data[key] = _yaml_scalar(value)
    return data


def config_tokens(data: Mapping[str, Any]) -> list[str]:
    """Turn a --config mapping into argv tokens, as SGLang merges it."""
    tokens: list[str] = []
    for key, value in data.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            tokens.append(flag)
        elif isinstance(value, list):
            tokens.append(flag)
            tokens.extend(str(v) for v in value)
        else:
            tokens.append(f"{flag}={value}")
    return tokens


# ---------------------------------------------------------------------------------------------


@dataclass
class ServerConfig:
    """The parsed rank configuration: SGLang fields with defaults applied, plus everything else given."""

    values: dict[str, Any]
    argv: list[str]

    def __getitem__(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def nnodes(self) -> int:
        return int(self.values["nnodes"])

    @property
    def node_rank(self) -> int:
        return int(self.values["node_rank"])

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0

    @property
    def served_model_name(self) -> str:
        return str(self.values["served_model_name"])

    @property
    def context_length(self) -> int:
        return int(self.values["context_length"])

    @property
    def max_running_requests(self) -> int:
        return int(self.values["max_running_requests"])

    @property
    def api_key(self) -> str | None:
        key = self.values.get("api_key")
        return str(key) if key else None

    def dist_init(self) -> tuple[str, int] | None:
        """(host, port) of --dist-init-addr, IPv6 in brackets allowed."""
        addr = self.values.get("dist_init_addr")
        if not addr:
            return None
        text = str(addr)
        match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", text)
        if not match:
            raise ArgError(f"argument --dist-init-addr: expected HOST:PORT, got {text!r}")
        host = match.group(1) or match.group(3)
        port = int(match.group(2) or match.group(4))
        if not 0 < port < 65536:
            raise ArgError(f"argument --dist-init-addr: port {port} is out of range")
        return host, port

    def public(self) -> dict[str, Any]:
        """The configuration as /server_info shows it. SGLang 0.5.23 builds that body from its
        server arguments, ``api_key`` and ``admin_api_key`` included, in clear; so does the
        simulator, so that whatever records the body is tested against the real thing."""
        return dict(self.values)


def parse_argv(argv: list[str]) -> ServerConfig:
    """Parse ``[serve] <sglang argv>`` (also accepts a leading ``sglang serve``)."""
    args = list(argv)
    if args[:1] == ["sglang"]:
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    cli = parse_tokens(args)
    merged: dict[str, Any] = {}
    config_file = cli.get("config")
    if config_file:
        path = str(config_file)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ArgError(f"argument --config: cannot read {path}: {exc.strerror}") from None
        from_file = parse_simple_yaml(text, path)
        from_file.pop("config", None)
        merged.update(parse_tokens(config_tokens(from_file)))
    merged.update(cli)
    values: dict[str, Any] = dict(_DEFAULTS)
    values.update(merged)
    _resolve(values)
    return ServerConfig(values=values, argv=list(argv))


def _resolve(values: dict[str, Any]) -> None:
    """Fill derived fields and apply the checks SGLang applies before launching."""
    if values["served_model_name"] is None:
        values["served_model_name"] = values["model_path"] or "default"
    if values["tokenizer_path"] is None:
        values["tokenizer_path"] = values["model_path"]
    if values["context_length"] is None:
        values["context_length"] = 65536
    if values["max_total_tokens"] is None:
        values["max_total_tokens"] = 2 * int(values["context_length"])
    block = values.get("speculative_dspark_block_size")
    if block is not None:
        if block <= 0:
            raise ArgError(f"DSpark requires --speculative-dspark-block-size to be positive, got {block}.")
        if values.get("speculative_num_draft_tokens") is None:
            values["speculative_num_draft_tokens"] = block + 1
    if values["moe_runner_backend"] == "auto":
        values["moe_runner_backend"] = "flashinfer_mxfp4"
    if values["speculative_algorithm"] and values["speculative_moe_runner_backend"] is None:
        values["speculative_moe_runner_backend"] = values["moe_runner_backend"]
    if values["kv_cache_dtype"] == "auto":
        values["kv_cache_dtype"] = "fp8_e4m3"
    nnodes, rank = int(values["nnodes"]), int(values["node_rank"])
    if nnodes < 1:
        raise ArgError(f"argument --nnodes: must be >= 1, got {nnodes}")
    if not 0 <= rank < nnodes:
        raise ArgError(f"argument --node-rank: {rank} is outside 0..{nnodes - 1} for --nnodes {nnodes}")
    if (int(values["tp_size"]) * int(values["pp_size"])) % nnodes != 0:
        raise ArgError("tp_size must be divisible by number of nodes")
    if nnodes > 1 and not values["dist_init_addr"]:
        raise ArgError("--dist-init-addr is required when --nnodes > 1")
    for name in ("context_length", "max_running_requests", "max_total_tokens"):
        if int(values[name]) <= 0:
            raise ArgError(f"argument --{name.replace('_', '-')}: must be positive, got {values[name]}")
