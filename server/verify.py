"""Verification before ready: a model is served only once its sessions reproduce its examples.

The examples come with the model source:

* a saved graph directory: ``dir/examples/`` (listed and checksummed in its manifest), held
  to the tolerance stored with them;
* an exported ``model.onnx``: ``model.examples/`` beside it, written by ``flowserve
  export``, with the criteria of its precision (``verify.json``).

Every instance (ONNX Runtime session) runs every example batch, and the same rows at a
second batch size where the batch axis is dynamic: that is the model's warmup too, unless
``config.json`` sets one. A model that does not match stays ``UNAVAILABLE`` with the
report as its reason; ``--skip-verify`` serves it unchecked, and says so loudly. A model
without examples loads unverified, unless ``--require-verified`` refuses it. A stored
tolerance looser than any export writes (``MAX_STORED_RTOL``) is refused: it would let a
tampered model pass::

    verification = verify_before_ready(model, source, skip=False)   # raises ModelLoadError
"""

from __future__ import annotations

import logging
import pathlib

from flowserve.errors import FlowserveError
from flowserve.exporter.proof import prove
from flowserve.format.examples import INDEX_FILE, read_examples
from flowserve.format.manifest import EXAMPLES_DIR, MANIFEST
from flowserve.format.verification import TOLERANCES, VERIFY_FILE, Criteria, read_sidecar, sidecar_path

from .errors import ModelLoadError
from .loading import ONNX_FILE, check_contained, nested_saved_directory
from .model import ServedModel

log = logging.getLogger("flowserve.server")

# the loosest tolerance export ever holds a model to (its lowest precision's parity
# tolerance); flowserve never writes a looser one, so a looser stored one was edited
LOOSEST_DTYPE, MAX_STORED_RTOL = max(TOLERANCES.items(), key=lambda item: item[1])


def reference_for(source: pathlib.Path, require: bool = False):
    """(precision, criteria, examples) stored with model ``source``, or None without any
    (a ``ModelLoadError`` when ``require``); a stored tolerance beyond ``MAX_STORED_RTOL``
    is a ``ModelLoadError`` naming its file."""
    source = nested_saved_directory(source) or source
    try:
        if source.is_dir() and (source / MANIFEST).is_file():
            examples = read_examples(source)
            where = source / (MANIFEST if examples is None else f"{EXAMPLES_DIR}/{INDEX_FILE}")
            found = None if examples is None else ("fp32", Criteria(rtol=examples.rtol), examples)
        else:
            model_file = source / ONNX_FILE if source.is_dir() else source
            where = sidecar_path(model_file) / VERIFY_FILE
            if sidecar_path(model_file).exists():
                check_contained(sidecar_path(model_file), model_file.parent)
            sidecar = read_sidecar(model_file)
            found = None if sidecar is None else (sidecar[0].precision, sidecar[0].criteria, sidecar[1])
    except FlowserveError as exc:
        raise ModelLoadError(f"{source}: reference examples unusable: {exc}") from None
    if found is None and require:
        missing = "lists no reference examples" if where.name == MANIFEST else "missing"
        raise ModelLoadError(f"{where}: {missing}: --require-verified refuses a model it cannot "
                             "verify (save it with flow.save(graph, dir, examples=...), or export it "
                             "with flowserve export)")
    if found is not None and (found[1].rtol or 0) > MAX_STORED_RTOL:
        raise ModelLoadError(f"{where}: stored tolerance rtol {found[1].rtol:g} refused: expected at "
                             f"most {MAX_STORED_RTOL:g}, the loosest export holds a model to (for "
                             f"{LOOSEST_DTYPE}); a looser one would let a wrong model verify")
    return found


def verify_before_ready(model: ServedModel, source: pathlib.Path, skip: bool = False,
                        require: bool = False) -> dict:
    """Verify every instance of ``model`` on the examples of ``source`` and warm it up;
    returns the ``parameters`` its metadata shows. Raises ``ModelLoadError`` (with the
    report) when an instance does not reproduce the examples, or (``require``) when
    ``source`` has none."""
    reference = None if skip else reference_for(source, require)
    if skip:
        log.warning("VERIFICATION SKIPPED (--skip-verify): model %s version %s is served without checking "
                    "that it reproduces its reference examples", model.name, model.version)
    if reference is None or not model.config.warmup_from_examples:
        model.warmup()
    model.warm_batch_buckets()
    if reference is None:
        reason = "skipped (--skip-verify)" if skip else "no reference examples stored with the model"
        return {"verified": False, "verification": reason}
    precision, criteria, examples = reference
    _check_names(model, examples, source)
    proof = None
    for instance, runner in enumerate(model.runners):
        try:
            proof = prove(runner.run, examples, criteria, batched=bool(model.max_batch_size),
                          precision=precision, max_batch=model.max_batch_size)
        except (FlowserveError, ValueError) as exc:
            raise ModelLoadError(f"{source}: verification could not run the examples: {exc}") from None
        if not proof.passed:
            report = f"verification failed on instance {instance} ({model.device}): {proof.summary()}"
            log.error("model %s version %s: %s\n%s", model.name, model.version, report, proof.table())
            raise ModelLoadError(f"{source}: {report}")
    log.info("model %s version %s verified: %s", model.name, model.version, proof.summary())
    return {"verified": True, "verification": proof.parameters()}


def _check_names(model: ServedModel, examples, source: pathlib.Path) -> None:
    inputs = {spec.name for spec in model.inputs}
    outputs = {spec.name for spec in model.outputs}
    if set(examples.input_names) != inputs or not set(examples.output_names) <= outputs:
        raise ModelLoadError(f"{source}: the reference examples are for inputs {examples.input_names} and "
                             f"outputs {examples.output_names}; the model has {sorted(inputs)} and "
                             f"{sorted(outputs)}")
