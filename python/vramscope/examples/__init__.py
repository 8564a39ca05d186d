"""Example programs shipped with vramscope (`vramscope run --example`)."""
