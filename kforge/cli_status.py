"""`kforge status`: which devices of this machine kforge processes hold and who waits for them, so that a user
whose command waits can see why and for how long."""

from __future__ import annotations

import json

from evaluator.parent import leases
from kforge.app import JsonOpt, app, friendly, out


@friendly
def status(as_json: JsonOpt = False) -> None:
    """The devices kforge processes of this machine hold, their holders and who waits, first in line first."""
    devices = leases.snapshot()
    if as_json:
        print(json.dumps([device.as_dict() for device in devices], indent=1))
        return
    if not devices:
        out.print("no kforge process has used a device on this machine")
    for device in devices:
        out.print(f"{device.name}: " + (f"held by {device.holder.describe()}" if device.holder else "free"),
                  markup=False, highlight=False, soft_wrap=True)
        for place, party in enumerate(device.queue, 1):
            out.print(f"  {place}. {party.describe()}", markup=False, highlight=False, soft_wrap=True)


def register() -> None:
    """Adds `status` to kforge's app (once)."""
    if not any(command.callback is status for command in app.registered_commands):
        app.command("status")(status)
