"""The harness: any A3 matcher, in any language, checked and timed beside a3fast over the stdio
protocol (docs/harness.md)."""
from .client import MatcherFailure, MatcherProcess
from .suite import SuiteReport, run_matching_suite

__all__ = ["MatcherFailure", "MatcherProcess", "SuiteReport", "run_matching_suite"]
