"""``python -m harness`` and the ``harness`` console script: the harness's bytecode folder (harness.sandbox.bytecode)
is set before the command's own imports (pydantic, rich, click, SQLite's utilities, then torch), so on a host whose
installation has no bytecode those are compiled once, not by every command."""


def main() -> None:
    from harness.sandbox.bytecode import use_bytecode_cache

    use_bytecode_cache()
    from harness.cli import program

    program()


if __name__ == "__main__":
    main()
