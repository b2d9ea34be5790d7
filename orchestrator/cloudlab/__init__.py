"""CloudLab: the profile that requests a Rain testbed, and the import of what it got.

`profile.py` renders a geni-lib profile for the topology asked for; `manifest.py`
reads the RSpec v3 manifest of the running experiment; `mapping.py` is the map file
for what a manifest cannot say; `importer.py` turns manifest + map into an inventory.
Those work on files. `portal.py` is a client of the portal's XML-RPC API (the user's
portal certificate), and `lifecycle.py` waits for an experiment, takes its manifest
and keeps it alive while a run uses it: `rainmaker cloudlab start/status/extend/terminate`.
"""
