"""Model shapes: presets from workloads/*.toml, a user's TOML file, and per-field overrides."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from launchprobe.errors import UsageError

INT_FIELDS = ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab")
FLOAT_FIELDS = ("rms_eps", "rope_theta")


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
        for name in INT_FIELDS:
            if getattr(self, name) < 1:
                raise UsageError(f"shape {self.name}: {name} must be a positive integer")
        if self.heads % self.kv_heads:
            raise UsageError(
                f"shape {self.name}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.head_dim % 2:
            raise UsageError(f"shape {self.name}: head_dim must be even for rotary embeddings")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def workloads_dir() -> Path:
    """workloads/ of a source checkout, or the copy packed into an installed wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "workloads", here / "_workloads"):
        if candidate.is_dir():
            return candidate
    raise UsageError("cannot find the workloads/ folder of shape presets; reinstall launchprobe")


def preset_names() -> list[str]:
    return sorted(p.stem for p in workloads_dir().glob("*.toml"))


def load_shape(spec: str, overrides: dict[str, Any] | None = None) -> Shape:
    """``spec`` is a preset name or a path to a TOML file; ``overrides`` replace single fields."""
    path = Path(spec)
    if spec.endswith(".toml") or path.exists():
        if not path.is_file():
            raise UsageError(f"shape file {spec} does not exist")
    else:
        path = workloads_dir() / f"{spec}.toml"
        if not path.is_file():
            raise UsageError(f"unknown shape {spec!r}; presets: {', '.join(preset_names())}, or a .toml file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"shape file {path}: invalid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    data.update(overrides or {})
    return shape_from_dict(data, str(path))


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
        if key in FLOAT_FIELDS and not isinstance(value, (int, float)):
            raise UsageError(f"{label}: {key} must be a number, got {value!r}")
        values[key] = float(value) if key in FLOAT_FIELDS else value
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
