"""``python -m controller`` and the ``controller`` console script: the harness's bytecode folder
(harness.sandbox.bytecode) is set before the command's imports, which bring torch in."""


def main() -> None:
    from harness.sandbox.bytecode import use_bytecode_cache

    use_bytecode_cache()
    from controller.cli import main as run

    run()


if __name__ == "__main__":
    main()
