"""Experiments: specs, planning, the sweeper, validity checks, analysis and plots."""
