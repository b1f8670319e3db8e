//! /proc and /sys samplers (filled in by the kernel-correlation work).
