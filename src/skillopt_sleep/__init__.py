"""skillopt-sleep: the nightly cycle that turns agent transcripts into gated skill versions."""
