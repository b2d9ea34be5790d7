"""CloudLab: the profile that requests a Rain testbed, and the import of what it got.

`profile.py` renders a geni-lib profile for the topology asked for; `manifest.py`
reads the RSpec v3 manifest of the running experiment; `mapping.py` is the map file
for what a manifest cannot say; `importer.py` turns manifest + map into an inventory.
Everything works on files: rainmaker never talks to CloudLab itself.
"""
