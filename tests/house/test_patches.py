"""What importing the package changes in datafusion is exactly ``patches.PATCHES``: the list
is pinned against a fresh interpreter's datafusion before and after the import, and every
change says why."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from datafusion_distributed_py.patches import PATCHES

#: Where datafusion could be changed: every class and module the patches may touch, and the
#: other public classes a user works with.
SNAPSHOT = textwrap.dedent(
    """
    import json, sys, types
    import datafusion, datafusion.object_store, datafusion.context, datafusion.dataframe
    from datafusion.user_defined import TableFunction
    owners = {
        "datafusion.object_store": datafusion.object_store,
        "datafusion.SessionContext": datafusion.SessionContext,
        "datafusion.DataFrame": datafusion.DataFrame,
        "datafusion.Table": datafusion.Table,
        "datafusion.DataFrameWriteOptions": datafusion.DataFrameWriteOptions,
        "TableFunction": TableFunction,
        "datafusion.SessionConfig": datafusion.SessionConfig,
        "datafusion.RuntimeEnvBuilder": datafusion.RuntimeEnvBuilder,
        "datafusion.Expr": datafusion.Expr,
        "datafusion.RecordBatchStream": datafusion.RecordBatchStream,
        "datafusion": datafusion,
    }
    def members(owner):
        return {k: id(v) for k, v in vars(owner).items()}
    before = {name: members(owner) for name, owner in owners.items()}
    import datafusion_distributed_py  # noqa: F401
    changed = sorted(
        [name, key]
        for name, owner in owners.items()
        for key, ident in members(owner).items()
        if before[name].get(key) != ident
    )
    print(json.dumps(changed))
    """
)


def _owner_name(owner: object) -> str:
    name = getattr(owner, "__name__", "")
    if name == "TableFunction":
        return "TableFunction"
    return name if name.startswith("datafusion.") else f"datafusion.{name}"


def test_importing_changes_exactly_the_listed_members():
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, check=True
    ).stdout
    changed = {tuple(pair) for pair in json.loads(out.strip().splitlines()[-1])}
    listed = {(_owner_name(p.owner), name) for p in PATCHES for name in p.names}
    assert changed == listed, {"not listed": changed - listed, "not changed": listed - changed}


def test_every_patch_says_why_and_replaces_a_member_datafusion_has():
    for patch in PATCHES:
        assert len(patch.why) > 30, patch
        for name in patch.names:
            assert name in vars(patch.owner) or hasattr(patch.owner, name), (patch.owner, name)
