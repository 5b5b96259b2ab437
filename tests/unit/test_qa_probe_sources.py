"""scripts/r4_probes.py: the probe file's values are read from the publishers' files, and a checkout
that disagrees with the file is named line by line."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from sparkctl.qa import probedata

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "r4_probes.py"


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + payload))
        return struct.pack(">I", len(payload)) + kind + payload + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"".join(b"\x00" + b"\xff" * 3 * width for _ in range(height))
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def _request(text: str, images: int) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(_png(960, 640)).decode()
    content = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": url}}] * images
    return {"model": "m", "temperature": 0, "max_tokens": 256, "chat_template_kwargs": {"thinking": False},
            "messages": [{"role": "user", "content": content}]}


def _needle_script(spec: dict[str, Any]) -> str:
    """A client shaped like the publisher's long-context script (the shape the extractor reads)."""
    head = spec["head"].replace("{tag}", "{args.tag}")
    return f'''import random
def main(args):
    for size in ({", ".join(str(n) for n in spec["sizes"])}):
        rng = random.Random(size + {spec["seed_offset"]})
        keys = ("alpha", "beta", "gamma")
        expected = {{k: str(rng.randrange({spec["value_low"]}, {spec["value_high"]})) for k in keys}}
        prompt = (f{head!r}"\\n"
                  {spec["instruction"] + chr(10)!r}
                  f'RECORD alpha={{expected["alpha"]}}\\n' + {spec["filler_unit"]!r} * (size // 2) +
                  f'\\nRECORD beta={{expected["beta"]}}\\n' + {spec["filler_unit"]!r} * (size - size // 2) +
                  f'\\nRECORD gamma={{expected["gamma"]}}\\n'
                  {spec["question"]!r})
        body = dict(temperature=0, max_tokens={spec["max_tokens"]}, messages=[prompt])
        row = {{}}
        row['passed'] = (actual == expected
            and size-{spec["below"]} <= usage.get('prompt_tokens', 0) <= size+{spec["above"]}
            and usage['prompt_tokens'] + 256 <= {spec["context_budget"]})
'''


def _checkouts(tmp_path: Path, data: dict[str, Any]) -> tuple[list[str], Path]:
    """Checkouts holding files with the probe file's values; returns --repo arguments and a copy of
    the probe file whose pinned digests match these files."""
    vision, needle = data["vision"], data["needle"]
    files = {
        "single_image": json.dumps({"request": _request(vision["single"]["prompt"], 1)}),
        "four_images": json.dumps({"request": _request(vision["four"]["prompt"], 4)}),
        "expected": json.dumps({"single": vision["single"]["expected"], "four": vision["four"]["expected"]}),
        "long_context_script": _needle_script(needle),
        "long_context_result": json.dumps({"tag": needle["published"]["tag"], "cases": [
            {k: c[k] for k in ("filler_units", "prompt_sha256", "expected")}
            | {"usage": {"prompt_tokens": c["prompt_tokens"]}} for c in needle["published"]["cases"]
        ]}),
    }
    copy = json.loads(json.dumps(data))
    repos: dict[str, Path] = {}
    for name, text in files.items():
        src = copy["sources"][name]
        root = repos.setdefault(src["repo"], tmp_path / src["repo"].replace("/", "+"))
        path = root / src["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if "sha256" in src:
            src["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    probe_file = tmp_path / "r4.json"
    probe_file.write_text(json.dumps(copy))
    return [f"--repo={repo}={root}" for repo, root in repos.items()], probe_file


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_check_passes_when_every_value_is_read_back_from_the_sources(tmp_path: Path) -> None:
    repos, probe_file = _checkouts(tmp_path, probedata.r4())
    proc = _run("check", *repos, "--file", str(probe_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_names_each_value_that_differs_and_a_changed_file(tmp_path: Path) -> None:
    data = probedata.r4()
    repos, probe_file = _checkouts(tmp_path, data)
    edited = json.loads(probe_file.read_text())
    edited["vision"]["four"]["expected"][2] = "EAST 1949"
    edited["needle"]["instruction"] += " "
    probe_file.write_text(json.dumps(edited))
    result = tmp_path / edited["sources"]["long_context_result"]["repo"].replace("/", "+")
    changed = result / edited["sources"]["long_context_result"]["path"]
    changed.write_text(changed.read_text() + "\n")
    proc = _run("check", *repos, "--file", str(probe_file))
    assert proc.returncode == 1
    assert "vision.four.expected" in proc.stdout and "needle.instruction" in proc.stdout
    assert "results/serving/long-context/result.json: SHA-256 differs from the pinned one" in proc.stdout


def test_extract_writes_what_the_sources_say(tmp_path: Path) -> None:
    repos, probe_file = _checkouts(tmp_path, probedata.r4())
    edited = json.loads(probe_file.read_text())
    edited["vision"]["single"]["prompt"] = "typed by hand"
    probe_file.write_text(json.dumps(edited))
    assert _run("extract", *repos, "--file", str(probe_file)).returncode == 0
    assert json.loads(probe_file.read_text())["vision"]["single"]["prompt"] == probedata.r4()["vision"][
        "single"
    ]["prompt"]
