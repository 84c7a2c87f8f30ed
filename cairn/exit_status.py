"""Exit statuses the entry point gives before the commands are imported (they take a second or more)."""

INTERRUPTED = 130  # the exit code shells give a command stopped by Ctrl-C (128 + SIGINT)
