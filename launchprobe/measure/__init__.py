"""Measuring on the machine: ceilings, step timing, CUPTI passes, per-kernel events."""
