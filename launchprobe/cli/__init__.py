"""Command-line entry point: a click group whose subcommands are imported only when used.

Each subcommand lives in its own small module (``launchprobe/cli/<name>.py``) that parses options and calls
library code, so ``launchprobe --help`` never imports torch or probes CUDA.
"""

from __future__ import annotations

import importlib
import sys

import click

from launchprobe import __version__
from launchprobe.cli.streams import guard_streams
from launchprobe.errors import EXIT_INTERRUPTED, LaunchprobeError

# name -> (module, attribute, one-line help shown by `launchprobe --help`)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "classify": ("launchprobe.cli.classify", "classify", "Run the synthetic Llama decode loop and classify it."),
    "nsys": ("launchprobe.cli.nsys", "nsys", "Run a command under Nsight Systems and analyse the trace."),
    "analyze": ("launchprobe.cli.analyze", "analyze", "Analyse an existing .nsys-rep, .sqlite or Kineto trace."),
    "report": ("launchprobe.cli.report", "report", "Re-render a saved run file."),
    "compare": ("launchprobe.cli.compare", "compare", "Compare two run files; fail on a real regression."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module_name, attr, _ = SUBCOMMANDS[cmd_name]
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing every subcommand module.
        rows = [(name, short) for name, (_, _, short) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="launchprobe")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Is the GPU computing, reading memory, or idle waiting for the CPU during LLM decode?

    \b
    Examples:
      launchprobe classify                         # synthetic decode loop, all modes, default batches
      launchprobe classify --plan --shape llama-3-70b
      launchprobe nsys -- python serve.py --model my-model
      launchprobe analyze report.nsys-rep --range 'decode_step.*'
      launchprobe report run.json --format markdown
      launchprobe compare base.json new.json --threshold 5%
    """
    if ctx.invoked_subcommand is None:  # bare `launchprobe`: the help, as asked for, not as an error
        click.echo(ctx.get_help())


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; expected failures become one line on stderr and a documented exit code.

    stdout and stderr are guarded for the run (launchprobe.cli.streams): a closed pipe (`| head`) ends
    the output quietly and the command still exits with its own status; a full disk or an encoding that cannot
    take the report is one error line."""
    restore = guard_streams()
    try:
        code = run(argv)
        try:
            sys.stdout.flush()  # here, not at interpreter exit, so that a failing stdout is one line too
        except LaunchprobeError as exc:
            code = _error(str(exc), exc.exit_code)
    finally:
        restore()
    sys.exit(code)


def run(argv: list[str] | None) -> int:
    """The exit code of one command line."""
    try:
        result = cli.main(args=argv, standalone_mode=False)
    except LaunchprobeError as exc:
        return _error(str(exc), exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        return _error("interrupted", EXIT_INTERRUPTED, prefix="launchprobe: ")
    except click.UsageError as exc:  # one line, like every other error, not click's three
        where = exc.ctx.command_path if exc.ctx is not None else "launchprobe"
        return _error(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
    except click.ClickException as exc:
        return _error(exc.format_message(), exc.exit_code)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # a command's sys.exit(code), e.g. compare's 3
        return _exit_code(exc.code)
    # With standalone_mode=False click returns ctx.exit(code)'s code instead of exiting.
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    click.echo(str(code), err=True)  # sys.exit("message"), as Python itself prints it
    return 1


def _error(message: str, code: int, *, prefix: str = "launchprobe: error: ") -> int:
    from launchprobe.console import printable

    click.echo(f"{prefix}{printable(message)}", err=True)  # one line, whatever names or paths it quotes
    return code
