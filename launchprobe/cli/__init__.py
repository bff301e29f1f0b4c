"""Command-line entry point: a click group whose subcommands are imported only when used.

Each subcommand lives in its own small module (``launchprobe/cli/<name>.py``) that parses options and calls
library code, so ``launchprobe --help`` never imports torch or probes CUDA.
"""

from __future__ import annotations

import importlib
import sys

import click

from launchprobe import __version__
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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="launchprobe")
def cli() -> None:
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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; expected failures become one line on stderr and a documented exit code."""
    try:
        result = cli.main(args=argv, standalone_mode=False)
    except LaunchprobeError as exc:
        click.echo(f"launchprobe: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("launchprobe: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("launchprobe: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as exc:  # one line, like every other error, not click's three
        where = exc.ctx.command_path if exc.ctx is not None else "launchprobe"
        click.echo(f"launchprobe: error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"launchprobe: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    # With standalone_mode=False click returns ctx.exit(code)'s code instead of exiting.
    if isinstance(result, int) and not isinstance(result, bool):
        sys.exit(result)
