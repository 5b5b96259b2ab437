"""Facts that Python and the Ansible side both need, held to one owner (or tied where they must be
written twice): the controller state directory, the SGLang version, and the pattern of the terminal
colour codes taken out of a journal shown with a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.ansible import content

REPO = Path(__file__).resolve().parents[2]
STATE_DEFAULTS = {
    "roles/spark_kit/defaults/main.yml": ("spark_kit_cache_dir", "kit"),
    "roles/spark_runtime/defaults/main.yml": ("spark_runtime_lab_build_dir", "build/wheels"),
    "roles/spark_switch/defaults/main.yml": ("spark_switch_backup_dir", "switch-backups"),
}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = [REPO / name for name in out.decode().split("\0") if name and not name.startswith("collections/")]
    return [p for p in files if p.is_file() and not p.is_symlink()]


# --- the controller state directory ---------------------------------------------------------------


def test_roles_take_the_state_directory_from_the_vars_plugin() -> None:
    """sparkctl.ansible.content.state_dir is the one computation; no role re-derives it in Jinja."""
    for path in sorted((REPO / "roles").rglob("*.yml")):
        text = path.read_text()
        for word in ("SPARKCTL_STATE_DIR", "XDG_STATE_HOME", ".local/state"):
            assert word not in text, f"{path.relative_to(REPO)} computes the state directory ({word})"
    for rel, (var, sub) in STATE_DEFAULTS.items():
        assert f'{var}: "{{{{ sparkctl_state_dir }}}}/{sub}"' in (REPO / rel).read_text(), rel


@pytest.mark.parametrize("override", [True, False])
def test_a_manual_run_resolves_the_role_defaults_under_state_dir(
    example_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (content.STATE_ENV, "XDG_STATE_HOME")}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    if override:
        env[content.STATE_ENV] = str(tmp_path / "site-state")
    monkeypatch.delenv(content.STATE_ENV, raising=False)
    for key in (content.STATE_ENV, "XDG_STATE_HOME"):
        if key in env:
            monkeypatch.setenv(key, env[key])
    expected = content.state_dir()
    assert expected == (tmp_path / "site-state" if override else tmp_path / "xdg" / "sparkctl")

    playbook = tmp_path / "state_dirs.yml"
    files = "".join(f"\n    - {REPO / rel}" for rel in STATE_DEFAULTS)
    shows = "".join(f"{var}={{{{ {var} | trim }}}}\\n" for var, _ in STATE_DEFAULTS.values())
    written = tmp_path / "values.txt"
    playbook.write_text(
        "- name: The controller-side directories a manual run computes\n"
        "  hosts: spark-1\n  gather_facts: false\n  connection: local\n"
        "  vars: {ansible_become: false, ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n"
        f"  vars_files:{files}\n"
        "  tasks:\n    - name: Write them down\n      ansible.builtin.copy:\n"
        f"        dest: {written}\n        mode: '0600'\n"
        f"        content: \"state={{{{ sparkctl_state_dir }}}}\\n{shows}\"\n"
    )
    bin_dir = Path(sys.executable).parent
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STRATEGY="linear",
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    proc = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(example_copy), str(playbook)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = written.read_text().splitlines()
    want = [f"{var}={expected}/{sub}" for var, sub in STATE_DEFAULTS.values()]
    assert lines == [f"state={expected}", *want]


# --- the SGLang version -----------------------------------------------------------------------------

_V = r"(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)"
# Every form in which a file names the SGLang release. An occurrence of the pinned version outside
# these forms fails the test below: add its form here (so a bump cannot miss it).
_FORMS = {
    "pip pin": rf"sglang\s*==\s*{_V}",
    "prose": rf"SGLang(?:'s own flags)?\s+\(?{_V}",
    "server_info": rf"`version` `{_V}`",
    "flag catalogue": rf'"sglang":\s*"{_V}"',
    "Python constant": rf'SGLANG_VERSION\s*=\s*"{_V}"',
    "role default": rf'spark_runtime_sglang_version:\s*"{_V}"',
    "argument spec": rf'spark_runtime_sglang_version:\n(?:[ ]+[a-z_]+:[^\n]*\n)*?[ ]+default:\s*"{_V}"',
}
# The machine-read places (a bump must change each): file -> form.
_MACHINE_READ = {
    "constraints-sglang.txt": "pip pin",  # what `make sglang` installs: the pin every other place follows
    "sparkctl/profiles/sglang-flags.json": "flag catalogue",  # scripts/sglang_flags.py, from that install
    "sparkctl/qa/sglang_check.py": "Python constant",  # runs as a script in the SGLang venv
    "sparkctl_sim/__init__.py": "Python constant",  # the simulator imports nothing of sparkctl
    "roles/spark_runtime/defaults/main.yml": "role default",  # the venv runtime's pip install
    "roles/spark_runtime/meta/argument_specs.yml": "argument spec",
}


def test_every_place_naming_the_sglang_version_agrees() -> None:
    pin = re.search(_FORMS["pip pin"], (REPO / "constraints-sglang.txt").read_text())
    assert pin, "constraints-sglang.txt pins no sglang version"
    version = pin.group(1)
    found: dict[str, set[str]] = {}
    stray: list[str] = []
    for path in _tracked():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(REPO).as_posix()
        covered: list[tuple[int, int]] = []
        for form, pattern in _FORMS.items():
            for match in re.finditer(pattern, text):
                found.setdefault(rel, set()).add(form)
                covered.append(match.span(1))
                assert match.group(1) == version, (
                    f"{rel}:{text.count(chr(10), 0, match.start()) + 1} names SGLang {match.group(1)} "
                    f"({form}); constraints-sglang.txt pins {version}")
        for match in re.finditer(re.escape(version) + r"(?![\d.])", text):
            if not any(a <= match.start() < b for a, b in covered):
                stray.append(f"{rel}:{text.count(chr(10), 0, match.start()) + 1}")
    missing = {rel: form for rel, form in _MACHINE_READ.items() if form not in found.get(rel, set())}
    assert not missing, f"no longer name the SGLang version in the expected form: {missing}"
    assert not stray, f"the SGLang version {version} written in a form this test does not know: {stray}"
    from sparkctl.profiles.flags import sglang_version
    from sparkctl.qa.sglang_check import SGLANG_VERSION
    from sparkctl_sim import SGLANG_VERSION as SIM_VERSION

    assert sglang_version() == SGLANG_VERSION == SIM_VERSION == version


def test_the_kit_cache_the_fast_paths_read_is_the_role_default(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`up`/`stage`'s fast paths read the kit from spark_kit_cache_dir as Ansible resolves it."""
    from sparkctl.ansible import roledefaults

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    assert roledefaults.controller_path("spark_kit", "spark_kit_cache_dir") == str(tmp_path / "state" / "kit")
    src = (REPO / "sparkctl" / "cli" / "common.py").read_text()
    assert 'state_dir() / "kit"' not in src


def test_the_router_role_and_the_boot_watch_take_out_the_same_colour_codes() -> None:
    """A failure tail is shown without the gateway's colour codes both by the router role (its
    Jinja, for `ansible-playbook playbooks/router.yml` by hand) and by `up`'s router gate (Python)."""
    from sparkctl.serve.bootwatch import ANSI_COLOUR

    text = (REPO / "roles" / "spark_router" / "tasks" / "start.yml").read_text()
    patterns = re.findall(r"regex_replace\('([^']*)', ''\)", text)
    assert patterns == [ANSI_COLOUR.pattern], patterns
