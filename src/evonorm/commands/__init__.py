"""One module per `evonorm` subcommand, each with `main(argv) -> int` (see evonorm.cli)."""
