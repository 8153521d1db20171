"""Running configuration commands in a Mininet node's shell, with failures as exceptions."""
from __future__ import annotations


class NodeCommandError(RuntimeError):
    pass


def check_cmd(node, command: str) -> str:
    """Run `command` in `node`'s shell; return its output, raise if it exits non-zero.

    Mininet's node.cmd() returns output but ignores exit codes, which hides a failed
    `tc` or `ip` call until results are silently wrong.
    """
    out = node.cmd(command + " 2>&1; echo __rc=$?")
    body, _, rc = out.rpartition("__rc=")
    if rc.strip() != "0":
        raise NodeCommandError(f"{node.name}: '{command}' failed: {body.strip()}")
    return body
