"""Testbeds rainmaker can build itself: the emulated one (namespaces on this machine)."""
