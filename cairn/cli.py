"""`cairn`: run Cairn on one machine, manage users, add documents, ask a question."""
from __future__ import annotations

# Only the standard library at the top: the rest is imported inside main(), so that Ctrl-C in the second or more
# that importing it takes (several on a busy machine) ends quietly with status 130, as it does later.
import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.exit_status import INTERRUPTED

if TYPE_CHECKING:
    from cairn.settings import CliSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    up = _command(sub, "up", "start the four services (and Redis/RabbitMQ if needed); Ctrl-C stops")
    up.add_argument("--no-demo-docs", action="store_true", help="do not add docs/ on the first run")
    up.add_argument("--replicas", metavar="SPEC", type=_replicas,
                    help="processes per service, as chat=2,retrieval=2 (else $CAIRN_REPLICAS; default one of each)")
    up.add_argument("--chroma-server", action="store_true",
                    help="run a Chroma server for retrieval even with one replica (always with several)")
    _command(sub, "down", "stop a Cairn started by `cairn up` in another shell")
    _command(sub, "status", "show whether each service is up and its dependencies answer")

    user = _command(sub, "user", "manage users").add_subparsers(dest="user_command", required=True)
    add = _command(user, "add", "add a user")
    add.add_argument("username")
    _role_option(add)
    _password_stdin_option(add)
    _command(user, "list", "list users")
    _command(user, "disable", "refuse the user's logins and end its sessions").add_argument("username")
    _command(user, "enable", "let a disabled user log in again").add_argument("username")
    _command(user, "delete", "delete the user and end its sessions (the name may be added again)").add_argument(
        "username"
    )
    set_role = _command(user, "set-role", "replace the user's roles and end its sessions (it logs in again)")
    set_role.add_argument("username")
    _role_option(set_role)
    reset = _command(user, "reset-password", "give the user a new password and end its sessions")
    reset.add_argument("username")
    _password_stdin_option(reset)

    ingest = _command(sub, "ingest", "add .md/.txt/.html/.pdf files or folders (recursive) to the collection")
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a file, or a folder read with its subfolders (.md, .markdown, .txt, .html, .htm, .pdf)")

    evaluate = _command(sub, "eval", "score retrieval on a BEIR-format dataset (nDCG@10, recall, MRR, latency)")
    evaluate.add_argument("dataset_dir", type=Path, help="folder with corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv")
    evaluate.add_argument("--split", default="test", help="qrels file to score against (default: test)")
    evaluate.add_argument("--mode", default="all", choices=["hybrid", "dense", "keyword", "all"],
                          help="search mode(s) to run (default: all available)")
    evaluate.add_argument("--whole-docs", action="store_true",
                          help="one chunk per document, truncated at the model's token limit (as MTEB embeds)")
    evaluate.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")

    ask = _command(sub, "ask", "log in and ask a question; prints the cited answer")
    ask.add_argument("question")
    ask.add_argument("--user", default="demo", help="username (default: demo)")
    ask.add_argument("--password-stdin", action="store_true",
                     help="read the password from standard input (else $CAIRN_PASSWORD, the demo password, or a prompt)")
    ask.add_argument("--top-k", type=_top_k, metavar="N",
                     help=f"passages to retrieve, 1 to {MAX_TOP_K} (default: the chat service's DEFAULT_TOP_K)")
    return parser


def _command(commands: argparse._SubParsersAction, name: str, summary: str) -> argparse.ArgumentParser:
    """A (sub)command whose summary is both its line in its parent's --help and the head of its own --help."""
    return commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")


MAX_TOP_K = 50  # the most POST /api/chat takes (a test keeps it equal)


def _top_k(text: str) -> int:
    """`--top-k` refused at once, before a password is asked for, as the gateway would refuse it."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= MAX_TOP_K:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_TOP_K}, not {value}")
    return value


def _replicas(text: str) -> str:
    """`--replicas` refused as it is read, named as the option: the settings would name their field."""
    from cairn.settings import parse_replicas

    try:
        parse_replicas(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text  # CliSettings parses it again, as it parses $CAIRN_REPLICAS


def _role_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", action="append", choices=["user", "analyst", "admin"], required=True,
                        help="repeat for several roles")


def _password_stdin_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from standard input (else it is asked for twice at a prompt)")


def main(argv: list[str] | None = None) -> int:
    try:
        return _parse_and_run(argv)
    except KeyboardInterrupt:  # `cairn up` stops its services itself; elsewhere Ctrl-C needs no traceback
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader went away (`cairn ask ... | head -1`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not fail again
        return 1


def _parse_and_run(argv: list[str] | None) -> int:
    from pydantic import ValidationError

    from cairn.settings import CliSettings
    from shared.settings import print_settings_problems

    args = _parser().parse_args(argv)
    try:
        settings = CliSettings(**_up_options(args))
    except ValidationError as exc:  # a bad --replicas or environment variable: named, its value never shown
        print_settings_problems(exc, prefix="error: ")
        return 2
    return _run(args, settings)


def _run(args: argparse.Namespace, settings: CliSettings) -> int:
    from cairn import commands  # with Redis, argon2 and httpx: most of the start-up

    match args.command:
        case "up":
            return commands.up(settings, ingest_demo=not args.no_demo_docs)
        case "down":
            return commands.down(settings)
        case "status":
            return commands.status(settings)
        case "user":
            return _user_command(settings, args)
        case "ingest":
            return commands.ingest(settings, paths=args.paths)
        case "eval":
            from cairn import eval as evaluation  # loads torch and Chroma: only for this command

            return evaluation.run(
                args.dataset_dir, split=args.split, mode=args.mode, whole_docs=args.whole_docs, as_json=args.json
            )
        case "ask":
            return commands.ask(
                settings, question=args.question, username=args.user, password_stdin=args.password_stdin, top_k=args.top_k
            )
    return 2


def _up_options(args: argparse.Namespace) -> dict:
    """The `cairn up` options that override their environment variables."""
    options = {}
    if getattr(args, "replicas", None) is not None:
        options["replicas"] = args.replicas
    if getattr(args, "chroma_server", False):
        options["chroma_server"] = True
    return options


def _user_command(settings: CliSettings, args: argparse.Namespace) -> int:
    from cairn import commands

    match args.user_command:
        case "add":
            return commands.user_add(settings, username=args.username, roles=args.role, password_stdin=args.password_stdin)
        case "list":
            return commands.user_list(settings)
        case "disable":
            return commands.user_disable(settings, username=args.username)
        case "enable":
            return commands.user_enable(settings, username=args.username)
        case "delete":
            return commands.user_delete(settings, username=args.username)
        case "set-role":
            return commands.user_set_role(settings, username=args.username, roles=args.role)
        case "reset-password":
            return commands.user_reset_password(settings, username=args.username, password_stdin=args.password_stdin)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
