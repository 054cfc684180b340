"""The live probe: run a model here (in a child process), measure its real cache, memory and speed, and set them
beside kvscope's prediction. Importing this package never imports torch; only core.probe.worker does."""

from core.probe.cli import add_probe_parser
from core.probe.request import RANDOM_LABEL, ContextResult, ProbeRequest, ProbeResult
from core.probe.results import load_results
from core.probe.runner import ProbeBusy, ProbeJob, active_job, run_probe
from core.probe.scale import Scaled, layer_pattern, scale_layers

__all__ = [
    "RANDOM_LABEL",
    "ContextResult",
    "ProbeBusy",
    "ProbeJob",
    "ProbeRequest",
    "ProbeResult",
    "Scaled",
    "active_job",
    "add_probe_parser",
    "layer_pattern",
    "load_results",
    "run_probe",
    "scale_layers",
]
