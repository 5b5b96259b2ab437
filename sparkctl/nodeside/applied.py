"""What each provision role last applied on this node, and whether the node still matches it.

Standard library only, Python 3.8+: it runs on the nodes, inside the ``sparkctl_applied`` module
(role spark_applied). A no-op ``sparkctl provision`` reads every role's on-node state here in one
module call instead of running each role's probes over SSH task by task.

A role's *state spec* names what the role owns on the node; each entry becomes one *item*, a short
string that changes when the thing changes:

  files     path -> sha256 of the content, mode, owner (``~user/`` expands to that user's home;
            a symlink gives its target, a directory its mode)
  meta      path -> mode and owner only (private keys: their content never enters the record)
  blocks    {path, marker} -> sha256 of the lines blockinfile manages between its BEGIN/END markers
  dirs      path -> the sorted names in the directory
  exists    path -> present or absent
  units     unit -> UnitFileState/ActiveState (one ``systemctl show`` for every unit of every role)
  packages  name -> dpkg status (one ``dpkg-query`` for every package of every role)
  sysctl    key -> the live value under /proc/sys
  links     netdev -> MTU and IPv4 addresses (sysfs and one ``ip -j addr``)
  nft_tables "family name" -> present or absent (one ``nft list tables``)
  commands  argv -> sha256 of its exit status and output
  controller true -> the address the controller connects from (the firewall admits it by name)

The record (``RECORD``, root only) keeps per role the controller's digest of the role's inputs and
every item as it was right after the role ran. A role is up to date when its inputs digest and every
item are unchanged; otherwise the reasons name what differs, item by item.
"""

import grp
import hashlib
import json
import os
import pwd
import stat

from . import links, system

RECORD = "/var/lib/sparkctl/applied.json"
FORMAT = 1
KINDS = ("files", "meta", "blocks", "dirs", "exists", "units", "packages", "sysctl", "links", "nft_tables",
         "commands", "controller")


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def expand(path):
    """``~user/rest`` -> that user's home + rest (``~/`` is the current user's); other paths unchanged."""
    if not path.startswith("~"):
        return path
    name, _, rest = path[1:].partition("/")
    try:
        home = pwd.getpwnam(name).pw_dir if name else os.path.expanduser("~")
    except KeyError:
        return path
    return os.path.join(home, rest)


def _owner(st):
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def _meta(st):
    return f"{stat.S_IMODE(st.st_mode):04o} {_owner(st)}"


def file_item(path, content=True):
    """One file as an item: ``sha256:HEX 0644 root:root``, ``link:TARGET``, ``dir 0755 root:root`` or
    ``absent``."""
    real = expand(path)
    try:
        st = os.lstat(real)
    except OSError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(real)
    if stat.S_ISDIR(st.st_mode):
        return "dir " + _meta(st)
    if not content:
        return "file " + _meta(st)
    try:
        with open(real, "rb") as f:
            digest = sha256_bytes(f.read())
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return f"sha256:{digest} {_meta(st)}"


