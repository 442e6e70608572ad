"""Tests of the delta codec (`geofed.codec`)."""
