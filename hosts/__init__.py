"""What runs on testbed hosts: DPDK programs (C) and the Python agents."""