def block_item(path, marker):
    """The lines between blockinfile's ``marker`` with BEGIN and with END (markers included)."""
    real = expand(path)
    try:
        with open(real, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        st = os.stat(real)
    except OSError:
        return "absent"
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    inside, block = False, []
    for line in lines:
        if line == begin:
            inside, block = True, [line]
        elif inside:
            block.append(line)
            if line == end:
                break
    if not block or block[-1] != end:
        return "no block " + _meta(st)
    return "sha256:{} {}".format(sha256_bytes("\n".join(block).encode()), _meta(st))


def dir_item(path):
    try:
        return " ".join(sorted(os.listdir(expand(path))))
    except OSError:
        return "absent"


def sysctl_item(key):
    value = system.read_text("/proc/sys/" + key.replace(".", "/"))
    return "absent" if value is None else " ".join(value.split())


def units_state(units):
    """unit -> "UnitFileState/ActiveState" with one ``systemctl show`` for all of them."""
    units = sorted(set(units))
    if not units:
        return {}
    argv = ["systemctl", "show", "--property=Id,UnitFileState,ActiveState", "--", *units]
    rc, out, err = system.run(argv, timeout=15)
    if rc != 0:
        return {u: "systemctl failed: {}".format((err or "").strip()[:80]) for u in units}
    blocks = [b for b in out.strip().split("\n\n")]
    state = {}
    for unit, block in zip(units, blocks, strict=False):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        state[unit] = "{}/{}".format(props.get("UnitFileState") or "-", props.get("ActiveState") or "-")
    return state


def packages_state(names):
    """package -> dpkg's status abbreviation (``ii`` installed) or ``absent``, with one ``dpkg-query``."""
    names = sorted(set(names))
    if not names:
        return {}
    argv = ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", "--", *names]
    rc, out, _ = system.run(argv, timeout=30)
    if rc == 127:
        return {n: "no dpkg" for n in names}
    seen = {}
    for line in out.splitlines():
        parts = line.split()
        if parts:
            seen[parts[0].split(":")[0]] = parts[1] if len(parts) > 1 else "-"
    return {n: seen.get(n, "absent") for n in names}


def nft_tables():
    """The loaded nftables tables as "family name", or None when nft cannot be run."""
    rc, out, _ = system.run(["nft", "list", "tables"], timeout=10)
    if rc != 0:
        return None
    return {" ".join(line.split()[1:3]) for line in out.splitlines() if line.startswith("table ")}


def command_item(argv):
    rc, out, err = system.run([str(a) for a in argv], timeout=30)
    return "rc={} sha256:{}".format(rc, sha256_bytes((out + "\0" + err).encode())[:32])


def controller_address(environ=None, proc="/proc"):
    """The address the controller's SSH session comes from: SSH_CLIENT of this process or, when sudo
    dropped it, of the nearest ancestor that has it (root may read every process's environment)."""
    env = os.environ if environ is None else environ
    if env.get("SSH_CLIENT"):
        return env["SSH_CLIENT"].split()[0].replace("::ffff:", "")
    pid = os.getppid()
    for _ in range(16):
        if pid <= 1:
            break
        try:
            with open(f"{proc}/{pid}/environ", "rb") as f:
                pairs = f.read().split(b"\0")
            with open(f"{proc}/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        for pair in pairs:
            if pair.startswith(b"SSH_CLIENT="):
                return pair[len(b"SSH_CLIENT="):].decode(errors="replace").split()[0].replace("::ffff:", "")
        pid = ppid
    return ""


def read_state(specs):
    """{role: {item key: item}} for every role's state spec; the batched readers run once for all."""
    units = [u for s in specs.values() for u in s.get("units") or []]
    packages = [p for s in specs.values() for p in s.get("packages") or []]
    unit_state = units_state(units)
    package_state = packages_state(packages)
    need_nft = any(s.get("nft_tables") for s in specs.values())
    tables = nft_tables() if need_nft else set()
    need_addrs = any(s.get("links") for s in specs.values())
    addrs = links.ipv4_addresses() if need_addrs else {}
    controller = controller_address() if any(s.get("controller") for s in specs.values()) else ""
    out = {}
    for role, spec in specs.items():
        unknown = sorted(set(spec) - set(KINDS))
        if unknown:
            raise ValueError("role {}: unknown state kind(s) {}".format(role, ", ".join(unknown)))
        items = {}
        for path in spec.get("files") or []:
            items["file " + path] = file_item(path)
        for path in spec.get("meta") or []:
            items["meta " + path] = file_item(path, content=False)
        for block in spec.get("blocks") or []:
            key = "block {} {}".format(block["path"], block["marker"])
            items[key] = block_item(block["path"], block["marker"])
        for path in spec.get("dirs") or []:
            items["dir " + path] = dir_item(path)
        for path in spec.get("exists") or []:
            items["exists " + path] = "present" if os.path.exists(expand(path)) else "absent"
        for unit in spec.get("units") or []:
            items["unit " + unit] = unit_state.get(unit, "-")
        for name in spec.get("packages") or []:
            items["package " + name] = package_state.get(name, "absent")
        for key in sorted(spec.get("sysctl") or []):
            items["sysctl " + key] = sysctl_item(key)
        for dev in spec.get("links") or []:
            link = links.read_link(dev)
            items["link " + dev] = ("mtu={} addrs={}".format(link["mtu"], ",".join(addrs.get(dev, [])))
                                    if link["present"] else "absent")
        for table in spec.get("nft_tables") or []:
            items["nft table " + table] = ("nft unavailable" if tables is None
                                           else "present" if table in tables else "absent")
        for argv in spec.get("commands") or []:
            items["command " + " ".join(str(a) for a in argv)] = command_item(argv)
        if spec.get("controller"):
            items["controller address"] = controller or "unknown"
        out[role] = items
    return out


def load(path=RECORD):
    """The record, or an empty one when absent, unreadable or of another format."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {"format": FORMAT, "roles": {}}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("roles"), dict):
        return {"format": FORMAT, "roles": {}}
    return doc


def compare(inputs, items, recorded):
    """Why a role must run ([] when it is up to date): its inputs or items against the record."""
    if not isinstance(recorded, dict):
        return ["never recorded on this node"]
    reasons = []
    if recorded.get("inputs") != inputs:
        reasons.append("inputs changed since it was applied (inventory, rendered files or role)")
    kept = recorded.get("items")
    before = kept if isinstance(kept, dict) else {}
    for key in sorted(set(items) | set(before)):
        if key not in before:
            reasons.append(f"{key}: not recorded")
        elif key not in items:
            reasons.append(f"{key}: no longer owned")
        elif items[key] != before[key]:
            reasons.append(f"{key}: changed since it was applied")
    return reasons


def probe(roles, path=RECORD, full=False):
    """{role: {"run": bool, "reasons": [...]}} for ``roles`` ({role: {"inputs": digest, "state": spec}})."""
    record = load(path)
    state = read_state({name: r.get("state") or {} for name, r in roles.items()})
    recorded = record["roles"]
    out = {}
    for name, role in roles.items():
        reasons = compare(role.get("inputs"), state[name], recorded.get(name))
        if full:
            reasons = ["--full asks for every probe", *reasons]
        out[name] = {"run": bool(reasons), "reasons": reasons}
    return out


def record_roles(roles, names, path=RECORD, write=True):
    """Record ``names`` of ``roles`` as applied now (their inputs and their items read now).

    Returns True when the record changed. The file is replaced atomically and kept root-only.
    """
    record = load(path)
    state = read_state({n: roles[n].get("state") or {} for n in names})
    for name in names:
        record["roles"][name] = {"inputs": roles[name].get("inputs"), "items": state[name]}
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    if not write:
        return True
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = path + ".partial"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True
