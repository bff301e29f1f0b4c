"""`launchprobe classify`: options in, a ClassifyConfig built, the run out and rendered. The work is in
launchprobe.classify."""

from __future__ import annotations

from pathlib import Path

import click

from launchprobe.cli.output import check_outputs, emit_run, output_options
from launchprobe.errors import LaunchprobeError, UsageError
from launchprobe.run.schema import KERNEL_SECONDS_MAX
from launchprobe.workload.shape import MAX_BATCH, MAX_CONTEXT, shown

MAX_STEPS = 1_000_000


def parse_int_list(text: str, option: str, *, maximum: int = MAX_BATCH) -> list[int]:
    values = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"{option}: {shown(part)!r} is not an integer") from None
        if value < 1:
            raise UsageError(f"{option} {text!r}: values must be positive")
        if value > maximum:
            raise UsageError(f"{option}: {shown(value)} is outside the valid range 1..{maximum}")
        values.append(value)
    if not values:
        raise UsageError(f"{option}: give at least one value, e.g. {option} 1,8,64")
    return values


def parse_modes(values: tuple[str, ...]) -> list[str] | None:
    from launchprobe.workload.modes import MODES

    if not values:
        return None
    modes = [m for v in values for m in v.replace(" ", "").split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(f"--mode: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


EPILOG = """\b
Examples:
  launchprobe classify                                   # llama-3-8b, batches 1,8,64,256, all modes
  launchprobe classify --shape llama-3-70b --batch 1 --mode full
  launchprobe classify --shape llama-3.2-1b --batch 1,512 --context 128
  launchprobe classify --shape my-model.toml --set layers=4 --set hidden=2048
  launchprobe classify --plan --shape llama-3-70b --batch 1,64
  launchprobe classify --kernels --batch 1,64 --plot plots/     # per-kernel gaps, timeline PNGs
  launchprobe classify --kernels dense --batch 1 --mode eager   # events after every op (perturbs the step)
  launchprobe classify --kernels --mode eager --kernel-seconds 60   # a host that moves: more steps per variant
  launchprobe classify --batch 1 --mode full --projections gemv   # speed of light: Triton GEMV, PDL
  launchprobe classify --batch 1 --projections gemv --no-pdl      # what programmatic dependent launch buys
  launchprobe classify --format json > run.json
  launchprobe classify --output run.json                  # save the run; re-render with `launchprobe report`
  launchprobe classify --kernels --batch 1 --trace-out steps.json   # one step per mode, for ui.perfetto.dev
"""


@click.command(epilog=EPILOG, context_settings={"max_content_width": 110})
@click.option(
    "--shape",
    "shape_spec",
    metavar="NAME|FILE",
    help="Preset (tiny, llama-3.2-1b, llama-3-8b, llama-3-70b) or a TOML file. "
    "Default: llama-3-8b on a GPU, tiny on the CPU path.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Override one shape field, e.g. --set layers=4 (repeatable).",
)
@click.option(
    "--batch",
    "-b",
    "batch_text",
    metavar="N[,N...]",
    help="Batch sizes (sequences per decode step). Default: 1,8,64,256 on a GPU, 1,8 on the CPU.",
)
@click.option(
    "--context",
    default=1024,
    show_default=True,
    type=click.IntRange(max=MAX_CONTEXT),  # the minimum (1) is launchprobe.classify's to check
    help="KV-cache entries each sequence attends per step.",
)
@click.option(
    "--mode",
    "-m",
    "mode_values",
    multiple=True,
    metavar="MODE[,MODE...]",
    help="eager, piecewise, full (default: all three on a GPU, eager on the CPU).",
)
@click.option("--dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option(
    "--warmup",
    default=10,
    show_default=True,
    type=click.IntRange(0, MAX_STEPS),
    help="Warm-up steps per (mode, batch).",
)
@click.option(
    "--steps",
    default=50,
    show_default=True,
    type=click.IntRange(max=MAX_STEPS),
    help="Measured steps per (mode, batch).",
)
@click.option("--device", default="auto", show_default=True, help="auto, cuda, cuda:N or cpu.")
@click.option(
    "--capture-sizes",
    "capture_text",
    metavar="N[,N...]|vllm",
    default="vllm",
    show_default=True,
    help="CUDA-graph capture sizes; a batch is padded up to the next one.",
)
@click.option(
    "--ceilings",
    "ceilings_source",
    type=click.Choice(["measured", "datasheet"]),
    default="measured",
    show_default=True,
    help="Ceilings for the verdicts: measured on this GPU (cached) or datasheet.",
)
@click.option("--remeasure-ceilings", is_flag=True, help="Measure the ceilings again instead of using the cache.")
@click.option(
    "--kernels",
    "kernel_density",
    type=click.Choice(["sampled", "dense"]),
    is_flag=False,
    flag_value="sampled",
    default=None,
    metavar="[sampled|dense]",
    help="Add a per-kernel pass: gaps before each kernel, op table, timeline. sampled (the default with a bare "
    "--kernels): end events in pairs a few ops apart, a few per step, rotated and stitched, the step within 2% of "
    "clean; dense: an event after every op, which perturbs the step it times.",
)
@click.option(
    "--kernel-seconds",
    type=click.FloatRange(0.1, KERNEL_SECONDS_MAX),
    default=5.0,
    show_default=True,
    help="Device time for the sampled per-kernel cycles of each (mode, batch). More where the report says the 2% "
    "budget or the gap total is NOT DECIDED: it names the value that would decide it (a host that moves between "
    "speeds needs more steps per variant).",
)
@click.option(
    "--nvtx",
    type=click.Choice(["off", "steps", "ops"]),
    default="steps",
    show_default=True,
    help="NVTX ranges for nsys: one per step, or also per layer, op and graph piece (its cost is measured).",
)
@click.option(
    "--projections",
    type=click.Choice(["cublas", "gemv"]),
    default="cublas",
    show_default=True,
    help="Projection kernels: cuBLAS GEMMs (as vLLM), or launchprobe's Triton GEMV at batch <= 16 (cuBLAS above): "
    "the speed-of-light configuration, 10 kernels per layer.",
)
@click.option(
    "--pdl/--no-pdl",
    default=True,
    show_default=True,
    help="Programmatic dependent launch of the Triton kernels (Hopper+): each starts while the previous one ends.",
)
@click.option("--plan", is_flag=True, help="Print the per-step cost model and floors; run nothing.")
@output_options(kind="classify")
@click.option("--quiet", "-q", is_flag=True, help="No progress display on stderr.")
def classify(
    shape_spec: str | None,
    overrides: tuple[str, ...],
    batch_text: str | None,
    context: int,
    mode_values: tuple[str, ...],
    dtype: str,
    warmup: int,
    steps: int,
    device: str,
    capture_text: str,
    ceilings_source: str,
    remeasure_ceilings: bool,
    kernel_density: str | None,
    kernel_seconds: float,
    nvtx: str,
    projections: str,
    pdl: bool,
    plan: bool,
    fmt: str | None,
    output: Path | None,
    table: str | None,
    trace_out: Path | None,
    force: bool,
    plot_dir: Path | None,
    quiet: bool,
) -> None:
    """Run the synthetic Llama decode loop in eager, piecewise and full-graph modes and classify each run
    as launch-bound, memory-bound or compute-bound, from ceilings measured on this machine."""
    from launchprobe.api import classify as run_classify
    from launchprobe.api import require
    from launchprobe.workload.shape import parse_override

    require("torch", "classify", "launchprobe classify")  # before anything else: one line, exit 5
    check_outputs(output, force, fmt=fmt, table=table, trace_out=trace_out, plot_dir=plot_dir)  # before minutes
    from launchprobe.classify import ClassifyInterrupted

    try:
        run = run_classify(
            shape=shape_spec,
            overrides=dict(parse_override(text) for text in overrides),
            batches=parse_int_list(batch_text, "--batch") if batch_text else None,
            context=context,
            modes=parse_modes(mode_values),
            dtype=dtype,
            warmup=warmup,
            steps=steps,
            device=device,
            capture_sizes=None if capture_text == "vllm" else parse_int_list(capture_text, "--capture-sizes"),
            ceilings=ceilings_source,
            remeasure_ceilings=remeasure_ceilings,
            kernels=kernel_density or False,
            kernel_seconds=kernel_seconds,
            nvtx=nvtx,
            projections=projections,
            pdl=pdl,
            plan=plan,
            progress=not quiet,
        )
    except ClassifyInterrupted as stop:  # Ctrl-C: keep and show the rows that were finished, then exit 130
        emit_run(stop.run, fmt=fmt, output=output, force=force, plot_dir=plot_dir, table=table)
        kept = f"; the partial run (marked incomplete) is saved in {output}" if output is not None else ""
        raise LaunchprobeError(f"{stop}{kept}", exit_code=stop.exit_code) from None
    emit_run(run, fmt=fmt, output=output, force=force, plot_dir=plot_dir, table=table, trace_out=trace_out)
