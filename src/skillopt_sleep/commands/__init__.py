"""One module per `skillopt-sleep` subcommand (discovered by :mod:`skillopt_sleep.cli`)."""
