"""Model shapes: presets from workloads/*.toml, a user's TOML file, and per-field overrides.

A spec is a user's file when it has a path separator or ends in .toml, and a preset name otherwise, so a file or
folder in the working directory that happens to be called ``llama-3-8b`` never stands in for the preset.

Presets are package data: ``workloads/`` at the top of the source tree, packed into the wheel as
``launchprobe/_workloads`` (pyproject's force-include). They are read through importlib.resources from the
installed package; an editable checkout, which has no ``_workloads``, reads the source tree's ``workloads/``,
found as the folder beside the ``pyproject.toml`` of the project that holds this very package.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from launchprobe.errors import UsageError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

INT_FIELDS = ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab")
FLOAT_FIELDS = ("rms_eps", "rope_theta")
TEXT_FIELDS = ("name", "description")

# Valid ranges, inclusive: generous around every published decoder (Llama 3.1 405B: 126 layers, hidden 16384,
# ffn 53248, 128 heads; vocabularies up to ~256k), small enough that the cost model and the memory plan stay
# meaningful and a typo (layers=10000000) is refused instead of planned for minutes.
INT_RANGES: dict[str, tuple[int, int]] = {
    "layers": (1, 1024),
    "hidden": (1, 1 << 17),
    "ffn": (1, 1 << 20),
    "heads": (1, 1024),
    "kv_heads": (1, 1024),
    "head_dim": (2, 1024),
    "vocab": (1, 1 << 22),
}
# (low, high, low is inclusive): rms_eps in (0, 1), rope_theta in [1, 1e12]
FLOAT_RANGES: dict[str, tuple[float, float, bool]] = {"rms_eps": (0.0, 1.0, False), "rope_theta": (1.0, 1e12, True)}
MAX_CONTEXT = 1 << 24  # KV entries per sequence (16M: past every published context window)
MAX_BATCH = 1 << 16

PRESET_PACKAGE = "launchprobe"
PRESET_FOLDER = "_workloads"  # inside the installed package (pyproject: force-include workloads)


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool = False
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0
    description: str = ""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_dim(self) -> int:
        return self.q_dim + 2 * self.kv_dim

    def validate(self) -> Shape:
        for name, (low, high) in INT_RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise UsageError(f"shape {self.name}: {name}={shown(value)} is outside its valid range {low}..{high}")
        for name, (bottom, top, inclusive) in FLOAT_RANGES.items():
            number = getattr(self, name)
            above = number >= bottom if inclusive else number > bottom
            if not (math.isfinite(number) and above and number <= top):
                bracket = "[" if inclusive else "("
                raise UsageError(
                    f"shape {self.name}: {name}={number} is outside its valid range {bracket}{bottom:g}, {top:g}]"
                )
        if self.heads % self.kv_heads:
            raise UsageError(
                f"shape {self.name}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.head_dim % 2:
            raise UsageError(f"shape {self.name}: head_dim must be even for rotary embeddings")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def shown(value: Any) -> str:
    """A value for an error line: an absurdly long number is shortened to its first digits and its length."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:8]}... ({len(text)} digits)"


def presets() -> Traversable:
    """The folder of preset TOML files: the installed package's data, else the source tree's workloads/."""
    packaged = resources.files(PRESET_PACKAGE) / PRESET_FOLDER
    if packaged.is_dir():
        return packaged
    source = source_tree_workloads()
    if source is not None:
        return source
    raise UsageError("cannot find launchprobe's shape presets (launchprobe/_workloads); reinstall launchprobe")


def source_tree_workloads() -> Path | None:
    """workloads/ of the checkout this package runs from (editable install, PYTHONPATH), or None when the package
    does not sit in a launchprobe source tree (the folder above it has no launchprobe pyproject.toml)."""
    package = Path(str(resources.files(PRESET_PACKAGE))).resolve()
    root = package.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    workloads = root / "workloads"
    if project.get("name") != PRESET_PACKAGE or not workloads.is_dir():
        return None
    return workloads


def preset_names() -> list[str]:
    return sorted(entry.name[: -len(".toml")] for entry in presets().iterdir() if entry.name.endswith(".toml"))


def is_path_spec(spec: str) -> bool:
    """A user's file: the spec has a path separator or a .toml suffix. Anything else names a preset."""
    separators = {"/", os.sep, *([os.altsep] if os.altsep else [])}
    return spec.lower().endswith(".toml") or any(sep in spec for sep in separators)


def load_shape(spec: str, overrides: dict[str, Any] | None = None) -> Shape:
    """``spec`` is a preset name or a path to a TOML file; ``overrides`` replace single fields."""
    if is_path_spec(spec):
        path = Path(spec)
        if not path.is_file():
            raise UsageError(f"shape file {spec} does not exist" if not path.exists() else f"{spec} is not a file")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"shape file {spec}: cannot read it: {exc.strerror}") from None
        label, stem = str(path), path.stem
    else:
        names = preset_names()
        if spec not in names:
            hint = f"; for the file {spec} here, write ./{spec}" if Path(spec).exists() else ", or a .toml file"
            raise UsageError(f"unknown shape {spec!r}; presets: {', '.join(names)}{hint}")
        raw = (presets() / f"{spec}.toml").read_bytes()
        label, stem = f"preset {spec}", spec
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"shape file {label}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"shape file {label}: invalid TOML: {exc}") from None
    data.setdefault("name", stem)
    data.update(overrides or {})
    return shape_from_dict(data, label)


def shape_from_dict(data: dict[str, Any], label: str = "shape") -> Shape:
    known = {f.name for f in dataclasses.fields(Shape)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{label}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = [name for name in INT_FIELDS if name not in data]
    if missing:
        raise UsageError(f"{label}: missing field(s) {', '.join(missing)}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in INT_FIELDS and (not isinstance(value, int) or isinstance(value, bool)):
            raise UsageError(f"{label}: {key} must be an integer, got {value!r}")
        if key in FLOAT_FIELDS and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise UsageError(f"{label}: {key} must be a number, got {value!r}")
        if key in TEXT_FIELDS and not isinstance(value, str):
            raise UsageError(f"{label}: {key} must be a string, got {value!r}")
        if key == "tie_embeddings" and not isinstance(value, bool):
            raise UsageError(f"{label}: tie_embeddings must be true or false, got {value!r}")
        try:
            values[key] = float(value) if key in FLOAT_FIELDS else value
        except OverflowError:  # an integer too large for a float
            raise UsageError(f"{label}: {key}={shown(value)} is outside its valid range") from None
    return Shape(**values).validate()


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``FIELD=VALUE`` from the command line."""
    if "=" not in text:
        raise UsageError(f"--set {text!r}: expected FIELD=VALUE, e.g. --set layers=4")
    key, raw = (part.strip() for part in text.split("=", 1))
    if key in INT_FIELDS:
        try:
            return key, int(raw)
        except ValueError:
            raise UsageError(f"--set {key}: {raw!r} is not an integer") from None
    if key in FLOAT_FIELDS:
        try:
            return key, float(raw)
        except ValueError:
            raise UsageError(f"--set {key}: {raw!r} is not a number") from None
    if key == "tie_embeddings":
        if raw.lower() not in ("true", "false"):
            raise UsageError(f"--set tie_embeddings: expected true or false, got {raw!r}")
        return key, raw.lower() == "true"
    if key in ("name", "description"):
        return key, raw
    raise UsageError(f"--set: unknown field {key!r}; fields: {', '.join((*INT_FIELDS, *FLOAT_FIELDS))}")
