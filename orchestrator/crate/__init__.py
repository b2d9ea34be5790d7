"""A run shared with others: `rainmaker export` packs a run folder as a Workflow Run
RO-Crate (one zip, ready for Zenodo), `rainmaker import` lays one out as a run folder
again (docs/sharing.md).

    layout.py     the crate's files and names; the zip-slip and name checks
    scrub.py      what never leaves the machine: keys, key paths, passwords, tokens
    metadata.py   ro-crate-metadata.json: the run as a CreateAction of its spec
    export.py     run folder -> crate zip
    importer.py   crate zip -> run folder
"""
