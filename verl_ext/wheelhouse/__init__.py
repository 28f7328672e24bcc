"""Offline wheelhouse for air-gapped GPU machines: download pinned wheels, pack them into checksummed chunks,
verify and install them on a machine without network.

Standard library only (plus pip as a subprocess): it must run from a plain checkout on a machine where nothing
else is installed yet (`python3 -m verl_ext.wheelhouse install ...`).
"""


class WheelhouseError(Exception):
    """A user-facing error; the message names the offending file, chunk or key."""
