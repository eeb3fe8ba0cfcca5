"""The machine a benchmark ran on, as pytest-benchmark's JSON names it."""
from __future__ import annotations

import os
import platform
from typing import Any

from ..engines import ENGINE

__all__ = ["machine_info"]


def machine_info() -> dict[str, Any]:
    return {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
            "python_implementation": platform.python_implementation(),
            "python_version": platform.python_version(), "release": platform.release(),
            "system": platform.system(), "cpu": {"count": os.cpu_count()}, "a3fast_default_engine": ENGINE}
