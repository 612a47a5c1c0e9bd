"""`--workers N`: the parent that binds the port and supervises the workers, what they
serve with, and the one admin address that speaks for them all."""
