"""The saved run: typed records between collecting, analysing and rendering (schema), and their files."""

from launchprobe.run.files import check_writable, dumps_run, finite_number, load_run, save_run, to_builtins
from launchprobe.run.schema import SCHEMA_VERSION, AnalyzeRun, ClassifyRun, Run

__all__ = [
    "SCHEMA_VERSION",
    "AnalyzeRun",
    "ClassifyRun",
    "Run",
    "check_writable",
    "dumps_run",
    "finite_number",
    "load_run",
    "save_run",
    "to_builtins",
]
