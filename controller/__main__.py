"""``python -m controller`` and the ``controller`` console script: the harness's bytecode folder
(harness.sandbox.bytecode) is set before the command's imports, which bring torch in."""


def main() -> None:
    from harness.sandbox.bytecode import use_bytecode_cache

    use_bytecode_cache()
    import sys

    from controller.cli import main as run
    from harness.cli_common import invoke

    sys.exit(invoke(run))


if __name__ == "__main__":
    main()
