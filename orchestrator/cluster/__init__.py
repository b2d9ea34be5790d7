"""A sweep's points on a Dask cluster of emulated testbeds (`rainmaker run --cluster`,
`--testbeds N`): connect.py finds the workers that offer a testbed, station.py is one
worker's testbed, coordinator.py hands out the points and gathers them into one run
folder, agreement.py compares the testbeds' calibrations, shard.py carries the files.
docs/cluster.md is the user's guide."""
