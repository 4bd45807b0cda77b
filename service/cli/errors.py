"""The one exception CLI commands raise to fail with a message instead of a traceback."""


class CliError(Exception):
    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
