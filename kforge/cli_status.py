"""`kforge status`: which devices of this machine kforge processes hold and who waits for them, so that a user
whose command waits can see why and for how long."""

from __future__ import annotations

import json

from evaluator.parent import leases
from kforge.app import JsonOpt, app, friendly, out


@friendly
def status(as_json: JsonOpt = False) -> None:
    """Devices kforge processes hold here, their holders and who waits, first in line first, each with an estimate."""
    devices = leases.snapshot()
    if as_json:
        print(json.dumps([device.as_dict() for device in devices], indent=1))
        return
    if not devices:
        out.print("no kforge process has used a device on this machine")
    for device in devices:
        said = [f"{device.name}: " + (device.holding() if device.holder or device.queue else "free")]
        said += [f"  {place}. {party.describe()}: {device.estimate(place)}" for place, party in enumerate(device.queue, 1)]
        for line in said:
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def register() -> None:
    """Adds `status` to kforge's app (once)."""
    if not any(command.callback is status for command in app.registered_commands):
        app.command("status")(status)
